#include "kv/kv_manager.h"

#include <stdexcept>

namespace deepinfer::kv {

KvManager::KvManager(const KvSpec& spec, int64_t n_blocks) : spec_(spec), pool_(n_blocks) {}

int64_t KvManager::held(OwnerId owner) const {
  auto it = tables_.find(owner);
  return it == tables_.end() ? 0 : int64_t(it->second.size());
}

int64_t KvManager::extra_needed(OwnerId owner, int64_t n_tokens) const {
  const int64_t want = spec_.blocks_for(n_tokens);
  const int64_t have = held(owner);
  return want > have ? want - have : 0;
}

bool KvManager::reserve(OwnerId owner, int64_t n_tokens) {
  const int64_t extra = extra_needed(owner, n_tokens);
  if (extra == 0) return true;
  if (extra > pool_.free_count()) return false;
  return pool_.allocate(extra, tables_[owner]);
}

void KvManager::free(OwnerId owner) {
  auto it = tables_.find(owner);
  if (it == tables_.end()) return;
  pool_.release(it->second);
  tables_.erase(it);
}

void KvManager::transfer(OwnerId from, OwnerId to) {
  if (from == to) return;
  if (held(to) != 0) throw std::logic_error("KV: transfer onto an owner that holds blocks");
  auto it = tables_.find(from);
  if (it == tables_.end()) return;
  std::vector<BlockId> blocks = std::move(it->second);
  tables_.erase(it);
  tables_[to] = std::move(blocks);
}

std::vector<OwnerId> KvManager::owners() const {
  std::vector<OwnerId> out;
  for (const auto& [o, t] : tables_)
    if (!t.empty()) out.push_back(o);
  return out;
}

bool KvManager::check_integrity(std::string* why) const {
  if (!pool_.check(why)) return false;
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  std::vector<int32_t> refs(size_t(pool_.total()), 0);
  int64_t n_listed = 0;
  for (const auto& [owner, table] : tables_) {
    for (BlockId b : table) {
      if (b < 0 || b >= pool_.total()) return fail("table of owner " + std::to_string(owner) + " has a bad id");
      if (++refs[size_t(b)] > 1) return fail("block " + std::to_string(b) + " is in two tables");
      ++n_listed;
    }
  }
  for (size_t b = 0; b < refs.size(); ++b)
    if (refs[b] != pool_.ref_count(BlockId(b)))
      return fail("block " + std::to_string(b) + ": tables and pool disagree on its references");
  if (n_listed != pool_.used_count()) return fail("blocks in tables != blocks used");
  return true;
}

}  // namespace deepinfer::kv
