// A loaded DeepSeek-V4 model: immutable after load. Per-sequence state lives in
// SequenceState objects passed in explicitly, so one model serves many sequences.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "loader/safetensors.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/engram.h"
#include "model/deepseek_v4/expert_cache.h"
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

// What drafting keeps of one sequence between steps: the drafter's inputs of the positions
// it has not seen yet, at most a window of them (older ones are out of its attention's reach).
// MTP reads the backbone's final streams [hc * dim], DSpark its taps [n_targets * dim]
// (Model::draft_input_width).
struct DrafterState {
  int64_t drafter_next = 0;  // the drafter's rings hold positions < drafter_next
  int64_t rows_pos0 = 0;     // position of rows' first row
  std::vector<float> rows;   // [n, width]

  // Appends the inputs of positions pos0 .. pos0+n-1 (a gap before them starts over).
  void keep(const float* inputs, int64_t pos0, int64_t n, int64_t width, int64_t window);
  // Forgets the rows of positions >= pos (undone speculative tokens).
  void drop_from(int64_t pos, int64_t width);
};

// What one DSpark draft block computed besides its drafts (tests compare it with the
// reference's forward_spec): per row, the logits with the Markov bias, and the confidence.
struct DsparkTrace {
  std::vector<float> logits;      // [block, vocab]
  std::vector<float> confidence;  // [block]
};

struct LoadOptions {
  // Scan every tensor's codes for NaN / Inf before returning (reads all weights once); a
  // corrupt checkpoint is then a LoadError naming the tensor instead of NaN logits later.
  bool verify_weights = false;
  // Expert parallel over comm (null: one process): this rank maps, reads and runs only its
  // slice of the routed experts; every forward then calls comm's collectives, so every rank
  // must run the same forwards in the same order.
  dist::Communicator* comm = nullptr;
  bool expert_parallel = false;
  // --numa: weights read in interleaved page by page over the machine's nodes (core/numa.h).
  bool numa = false;
  // The bytes of weights this process may hold in memory (--memory-limit less the KV pool and
  // working memory); 0: no limit. A mapped checkpoint (this rank's share) larger than this
  // keeps its dense weights resident (locked where allowed) and streams its routed experts
  // from disk through an ExpertCache of what is left; LoadError when the dense part alone
  // does not fit. In-memory checkpoints are resident already and ignore it.
  int64_t weight_budget = 0;
  // False: a default budget (not --memory-limit) too small even for the dense weights only
  // warns and maps everything as without a budget, instead of refusing.
  bool weight_budget_strict = true;
  // Reader threads of the expert cache.
  int expert_readers = 4;
};

// A checkpoint held in memory instead of a directory: config.json's text and a TensorStore
// built elsewhere (deepinfer bench --synthetic builds its weights from a seed, synthetic.h).
// Registered under a name, it is what Model::load(name) loads, so whatever loads a model by
// its directory name (the engine) takes it unchanged. V4.1 Engram layers are refused: their
// token map is a file of the directory.
struct InMemoryCheckpoint {
  std::string config_json;
  std::shared_ptr<const TensorStore> store;
};
// Thread-safe; a second registration of a name replaces the first.
void register_in_memory_checkpoint(const std::string& name, InMemoryCheckpoint checkpoint);
// Forgets the name (a model loaded from it keeps its share of the store).
void unregister_in_memory_checkpoint(const std::string& name);

class Model {
 public:
  // Loads DIR/config.json and the safetensors shards; every tensor is checked before return.
  // A name registered with register_in_memory_checkpoint loads that checkpoint instead.
  static std::unique_ptr<Model> load(const std::string& dir, const LoadOptions& options = {});
  // The same for a checkpoint in memory; `name` stands for the directory in logs and errors.
  static std::unique_ptr<Model> load(const InMemoryCheckpoint& checkpoint, const std::string& name,
                                     const LoadOptions& options = {});

  const Config& config() const { return cfg_; }
  const Weights& weights() const { return w_; }
  const ExpertSplit& expert_split() const { return experts_; }
  // The routed-expert cache when the experts stream from disk (null: all weights mapped).
  ExpertCache* expert_cache() const { return expert_cache_.get(); }
  SequenceState new_sequence() const { return SequenceState::create(cfg_); }

  // Throws if the reference numerics cannot run this checkpoint (the reference's quantisation
  // blocks must divide its dimensions, as its own kernels assert).
  void check_numerics(const Numerics& num) const;

  // Processes tokens[0..S) at positions st.n_past .. st.n_past+S-1 and advances the state.
  // logits, if not null, receives [S, vocab] fp32: row i predicts the token after tokens[i].
  // draft_inputs, if not null, receives what the checkpoint's drafter reads of each row
  // [S, draft_input_width()]: MTP the last layer's hc streams, DSpark the taps.
  void forward(const int32_t* tokens, int64_t S, SequenceState& st, const Numerics& num, float* logits,
               std::vector<float>* draft_inputs = nullptr) const;

  // Several sequences in one step (continuous batching): their rows share every weight
  // product, each keeps its own attention state. Each sequence's logits equal what forward()
  // gives it alone. Distinct chunks must have distinct states.
  // Expert parallel: every rank makes the same calls with logits wanted for the same rows
  // (the head is split by vocabulary rows; every rank receives all the logits).
  void forward_batch(const std::vector<SequenceChunk>& chunks, const Numerics& num,
                     std::vector<float>* draft_inputs = nullptr) const;

  // Which drafter the checkpoint ships: DSpark (V4.1 with dspark_* keys), MTP (V4 with an MTP
  // module), or none.
  enum class Drafter { kNone, kMtp, kDspark };
  Drafter drafter() const;
  // The drafter's costs in plain decode steps (by bytes read, see weights.h), as
  // engine::DraftPolicy takes them: per draft token (MTP), per drafting step (DSpark, whatever
  // its length), per verified token.
  struct DraftCosts {
    double per_draft = 0.0, per_step = 0.0, verify_per_token = 0.0;
  };
  DraftCosts draft_costs() const;
  int64_t draft_input_width() const;
  // Up to k greedy drafts with the checkpoint's drafter (draft_mtp or draft_dspark).
  std::vector<int32_t> draft(SequenceState& st, DrafterState& ds, std::span<const int32_t> tokens, int64_t k,
                             const Numerics& num) const;

  // Up to k greedy drafts after tokens (all of st's tokens: st holds all but the last) with
  // MTP module 0: first over the positions it has not seen (the rows ds keeps), then chained
  // on its own output; the chained positions are undone in st's MTP ring before return.
  // Fewer (none) when ds does not reach st.n_past - 1. k <= kMinRingRows - 1.
  std::vector<int32_t> draft_mtp(SequenceState& st, DrafterState& ds, std::span<const int32_t> tokens, int64_t k,
                                 const Numerics& num) const;

  // DSpark (docs/model/mtp_dspark.md §2), same contract: the stages' window rings take the positions they
  // have not seen (keys from the taps ds keeps, through main_proj), then one block forward
  // over [pending token, noise ...] at positions st.n_past ... gives up to
  // min(k, dspark_block_size) drafts through the Markov head, greedily. The block's own keys
  // never enter the rings, so nothing is undone. trace, if not null, gets the block's logits
  // and confidences.
  std::vector<int32_t> draft_dspark(SequenceState& st, DrafterState& ds, std::span<const int32_t> tokens, int64_t k,
                                    const Numerics& num, DsparkTrace* trace = nullptr) const;

  // MTP module k (docs/model/mtp_dspark.md §1): streams [S, hc, dim] of the backbone at positions p,
  // next_tokens[S] the tokens at p+1; logits [S, vocab] predict the token at p+2.
  // Uses and advances st.mtp_layers[k] (its own window ring) at positions mtp_pos0 ...
  void forward_mtp(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t mtp_pos0,
                   SequenceState& st, const Numerics& num, float* logits) const;
  // The same for drafting: logits of the last row only (null: none), and that row's output
  // streams [hc, dim] (null: not wanted), which stand in for the backbone's streams when the
  // module is chained on its own output to draft further tokens.
  void forward_mtp_draft(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t mtp_pos0,
                         SequenceState& st, const Numerics& num, float* last_logits, float* last_streams) const;

 private:
  Model() = default;
  // What both loads share once the config, Engram tables and store are in place.
  static std::unique_ptr<Model> finish_load(std::unique_ptr<Model> m, const std::string& name,
                                            const LoadOptions& options, std::chrono::steady_clock::time_point t0);
  // carry_pre: null for V4; V4.1's staggered mHC (docs/model/hyper_connections.md §5) passes [rows, hc], the pre of
  // the previous sublayer on entry (collapses the attention input) and this block's FFN-site
  // pre on return.
  void block_forward(const LayerWeights& L, const RopeTable& rope, const float* X_in, const int32_t* tokens,
                     int64_t rows, std::span<const Segment> segments, const Numerics& num, float* X,
                     float* carry_pre = nullptr, bool dspark_stage = false) const;
  void mtp_rows(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t pos0,
                SequenceState& st, const Numerics& num, float* logits, bool last_only, float* last_streams) const;
  // The window keys of n rows of a window-only block's input streams X [n, hc, dim] (mHC
  // collapse, attention norm, then write_window_keys): what the block's own attention would
  // write into its ring for them, without running the block.
  void block_window_keys(const LayerWeights& L, const RopeTable& rope, const float* X, int64_t n, int64_t pos0,
                         LayerState& state, const Numerics& num) const;
  void forward_chunks(std::span<const SequenceChunk> chunks, const Numerics& num,
                      std::vector<float>* draft_inputs) const;
  // DSpark: main_x of n positions from their taps, written as keys into every stage's ring.
  void dspark_fill_rings(const float* taps, int64_t n, int64_t pos0, SequenceState& st, const Numerics& num) const;
  // pre: V4.1's collapse weights [S, hc] (the last FFN site's pre) instead of hc_head.
  void head_forward(const float* X, int64_t S, const HcWeights& hc_head, const std::vector<float>& norm,
                    const Numerics& num, float* logits, const float* pre = nullptr) const;
  // Expert parallel: this rank's vocabulary rows of the head (experts_.head_first).
  WeightMatrix own_head_rows() const;
  // options.weight_budget below this rank's weights: makes expert_cache_ and returns what
  // stays resident (skip plus the routed experts); otherwise returns skip.
  TensorStore::Skip stream_experts_if_needed(const LoadOptions& options, const TensorStore::Skip& skip);
  void read_ahead_hash_layers(std::span<const int32_t> tokens) const;

  Config cfg_;
  std::shared_ptr<const TensorStore> store_;
  Weights w_;
  std::vector<RopeTable> ropes_;  // per layer, then per MTP stage
  EngramTables engram_;           // V4.1 with Engram layers
  ExpertSplit experts_;           // the routed experts this rank runs (all of them in one process)
  std::unique_ptr<ExpertCache> expert_cache_;  // --memory-limit below the weights: experts stream
  Config dspark_moe_cfg_;         // cfg_ with the DSpark stages' expert counts
};

}  // namespace deepinfer::v4
