// DeepSeek-V4 hyper-parameters from the checkpoint's config.json (MODEL.md section 2.1).
// V4-Flash, V4-Pro and the 0731/0813 refreshes are the same struct with other values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::v4 {

struct Config {
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

  int64_t nope_dim() const { return head_dim - rope_dim; }
  int64_t ratio(int64_t layer) const { return compress_ratios[size_t(layer)]; }
  // Activation act-quant block of every FP8/FP4 GEMM input (V4: 128).
  int64_t act_block() const { return 128; }
};

// Parses and validates config.json; throws std::runtime_error naming the file and field.
Config load_config(const std::string& path);
Config parse_config(const std::string& json_text, const std::string& source_name);

}  // namespace deepinfer::v4
