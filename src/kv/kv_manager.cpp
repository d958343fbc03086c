#include "kv/kv_manager.h"

#include <stdexcept>
#include <unordered_set>

namespace deepinfer::kv {

KvManager::KvManager(const KvSpec& spec, int64_t n_blocks) : spec_(spec), pool_(n_blocks) {}

int64_t KvManager::held(OwnerId owner) const {
  auto it = tables_.find(owner);
  return it == tables_.end() ? 0 : it->second.size();
}

int64_t KvManager::extra_needed(OwnerId owner, int64_t n_tokens) const {
  const int64_t want = spec_.blocks_for(n_tokens);
  const int64_t have = held(owner);
  return want > have ? want - have : 0;
}

const std::vector<BlockId>& KvManager::pages(OwnerId owner) const {
  static const std::vector<BlockId> none;
  auto it = tables_.find(owner);
  return it == tables_.end() ? none : it->second.pages;
}

const std::vector<BlockId>& KvManager::fixed(OwnerId owner) const {
  static const std::vector<BlockId> none;
  auto it = tables_.find(owner);
  return it == tables_.end() ? none : it->second.fixed;
}

bool KvManager::reserve(OwnerId owner, int64_t n_tokens) {
  const int64_t extra = extra_needed(owner, n_tokens);
  if (extra == 0) return true;
  if (extra > pool_.free_count()) return false;
  Table& t = tables_[owner];
  const int64_t fixed = spec_.fixed_blocks - int64_t(t.fixed.size());
  pool_.allocate(fixed, t.fixed);
  pool_.allocate(extra - fixed, t.pages);
  return true;
}

void KvManager::truncate(OwnerId owner, int64_t n_tokens) {
  auto it = tables_.find(owner);
  if (it == tables_.end()) return;
  std::vector<BlockId>& pages = it->second.pages;
  const size_t keep = size_t(spec_.pages_for(n_tokens));
  if (pages.size() <= keep) return;
  std::vector<BlockId> tail(pages.begin() + ptrdiff_t(keep), pages.end());
  pages.resize(keep);
  pool_.release(tail);
}

void KvManager::free(OwnerId owner) {
  auto it = tables_.find(owner);
  if (it == tables_.end()) return;
  pool_.release(it->second.fixed);
  pool_.release(it->second.pages);
  tables_.erase(it);
}

void KvManager::transfer(OwnerId from, OwnerId to) {
  if (from == to) return;
  if (held(to) != 0) throw std::logic_error("KV: transfer onto an owner that holds blocks");
  auto it = tables_.find(from);
  if (it == tables_.end()) return;
  Table t = std::move(it->second);
  tables_.erase(it);
  tables_[to] = std::move(t);
}

int64_t KvManager::fork_cost(int64_t n_tokens) const {
  const bool partial = n_tokens % spec_.block_tokens != 0;
  return spec_.fixed_blocks + (partial ? 1 : 0);
}

bool KvManager::fork(OwnerId from, OwnerId to, int64_t n_tokens) {
  if (from == to || held(to) != 0) throw std::logic_error("KV: fork onto an owner that holds blocks");
  auto it = tables_.find(from);
  const int64_t n_pages = spec_.pages_for(n_tokens), n_full = n_tokens / spec_.block_tokens;
  if (it == tables_.end() || int64_t(it->second.pages.size()) < n_pages)
    throw std::logic_error("KV: fork past the pages of its source");
  if (fork_cost(n_tokens) > pool_.free_count()) return false;
  Table t;
  t.pages.assign(it->second.pages.begin(), it->second.pages.begin() + n_full);
  pool_.retain(t.pages);
  pool_.allocate(spec_.fixed_blocks, t.fixed);
  pool_.allocate(n_pages - n_full, t.pages);
  tables_[to] = std::move(t);
  return true;
}

int64_t KvManager::freeable(const std::vector<OwnerId>& owners) const {
  std::unordered_map<BlockId, int32_t> refs;  // references the given owners hold
  for (OwnerId o : owners) {
    auto it = tables_.find(o);
    if (it == tables_.end()) continue;
    for (BlockId b : it->second.fixed) ++refs[b];
    for (BlockId b : it->second.pages) ++refs[b];
  }
  int64_t n = 0;
  for (const auto& [b, r] : refs) n += r == pool_.ref_count(b) ? 1 : 0;
  return n;
}

std::vector<OwnerId> KvManager::owners() const {
  std::vector<OwnerId> out;
  for (const auto& [o, t] : tables_)
    if (t.size() > 0) out.push_back(o);
  return out;
}

bool KvManager::check_integrity(std::string* why) const {
  if (!pool_.check(why)) return false;
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  std::vector<int32_t> refs(size_t(pool_.total()), 0);
  std::vector<char> fixed(size_t(pool_.total()), 0);
  for (const auto& [owner, table] : tables_) {
    std::unordered_set<BlockId> mine;
    for (const auto* part : {&table.fixed, &table.pages})
      for (BlockId b : *part) {
        if (b < 0 || b >= pool_.total()) return fail("table of owner " + std::to_string(owner) + " has a bad id");
        if (!mine.insert(b).second)
          return fail("owner " + std::to_string(owner) + " holds block " + std::to_string(b) + " twice");
        ++refs[size_t(b)];
        if (part == &table.fixed) fixed[size_t(b)] = 1;
      }
    if (!table.fixed.empty() && int64_t(table.fixed.size()) != spec_.fixed_blocks)
      return fail("owner " + std::to_string(owner) + " holds a partial fixed part");
  }
  int64_t n_held = 0;
  for (size_t b = 0; b < refs.size(); ++b) {
    if (refs[b] != pool_.ref_count(BlockId(b)))
      return fail("block " + std::to_string(b) + ": " + std::to_string(refs[b]) + " tables hold it, the pool counts " +
                  std::to_string(pool_.ref_count(BlockId(b))));
    if (fixed[b] && refs[b] > 1) return fail("fixed block " + std::to_string(b) + " is shared");
    n_held += refs[b] > 0 ? 1 : 0;
  }
  if (n_held != pool_.used_count()) return fail("blocks in tables != blocks used");
  return true;
}

}  // namespace deepinfer::kv
