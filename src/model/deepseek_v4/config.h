// DeepSeek-V4 hyper-parameters from the checkpoint's config.json (docs/model/config.md §1, §2).
// V4-Flash, V4-Pro and the 0731/0813 refreshes are the same struct with other values;
// V4.1-Flash (family V41) adds the fields of its own block below. The family is read from
// the config (text_config, model_type, V4.1-only keys), never from the directory name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::v4 {

enum class Family { V4, V41 };

struct Config {
  Family family = Family::V4;
  int64_t vocab_size = 0;
  int64_t dim = 0;               // hidden_size, d
  int64_t n_layers = 0;          // num_hidden_layers
  int64_t n_heads = 0;           // H
  int64_t head_dim = 0;          // Dh, includes the rope part
  int64_t rope_dim = 0;          // Dr, the last Dr dims of every head
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;          // G
  int64_t o_lora_rank = 0;       // R_o
  int64_t window = 0;            // sliding_window W (tokens, incl. the current one)
  std::vector<int64_t> compress_ratios;  // per layer, then one per MTP stage
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  double rope_factor = 1.0;       // YaRN
  int64_t rope_original_seq_len = 0;  // 0 = no YaRN
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 1;
  int64_t n_activated_experts = 0;  // num_experts_per_tok
  int64_t moe_inter_dim = 0;
  bool norm_topk_prob = true;
  double route_scale = 1.0;         // routed_scaling_factor
  int64_t n_hash_layers = 0;
  double swiglu_limit = 0.0;        // 0 = no clamp
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;           // rms_norm_eps
  int64_t n_mtp_layers = 0;
  int64_t weight_block = 128;       // quantization_config.weight_block_size
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  int64_t max_position_embeddings = 0;  // 0: not stated

  // ---- V4.1 only (docs/model/v41.md). Layer lists are ascending, backbone layers only.
  std::vector<int64_t> kv_source_layers;     // own a compressor (+ index keys); readers follow
  std::vector<int64_t> index_source_layers;  // run an indexer; later compressed layers reuse its top-k
  int64_t candidate_source_layer = -1;       // -1: no two-level selection
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  double gate_temp = 1.0;                    // router logits are divided by it
  // Per backbone layer, derived: the KV source / index source whose cache / top-k the layer
  // reads (the latest one at or before it), -1 for window-only layers.
  std::vector<int64_t> kv_source_of, index_source_of;
  // Engram (11.6): layer ids in table order, rows per table.
  std::vector<int64_t> engram_layer_ids, engram_num_embeddings;
  int64_t engram_max_ngram = 0, engram_vocab_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int64_t engram_pad_id = 2, engram_compressed_vocab_size = 0;
  // The DSpark drafter: n_mtp_layers stages (mtp.*), drafting a block of dspark_block_size
  // tokens at once from taps of the target layers. V4.1 (docs/model/mtp_dspark.md §2) taps their inputs and
  // runs staggered-mHC stages with their own MoE; the V4 0731/0813 refreshes (mtp_dspark.md §3) tap their
  // outputs and run ordinary V4 blocks with the backbone's MoE.
  int64_t dspark_block_size = 0, dspark_noise_token_id = 0, dspark_markov_rank = 0;
  int64_t dspark_n_routed_experts = 0, dspark_n_activated_experts = 0;
  std::vector<int64_t> dspark_target_layers;
  // Vision placeholder id (-1: none): the config's, else the reference's default 129264 when
  // the vocabulary holds it. Only the text path runs; a token with this id is refused.
  int64_t image_token_id = -1;

  // The family: config parsing and release_rules() (release.h) tell releases apart by it;
  // the model's code asks the release's rules instead.
  bool v41() const { return family == Family::V41; }
  bool has_dspark() const { return n_mtp_layers > 0 && dspark_block_size > 0; }
  // The helpers below that differ by release read release_rules(*this) (release.cpp).
  // Where a target layer's tap is taken: after its block (V4 refreshes) or before it (V4.1).
  bool dspark_taps_layer_output() const;
  // Whether the release's mtp.* layers are an MTP module (V4) rather than DSpark stages (the
  // 0731/0813 layout, V4.1; a V4.1 checkpoint without dspark_block_size has no drafter).
  bool drafts_with_mtp_module() const;
  const char* release_name() const;  // for messages: "DeepSeek-V4.1", ...
  // This config with the DSpark stages' expert counts: what their MoE is bound and run with.
  Config dspark_stage_config() const {
    Config s = *this;
    s.n_routed_experts = dspark_n_routed_experts;
    s.n_activated_experts = dspark_n_activated_experts;
    return s;
  }
  int64_t nope_dim() const { return head_dim - rope_dim; }
  int64_t ratio(int64_t layer) const { return compress_ratios[size_t(layer)]; }
  // Activation act-quant block of every FP8/FP4 GEMM input (V4: 128, V4.1: 32).
  int64_t act_block() const;

  // Which layer states hold a compressor with its emitted entries (backbone and MTP layers
  // alike): V4 every layer with ratio != 0, V4.1 the KV sources only.
  bool owns_compressor(int64_t layer) const;
  // Layers whose state holds index keys: V4 the ratio-4 layers (lightning indexer compressor),
  // V4.1 the KV sources (keys derived from their latents).
  bool owns_index_keys(int64_t layer) const;
  // V4.1's index sources (none without the shared attention runtime).
  bool is_index_source(int64_t layer) const;
  // V4.1 index sources after the candidate source restrict their top-k to its candidates.
  bool uses_candidates(int64_t layer) const {
    return is_index_source(layer) && candidate_source_layer >= 0 && layer > candidate_source_layer;
  }
  // Position of layer in engram_layer_ids, -1 when it has no Engram.
  int64_t engram_index(int64_t layer) const {
    for (size_t i = 0; i < engram_layer_ids.size(); ++i)
      if (engram_layer_ids[i] == layer) return int64_t(i);
    return -1;
  }
};

// Parses and validates config.json; throws std::runtime_error naming the file and field.
Config load_config(const std::string& path);
Config parse_config(const std::string& json_text, const std::string& source_name);

}  // namespace deepinfer::v4
