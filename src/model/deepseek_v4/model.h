// A loaded DeepSeek-V4 model: immutable after load. Per-sequence state lives in
// SequenceState objects passed in explicitly, so one model serves many sequences.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "loader/safetensors.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/engram.h"
#include "model/deepseek_v4/expert_split.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

// One sequence's part of a batched forward step.
struct SequenceChunk {
  const int32_t* tokens = nullptr;  // n_tokens ids, at positions state->n_past ...
  int64_t n_tokens = 0;
  SequenceState* state = nullptr;   // advanced by n_tokens
  float* logits = nullptr;          // null, or [n_tokens, vocab] if all_rows, else [1, vocab] (last row)
  bool all_rows = false;
};

struct Segment;  // layer_ops.h

struct LoadOptions {
  // Scan every tensor's codes for NaN / Inf before returning (reads all weights once); a
  // corrupt checkpoint is then a LoadError naming the tensor instead of NaN logits later.
  bool verify_weights = false;
  // Expert parallel over comm (null: one process): this rank maps, reads and runs only its
  // slice of the routed experts; every forward then calls comm's collectives, so every rank
  // must run the same forwards in the same order.
  dist::Communicator* comm = nullptr;
  bool expert_parallel = false;
};

class Model {
 public:
  // Loads DIR/config.json and the safetensors shards; every tensor is checked before return.
  static std::unique_ptr<Model> load(const std::string& dir, const LoadOptions& options = {});

  const Config& config() const { return cfg_; }
  const Weights& weights() const { return w_; }
  const ExpertSplit& expert_split() const { return experts_; }
  SequenceState new_sequence() const { return SequenceState::create(cfg_); }

  // Throws if the reference numerics cannot run this checkpoint (the reference's quantisation
  // blocks must divide its dimensions, as its own kernels assert).
  void check_numerics(const Numerics& num) const;

  // Processes tokens[0..S) at positions st.n_past .. st.n_past+S-1 and advances the state.
  // logits, if not null, receives [S, vocab] fp32: row i predicts the token after tokens[i].
  // final_streams, if not null, receives the last layer's hc streams [S, hc, dim].
  void forward(const int32_t* tokens, int64_t S, SequenceState& st, const Numerics& num, float* logits,
               std::vector<float>* final_streams = nullptr) const;

  // Several sequences in one step (continuous batching): their rows share every weight
  // product, each keeps its own attention state. Each sequence's logits equal what forward()
  // gives it alone. Distinct chunks must have distinct states.
  // Expert parallel: every rank makes the same calls with logits wanted for the same rows
  // (the head is split by vocabulary rows; every rank receives all the logits).
  void forward_batch(const std::vector<SequenceChunk>& chunks, const Numerics& num,
                     std::vector<float>* final_streams = nullptr) const;

  // MTP module k (MODEL.md 10): streams [S, hc, dim] of the backbone at positions p,
  // next_tokens[S] the tokens at p+1; logits [S, vocab] predict the token at p+2.
  // Uses and advances st.mtp_layers[k] (its own window ring) at positions mtp_pos0 ...
  void forward_mtp(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t mtp_pos0,
                   SequenceState& st, const Numerics& num, float* logits) const;

 private:
  Model() = default;
  // carry_pre: null for V4; V4.1's staggered mHC (MODEL.md 11.3) passes [rows, hc], the pre of
  // the previous sublayer on entry (collapses the attention input) and this block's FFN-site
  // pre on return.
  void block_forward(const LayerWeights& L, const RopeTable& rope, const float* X_in, const int32_t* tokens,
                     int64_t rows, std::span<const Segment> segments, const Numerics& num, float* X,
                     float* carry_pre = nullptr) const;
  void forward_chunks(std::span<const SequenceChunk> chunks, const Numerics& num,
                      std::vector<float>* final_streams) const;
  // pre: V4.1's collapse weights [S, hc] (the last FFN site's pre) instead of hc_head.
  void head_forward(const float* X, int64_t S, const HcWeights& hc_head, const std::vector<float>& norm,
                    const Numerics& num, float* logits, const float* pre = nullptr) const;
  // Expert parallel: this rank's vocabulary rows of the head (experts_.head_first).
  WeightMatrix own_head_rows() const;

  Config cfg_;
  std::unique_ptr<TensorStore> store_;
  Weights w_;
  std::vector<RopeTable> ropes_;  // per layer, then per MTP stage
  EngramTables engram_;           // V4.1 with Engram layers
  ExpertSplit experts_;           // the routed experts this rank runs (all of them in one process)
};

}  // namespace deepinfer::v4
