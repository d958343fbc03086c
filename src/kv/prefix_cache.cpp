#include "kv/prefix_cache.h"

#include <algorithm>

namespace deepinfer::kv {

std::optional<PrefixCache::Hit> PrefixCache::lookup(const std::vector<int32_t>& tokens) const {
  std::optional<Hit> best;
  for (const Entry& e : entries_) {
    if (e.tokens.empty() || e.tokens.size() >= tokens.size()) continue;
    if (best && int64_t(e.tokens.size()) <= best->n_tokens) continue;
    if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) best = Hit{e.id, int64_t(e.tokens.size())};
  }
  return best;
}

std::optional<uint64_t> PrefixCache::find(const std::vector<int32_t>& tokens) const {
  for (const Entry& e : entries_)
    if (e.tokens == tokens) return e.id;
  return std::nullopt;
}

std::vector<uint64_t> PrefixCache::insert(uint64_t snapshot_id, std::vector<int32_t> tokens) {
  entries_.push_back(Entry{snapshot_id, std::move(tokens), ++clock_});
  std::vector<uint64_t> evicted;
  while (int64_t(entries_.size()) > max_entries_) {
    auto id = oldest();
    evicted.push_back(*id);
    erase(*id);
  }
  return evicted;
}

bool PrefixCache::erase(uint64_t snapshot_id) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == snapshot_id; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

void PrefixCache::touch(uint64_t snapshot_id) {
  for (Entry& e : entries_)
    if (e.id == snapshot_id) e.last_use = ++clock_;
}

std::optional<uint64_t> PrefixCache::oldest(std::optional<uint64_t> keep) const {
  const Entry* best = nullptr;
  for (const Entry& e : entries_)
    if ((!keep || e.id != *keep) && (!best || e.last_use < best->last_use)) best = &e;
  if (!best) return std::nullopt;
  return best->id;
}

const std::vector<int32_t>* PrefixCache::tokens(uint64_t snapshot_id) const {
  for (const Entry& e : entries_)
    if (e.id == snapshot_id) return &e.tokens;
  return nullptr;
}

std::vector<uint64_t> PrefixCache::ids() const {
  std::vector<const Entry*> by_age;
  for (const Entry& e : entries_) by_age.push_back(&e);
  std::sort(by_age.begin(), by_age.end(), [](const Entry* a, const Entry* b) { return a->last_use < b->last_use; });
  std::vector<uint64_t> out;
  for (const Entry* e : by_age) out.push_back(e->id);
  return out;
}

}  // namespace deepinfer::kv
