#include "kv/block_pool.h"

#include <stdexcept>

namespace deepinfer::kv {

BlockPool::BlockPool(int64_t n_blocks) {
  if (n_blocks < 0 || n_blocks > INT32_MAX) throw std::invalid_argument("KV block count out of range");
  refs_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  // Highest id at the bottom, so allocation hands out 0, 1, 2, ... on a fresh pool.
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(BlockId(b));
}

bool BlockPool::allocate(int64_t n, std::vector<BlockId>& out) {
  if (n < 0 || n > free_count()) return false;
  for (int64_t i = 0; i < n; ++i) {
    const BlockId b = free_.back();
    free_.pop_back();
    refs_[size_t(b)] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::retain(const std::vector<BlockId>& blocks) {
  for (BlockId b : blocks) {
    if (refs_.at(size_t(b)) <= 0) throw std::logic_error("KV: retain of a free block");
    ++refs_[size_t(b)];
  }
}

void BlockPool::release(const std::vector<BlockId>& blocks) {
  for (BlockId b : blocks) {
    int32_t& r = refs_.at(size_t(b));
    if (r <= 0) throw std::logic_error("KV: release of a free block");
    if (--r == 0) free_.push_back(b);
  }
}

bool BlockPool::check(std::string* why) const {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  std::vector<char> seen(refs_.size(), 0);
  for (BlockId b : free_) {
    if (b < 0 || size_t(b) >= refs_.size()) return fail("free list holds an id out of range");
    if (seen[size_t(b)]) return fail("block " + std::to_string(b) + " is on the free list twice");
    seen[size_t(b)] = 1;
    if (refs_[size_t(b)] != 0) return fail("free block " + std::to_string(b) + " has a reference");
  }
  int64_t held = 0;
  for (size_t b = 0; b < refs_.size(); ++b) {
    if (refs_[b] < 0) return fail("negative reference count");
    if (!seen[b] && refs_[b] == 0) return fail("block " + std::to_string(b) + " is neither free nor held");
    if (refs_[b] > 0) ++held;
  }
  if (held + free_count() != total()) return fail("free + used != total");
  return true;
}

}  // namespace deepinfer::kv
