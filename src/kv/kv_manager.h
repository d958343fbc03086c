// Block tables: which owner (a running sequence or a prefix-cache snapshot) holds which
// blocks. Owners grow in whole blocks as their context grows; the scheduler asks
// reserve() before it schedules a chunk, so a sequence never outgrows its budget.
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

  // Blocks the owner holds now, and how many more it needs to cover n_tokens of context.
  int64_t held(OwnerId owner) const;
  int64_t extra_needed(OwnerId owner, int64_t n_tokens) const;
  // Grows the owner's table to blocks_for(n_tokens); false (no change) if the pool is short.
  // Never shrinks (a sequence's context only grows).
  bool reserve(OwnerId owner, int64_t n_tokens);
  // Releases every block of the owner; no-op for an unknown owner.
  void free(OwnerId owner);
  // Moves the whole table of `from` to `to` (which must hold nothing): a finished sequence
  // becoming a snapshot, or a snapshot resuming as a sequence. No block changes hands.
  void transfer(OwnerId from, OwnerId to);
  // Every owner id currently holding blocks.
  std::vector<OwnerId> owners() const;

  // Pool integrity plus: the sum of all tables equals the pool's references, no block
  // appears in two tables (no sharing yet), and each table matches its owner's size.
  bool check_integrity(std::string* why = nullptr) const;

 private:
  KvSpec spec_;
  BlockPool pool_;
  std::unordered_map<OwnerId, std::vector<BlockId>> tables_;
};

}  // namespace deepinfer::kv
