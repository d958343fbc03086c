// A fixed pool of KV block ids with reference counts. A block is either free (ref 0, on the
// free list exactly once) or held (ref > 0). Ids are handed out LIFO so recently freed
// blocks are reused first.
//
// A block id is also the id of a page of the engine's KV arena (core/page_arena.h): the
// pool decides who may use which page; the runner puts the rows behind it. A reference count
// above 1 is a page shared by several owners (kv_manager.h: fork).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::kv {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int64_t n_blocks);

  int64_t total() const { return int64_t(refs_.size()); }
  int64_t free_count() const { return int64_t(free_.size()); }
  int64_t used_count() const { return total() - free_count(); }

  // Appends n fresh blocks (ref 1) to out; false and no change if fewer than n are free.
  bool allocate(int64_t n, std::vector<BlockId>& out);
  // ref + 1 on each block (sharing). Every block must be held.
  void retain(const std::vector<BlockId>& blocks);
  // ref - 1 on each block; a block reaching 0 returns to the free list.
  void release(const std::vector<BlockId>& blocks);
  int32_t ref_count(BlockId b) const { return refs_.at(size_t(b)); }

  // free + used == total, each free block listed once with ref 0, every other block ref > 0.
  bool check(std::string* why = nullptr) const;

 private:
  std::vector<int32_t> refs_;
  std::vector<BlockId> free_;
};

}  // namespace deepinfer::kv
