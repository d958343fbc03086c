// Block tables: which owner (a running sequence or a prefix-cache snapshot) holds which
// blocks. A table has two parts:
//   fixed   spec.fixed_blocks blocks holding the window rings and compressor state
//           (kv_spec.h: fixed part); always private to the owner (rewritten as it advances);
//   pages   page i holds the compressed entries of tokens [i*T, (i+1)*T) (kv_spec.h).
// Owners grow in whole pages as their context grows; the scheduler asks reserve() before it
// schedules a chunk, so a sequence never outgrows its budget and the model never allocates.
//
// Sharing: fork() gives a new owner the full pages of an existing one (reference counts in
// the pool) and fresh blocks for the rest. A full page is never written again (its tokens are
// all processed), so sharing it is safe; a partly filled last page and the fixed part are
// copied (at fork time: the new owner gets fresh blocks and the runner copies the rows).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_spec.h"

namespace deepinfer::kv {

using OwnerId = uint64_t;

class KvManager {
 public:
  KvManager(const KvSpec& spec, int64_t n_blocks);

  const KvSpec& spec() const { return spec_; }
  int64_t total_blocks() const { return pool_.total(); }
  int64_t free_blocks() const { return pool_.free_count(); }
  int64_t used_blocks() const { return pool_.used_count(); }
  int32_t ref_count(BlockId b) const { return pool_.ref_count(b); }

  // Blocks the owner holds now (fixed + pages, shared ones included), and how many fresh
  // blocks it needs to cover n_tokens of context.
  int64_t held(OwnerId owner) const;
  int64_t extra_needed(OwnerId owner, int64_t n_tokens) const;
  // The owner's pages in token order, and its fixed blocks (empty for an unknown owner).
  // Valid until the next change to this manager.
  const std::vector<BlockId>& pages(OwnerId owner) const;
  const std::vector<BlockId>& fixed(OwnerId owner) const;
  // Grows the owner's table to blocks_for(n_tokens) with fresh blocks; false (no change) if
  // the pool is short. Never shrinks (a sequence's context only grows).
  bool reserve(OwnerId owner, int64_t n_tokens);
  // Releases the owner's pages past pages_for(n_tokens): a sequence that undid speculative
  // tokens (their pages were reserved for it alone, so they are never shared).
  void truncate(OwnerId owner, int64_t n_tokens);
  // Releases every block of the owner; no-op for an unknown owner.
  void free(OwnerId owner);
  // Moves the whole table of `from` to `to` (which must hold nothing): a finished sequence
  // becoming a snapshot, or a snapshot resuming as a sequence. No block changes hands.
  void transfer(OwnerId from, OwnerId to);
  // Fresh blocks fork(from, ..., n_tokens) takes: fixed blocks + the partly filled last page.
  int64_t fork_cost(int64_t n_tokens) const;
  // A new owner `to` (holding nothing) continuing `from` after n_tokens: it shares the
  // n_tokens / T full pages of `from` and gets fresh fixed blocks and a fresh last page if
  // n_tokens % T != 0. False (no change) if fewer than fork_cost(n_tokens) blocks are free.
  bool fork(OwnerId from, OwnerId to, int64_t n_tokens);
  // Blocks that would return to the free list if every owner in `owners` were freed (a block
  // also held by someone else would not).
  int64_t freeable(const std::vector<OwnerId>& owners) const;
  // Every owner id currently holding blocks.
  std::vector<OwnerId> owners() const;

  // Pool integrity plus: each block's reference count equals the number of tables holding
  // it, no table holds a block twice, fixed blocks are never shared, and the blocks in
  // tables are exactly the used ones.
  bool check_integrity(std::string* why = nullptr) const;

 private:
  struct Table {
    std::vector<BlockId> fixed, pages;
    int64_t size() const { return int64_t(fixed.size() + pages.size()); }
  };
  KvSpec spec_;
  BlockPool pool_;
  std::unordered_map<OwnerId, Table> tables_;
};

}  // namespace deepinfer::kv
