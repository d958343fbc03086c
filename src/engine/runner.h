// The runner: the only part of the engine that touches the model. The scheduler speaks in
// sequence ids and token counts; the runner turns one step's chunks into logits rows.
//
// run() receives every chunk of the step at once, so a batched forward (one call for all
// sequences, as ModelRunner does with Model::forward_batch) and a per-sequence loop are
// interchangeable behind it.
//
// KV memory: the scheduler owns the block ids (kv::KvManager); the runner owns the bytes
// behind them (one arena of n_blocks pages, bind_kv). Each chunk carries its sequence's block
// table: its fixed blocks (rings, compressor state) and its pages, already reserved to cover
// pos0 + n_tokens tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_spec.h"

namespace deepinfer::engine {

struct ScheduledChunk {
  uint64_t seq_id = 0;
  const int32_t* tokens = nullptr;  // n_tokens ids at positions pos0 .. pos0 + n_tokens - 1
  int64_t n_tokens = 0;
  int64_t pos0 = 0;                 // == the tokens the sequence's state holds already
  bool want_logits = false;         // the chunk reaches the end of the known tokens: sample after it
  bool all_rows = false;            // a logits row after every token of the chunk (prompt logprobs)
  std::span<const int32_t> pages;   // the sequence's page table (block ids), pages_for(pos0 + n_tokens) or more
  std::span<const int32_t> fixed;   // its fixed blocks (spec.fixed_blocks ids, the same for the life of its state)
  // Speculative decoding: the chunk is the pending token and its drafts; the runner keeps
  // what undoing any tail of it needs (StateOp::kUndo).
  bool speculative = false;
  // The sequence drafts: keep what the drafter needs from this chunk (draft()).
  bool keep_for_draft = false;
};

// Changes to per-sequence state that the scheduler decides and the runner carries out,
// in order, before the step's chunks run.
struct StateOp {
  enum class Kind {
    kFree,             // drop seq's state (finished, cancelled or preempted)
    kSaveSnapshot,     // move seq's state to snapshot `snap` (prefix cache)
    kRestoreSnapshot,  // move snapshot `snap` to seq (prefix-cache hit, memory too short to fork)
    kForkSnapshot,     // seq starts as a copy of snapshot `snap` with page table `pages`: pages
                       // equal to the snapshot's are shared, the others get its rows copied;
                       // the fixed part is copied into seq's own blocks `fixed`
    kDropSnapshot,     // drop snapshot `snap` (evicted)
    kCheckpoint,       // snapshot `snap` becomes a copy of seq's state as it stands (seq goes on),
                       // with page table `pages` and fixed blocks `fixed`, as for kForkSnapshot
    kLoadSnapshot,     // snapshot `snap` is the state saved in `payload` (export_snapshot's
                       // bytes, from the disk cache), in pages `pages` and fixed blocks `fixed`
    kUndo,             // seq keeps only the first `keep` tokens of its last chunk (a speculative
                       // one: the rest were rejected drafts); its page table becomes `pages`
  };
  Kind kind = Kind::kFree;
  uint64_t seq = 0;
  uint64_t snap = 0;
  std::vector<int32_t> pages;  // kForkSnapshot, kCheckpoint, kLoadSnapshot
  std::vector<int32_t> fixed;  // kForkSnapshot, kCheckpoint, kLoadSnapshot
  std::shared_ptr<const std::vector<char>> payload;  // kLoadSnapshot
  int64_t keep = 0;                                  // kUndo
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual int64_t vocab_size() const = 0;
  // Called once before anything else: the KV layout and the number of blocks the scheduler
  // hands out (block ids 0 .. n_blocks - 1). A runner that keeps no KV bytes (a scripted
  // test runner) may ignore it.
  virtual void bind_kv(const kv::KvSpec& spec, int64_t n_blocks) {
    (void)spec;
    (void)n_blocks;
  }
  // Advances each chunk's sequence (a sequence seen for the first time starts empty) and
  // writes its logits rows, in chunk order: n_tokens rows for a chunk with all_rows (row j
  // after token j; the last one is the sampling row if want_logits), else one row for a
  // chunk with want_logits, else none. Throws on failure; the engine then fails the step's
  // requests.
  virtual void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& logits_rows) = 0;
  virtual void apply(const StateOp& op) = 0;
  // The bytes of snapshot `snap`'s state, for the disk cache (a kLoadSnapshot of them gives
  // the same state back). False if this runner cannot save states or has no such snapshot.
  virtual bool export_snapshot(uint64_t snap, std::vector<char>* out) const {
    (void)snap;
    (void)out;
    return false;
  }
  // Speculative decoding. The most tokens draft() gives per call; 0: this runner cannot draft.
  virtual int64_t max_draft_tokens() const { return 0; }
  // Up to k greedy draft tokens to follow `tokens` (all of sequence seq's tokens: its state
  // holds all but the last, and its chunks since the last draft had keep_for_draft). May
  // give fewer (none when it has nothing to draft from).
  virtual std::vector<int32_t> draft(uint64_t seq, std::span<const int32_t> tokens, int64_t k) {
    (void)seq;
    (void)tokens;
    (void)k;
    return {};
  }
};

}  // namespace deepinfer::engine
