// The runner over the DeepSeek-V4 model: one Model::forward_batch call per step for all
// scheduled chunks (rows share the weight products; each sequence keeps its own state, and
// its logits equal what it would get alone). Owns the per-sequence SequenceState objects
// and the prefix-cache snapshots, keyed by the scheduler's ids, and the KV arena all their
// state lives in (fixed part: rings and compressor state; growing part: compressed entries):
// one allocation of n_blocks pages of block_bytes made at bind_kv (the KV budget),
// addressed by the scheduler's block ids. The arena never grows; a state object itself holds
// only page addresses and counters.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/page_arena.h"
#include "core/thread_pool.h"
#include "engine/runner.h"
#include "kernels/backend.h"
#include "kv/kv_spec.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::engine {

class ModelRunner final : public Runner {
 public:
  // threads: compute threads (>= 1); numerics "reference"|"float"; kernels "cpu"|"ref".
  // Throws std::invalid_argument for bad names, std::runtime_error if the numerics cannot
  // run this checkpoint.
  ModelRunner(std::unique_ptr<v4::Model> model, int threads, const std::string& numerics, const std::string& kernels);
  // --numa: the pool's workers pinned to the machine's nodes, in contiguous blocks in
  // proportion to each node's CPUs (core/numa.h); the calling thread is left alone (threads
  // it starts later, an HTTP server's, inherit its affinity). Returns the node count.
  int spread_over_numa_nodes();

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  // The model's sequences live in spec.pages, the layout the KV pool counts. Throws
  // std::invalid_argument for a spec made from another layout than kv_layout_of(this model).
  void bind_kv(const kv::KvSpec& spec, int64_t n_blocks) override;
  void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& logits_rows) override;
  void apply(const StateOp& op) override;
  // Payload: u64 count, the state's counters (i64), its fixed pages, its used token pages.
  bool export_snapshot(uint64_t snap, std::vector<char>* out) const override;
  void load_snapshot(const StateOp& op);

  // Drafting with the checkpoint's drafter: "mtp" (V4's MTP module, docs/model/mtp_dspark.md §1, chained on
  // its own output for more than one token) or "dspark" (V4.1 and the V4 0731/0813 refreshes,
  // docs/model/mtp_dspark.md §2 / §3: a block of drafts per forward). std::invalid_argument if the checkpoint has no such drafter, or one
  // this runner cannot draft with (an MTP layer with compressed attention).
  void enable_drafting(const std::string& mode);
  int64_t max_draft_tokens() const override;
  // DraftPolicy's costs, in plain decode steps, from the bytes of weights read: drafting per
  // token (MTP: its module and the head) and per drafting step (DSpark: the block forward,
  // whatever its length); verifying one more token reads about the routed experts it visits
  // that the other tokens of the chunk do not.
  double draft_cost() const;
  double draft_step_cost() const;
  double verify_cost() const;
  std::vector<int32_t> draft(uint64_t seq, std::span<const int32_t> tokens, int64_t k) override;

  const v4::Model& model() const { return *model_; }
  // How it computes (numerics and kernels) and its compute threads: a caller that runs the
  // model directly beside the engine (bench's one-prefill check, its bandwidth triad) uses
  // the same ones.
  const v4::Numerics& numerics() const { return num_; }
  ThreadPool& pool() const { return *pool_; }
  size_t live_sequences() const { return seqs_.size(); }
  size_t live_snapshots() const { return snaps_.size(); }
  // Bytes of the KV arena (fixed at bind_kv), and bytes of the arena pages the live states
  // hold (fixed pages plus token pages; a shared page counts once per holder).
  int64_t arena_bytes() const { return arena_ ? arena_->bytes() : 0; }
  int64_t state_bytes() const;
  // KV bytes the live states hold outside the arena: 0 (std::logic_error if a state's pages
  // are not the arena's).
  int64_t outside_arena_bytes() const;
  // Distinct arena pages the live states hold, sorted.
  std::vector<int32_t> arena_pages_in_use() const;

 private:
  std::unique_ptr<v4::Model> model_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<kernels::Backend> backend_;
  v4::Numerics num_;
  v4::PageLayout layout_;
  std::unique_ptr<PageArena> arena_;
  std::unordered_map<uint64_t, v4::SequenceState> seqs_;
  std::unordered_map<uint64_t, v4::SequenceState> snaps_;

  // What a drafting sequence keeps between steps: the drafter's rows, and the undo record
  // of its last speculative chunk.
  struct DraftState {
    v4::DrafterState drafter;
    v4::SequenceState::Undo undo;
  };
  bool drafting_ = false;
  std::unordered_map<uint64_t, DraftState> drafts_;
  std::vector<float> draft_inputs_;  // the last step's drafter inputs, all rows
};

// What one sequence of this checkpoint holds, for the KV accounting (state.h).
using v4::kv_layout_of;

}  // namespace deepinfer::engine
