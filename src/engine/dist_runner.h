// Multi-process steps (expert parallel over MPI): rank 0 runs the engine (server, scheduler,
// sampler) with a StepBroadcaster around its ModelRunner; every other rank runs
// run_step_worker with its own ModelRunner. Each Runner call rank 0 makes that touches the
// model or its states (bind_kv, apply, run, draft) is broadcast first, so every rank's runner sees the same calls in the same order and
// holds the same sequence states; the model's collectives inside run() are the only other
// traffic (workers compute their share of the logits rows too, and ignore them).
//
// Failures: after every run() the ranks agree on its outcome. All failed alike (a scheduler
// bug the runner refuses, a missing snapshot): rank 0 throws as a lone runner would, and
// the engine fails the step's requests. Ranks that disagree can no longer hold the same
// states: the job ends (Communicator::abort) with the failing rank and its reason.
#pragma once
#include <memory>

#include "dist/communicator.h"
#include "engine/model_runner.h"

namespace deepinfer::engine {

class StepBroadcaster final : public Runner {
 public:
  StepBroadcaster(std::unique_ptr<ModelRunner> inner, dist::Communicator& comm);
  // Tells the workers to return from run_step_worker.
  ~StepBroadcaster() override;

  int64_t vocab_size() const override { return inner_->vocab_size(); }
  void bind_kv(const kv::KvSpec& spec, int64_t n_blocks) override;
  void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& logits_rows) override;
  void apply(const StateOp& op) override;
  bool export_snapshot(uint64_t snap, std::vector<char>* out) const override { return inner_->export_snapshot(snap, out); }
  int64_t max_draft_tokens() const override { return inner_->max_draft_tokens(); }
  // The drafter runs the MTP module (its experts are split too): every rank drafts alike.
  std::vector<int32_t> draft(uint64_t seq, std::span<const int32_t> tokens, int64_t k) override;

 private:
  std::unique_ptr<ModelRunner> inner_;
  dist::Communicator& comm_;
  std::vector<char> buf_;  // the message being sent, kept to reuse its memory
};

// A worker rank's side: carries out rank 0's runner calls until the StepBroadcaster is
// destroyed. layout: this rank's checkpoint's KV layout, from which it makes the spec rank 0
// binds (checked: the same checkpoint gives the same block size).
void run_step_worker(ModelRunner& runner, dist::Communicator& comm, const kv::KvLayout& layout);

}  // namespace deepinfer::engine
