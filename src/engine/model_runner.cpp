#include "engine/model_runner.h"

#include <stdexcept>

namespace deepinfer::engine {

ModelRunner::ModelRunner(std::unique_ptr<v4::Model> model, int threads, const std::string& numerics,
                         const std::string& kernels)
    : model_(std::move(model)) {
  num_.mode = v4::parse_numerics(numerics);
  pool_ = std::make_unique<ThreadPool>(threads < 1 ? 1 : threads);
  backend_ = kernels::make_backend(kernels, pool_.get());
  num_.backend = backend_.get();
  model_->check_numerics(num_);
}

void ModelRunner::run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& logits_rows) {
  const int64_t V = vocab_size();
  size_t n_want = 0;
  for (const ScheduledChunk& c : chunks) n_want += c.want_logits ? 1 : 0;
  logits_rows.resize(n_want * size_t(V));
  std::vector<v4::SequenceChunk> batch;
  batch.reserve(chunks.size());
  size_t row = 0;
  for (const ScheduledChunk& c : chunks) {
    auto it = seqs_.find(c.seq_id);
    if (it == seqs_.end()) it = seqs_.emplace(c.seq_id, model_->new_sequence()).first;
    v4::SequenceState& st = it->second;
    if (st.n_past != c.pos0)
      throw std::logic_error("runner: sequence " + std::to_string(c.seq_id) + " holds " + std::to_string(st.n_past) +
                             " tokens but the chunk starts at " + std::to_string(c.pos0));
    float* out = c.want_logits ? logits_rows.data() + (row++) * size_t(V) : nullptr;
    batch.push_back(v4::SequenceChunk{c.tokens, c.n_tokens, &st, out, false});
  }
  model_->forward_batch(batch, num_);
}

void ModelRunner::apply(const StateOp& op) {
  switch (op.kind) {
    case StateOp::Kind::kFree:
      seqs_.erase(op.seq);
      break;
    case StateOp::Kind::kSaveSnapshot: {
      auto it = seqs_.find(op.seq);
      if (it == seqs_.end()) break;
      snaps_.insert_or_assign(op.snap, std::move(it->second));
      seqs_.erase(it);
      break;
    }
    case StateOp::Kind::kRestoreSnapshot: {
      auto it = snaps_.find(op.snap);
      // A missing snapshot leaves the sequence without state; its first chunk then fails
      // the pos0 check in run() and only that request errors out.
      if (it == snaps_.end()) break;
      seqs_.insert_or_assign(op.seq, std::move(it->second));
      snaps_.erase(it);
      break;
    }
    case StateOp::Kind::kDropSnapshot:
      snaps_.erase(op.snap);
      break;
  }
}

kv::KvLayout kv_layout_of(const v4::Config& cfg) {
  kv::KvLayout l;
  l.window_tokens = cfg.window;
  l.head_dim = cfg.head_dim;
  l.index_head_dim = cfg.index_head_dim;
  // SequenceState::create makes state for every backbone layer and every MTP layer.
  for (int64_t i = 0; i < cfg.n_layers + cfg.n_mtp_layers; ++i) l.layer_ratios.push_back(cfg.ratio(i));
  l.bytes_per_value = sizeof(float);
  return l;
}

}  // namespace deepinfer::engine
