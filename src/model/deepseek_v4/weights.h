// Typed views of every V4 tensor (docs/model/checkpoint.md §1), validated once at load:
// presence, dtype and shape against the config. Large matrices stay in the mapped shards in
// their checkpoint encoding; small vectors (norms, biases, sinks) are decoded to fp32.
#pragma once
#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "core/weight.h"
#include "loader/safetensors.h"
#include "model/deepseek_v4/config.h"

namespace deepinfer::v4 {

// Hyper-connection mixing parameters of one site (attention, ffn, or the final head).
struct HcWeights {
  WeightMatrix fn;          // F32 [n_mix, hc_mult*dim]; n_mix = (2+hc)*hc, or hc for a head
  std::vector<float> base;  // [n_mix]
  std::vector<float> scale; // [3] per site, [1] for a head
};

// Gated pooling compressor of a ratio-r layer (main KV, width head_dim) or of the
// lightning indexer (width index_head_dim). coff = 2 for the overlapping ratio-4 kind.
// V4.1 (KV sources only): coff 1, no ape; ratio 1 has no wgate (wkv is a bf16 product).
struct CompressorWeights {
  int64_t ratio = 0, coff = 1, width = 0;
  WeightMatrix wkv, wgate;  // [coff*width, dim], bf16 on disk, used as fp32
  std::vector<float> ape;   // [ratio, coff*width], added to the scores only (V4)
  std::vector<float> norm;  // [width]
};

struct AttentionWeights {
  WeightMatrix wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, sink;
  bool has_compressor = false;
  CompressorWeights compressor;
  bool has_indexer = false;  // V4: ratio-4 layers; V4.1: index sources
  WeightMatrix indexer_wq_b, indexer_weights_proj;
  CompressorWeights indexer_compressor;  // V4
  // V4.1 KV sources: index keys k_norm(wk(latent)) [index_head_dim, head_dim], bf16.
  bool has_index_keys = false;
  WeightMatrix indexer_wk;
  std::vector<float> indexer_k_norm;
};

// V4.1 Engram (docs/model/v41.md §6): the n-gram table and the gated update of the hc streams.
struct EngramWeights {
  int64_t rows = 0, head_dim = 0;
  const uint8_t* table = nullptr;        // e4m3 [rows, head_dim]
  const uint8_t* table_scale = nullptr;  // ue8m0 [rows, head_dim / 32]
  WeightMatrix wkv;                      // [(hc + 1) * dim, n_cols * head_dim]: hc keys, one value
  std::vector<float> qk;                 // [hc, dim]: fp32(q_weight) * fp32(k_weight), the only use of both
};

struct ExpertWeights {
  WeightMatrix w1, w2, w3;  // gate [inter, dim], down [dim, inter], up [inter, dim]
};

struct MoeWeights {
  WeightMatrix gate;            // [n_experts, dim], fp32 GEMM
  std::vector<float> bias;      // [n_experts], selection only (non-hash layers)
  std::vector<float> bias_vl;   // V4.1: the bias of image tokens (checked, unused: text only)
  std::vector<int32_t> tid2eid; // [vocab, top-k], hash layers
  std::vector<ExpertWeights> experts;
  bool has_shared = false;
  ExpertWeights shared;
};

struct LayerWeights {
  int64_t id = 0;  // layer index (backbone), n_layers + k for MTP stage k
  int64_t ratio = 0;
  bool hash_routed = false;
  bool has_engram = false;  // V4.1
  EngramWeights engram;
  HcWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  LayerWeights block;
  WeightMatrix e_proj, h_proj;
  std::vector<float> enorm, hnorm, norm;
  HcWeights hc_head;
};

// The DSpark drafter (docs/model/mtp_dspark.md §2 V4.1, §3 V4 0731/0813): window-attention blocks; the
// first stage owns the projection of the backbone's taps, the last the norm, the Markov and
// confidence heads and (V4) the final mHC collapse. Embedding and LM head are the backbone's.
struct DsparkWeights {
  std::vector<LayerWeights> stages;
  HcWeights hc_head;                   // V4 only (V4.1 collapses with the last FFN site's pre)
  WeightMatrix main_proj;              // [dim, n_targets * dim] FP8
  std::vector<float> main_norm, norm;  // [dim]
  WeightMatrix markov_embed;           // [vocab, markov_rank] bf16
  WeightMatrix markov_head;            // [vocab, markov_rank] bf16
  WeightMatrix confidence;             // [1, dim + markov_rank] bf16
};

struct Weights {
  WeightMatrix embed;  // [vocab, dim] bf16
  WeightMatrix head;   // [vocab, dim], fp32 GEMM
  std::vector<float> norm;
  HcWeights hc_head;   // V4 (V4.1 collapses with the last sublayer's pre instead)
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;
  DsparkWeights dspark;  // V4.1 checkpoints with a DSpark drafter (stages empty otherwise)
  // Storage of the BF16 and FP8 matrices' row_check memos (see WeightMatrix), one byte per row.
  std::vector<std::unique_ptr<uint8_t[]>> row_checks;
};

// Checks and binds every tensor; throws LoadError with one line naming the file, the tensor,
// what was expected and what was found. V4.1's vision tensors are recognised and left unbound
// (images are not run here).
Weights bind_weights(const Config& cfg, const TensorStore& store);

}  // namespace deepinfer::v4

namespace deepinfer::v4 {

// Bytes one matrix occupies in its checkpoint encoding (codes + scales).
int64_t matrix_bytes(const WeightMatrix& w);
// Bytes of weights a decode step reads per token: every dense weight of the backbone, the
// routed experts a token actually visits (num_experts_per_tok per layer), one embedding row
// and the head. MTP excluded. The decode roofline is memory bandwidth / this.
int64_t active_weight_bytes_per_token(const Config& cfg, const Weights& w);
// Of those, the routed experts' share.
int64_t routed_expert_bytes_per_token(const Config& cfg, const Weights& w);
// Bytes of weights one batched decode step of `batch` tokens reads when its tokens chose
// distinct_experts[l] distinct routed experts in backbone layer l: every dense weight, shared
// expert and the head once, each token's embedding row (and Engram rows), and each chosen
// expert once. With distinct_experts[l] = num_experts_per_tok and batch 1 this is
// active_weight_bytes_per_token.
double batch_weight_bytes_per_step(const Config& cfg, const Weights& w, const std::vector<double>& distinct_experts,
                                   int64_t batch);
// Bytes one MTP draft token reads: the first MTP module's weights a token visits and the head.
int64_t mtp_draft_bytes_per_token(const Config& cfg, const Weights& w);
// Speculative decoding's costs per draft token, in plain decode steps (by bytes read):
// drafting one token with the MTP module (its layer and the head), and verifying one token
// more in a chunk (about the routed experts it visits that the others do not).
double mtp_draft_cost(const Config& cfg, const Weights& w);
double verify_token_cost(const Config& cfg, const Weights& w);
// Bytes one DSpark draft block reads (every stage's weights its rows visit, the head and the
// Markov head), in plain decode steps: the whole block costs this once, whatever its length.
double dspark_draft_cost(const Config& cfg, const Weights& w);
// Multiply-adds per token of the weight products (prefill FLOP/s = 2 * this * tok/s).
int64_t active_weight_macs_per_token(const Config& cfg, const Weights& w);

// The least time one batched decode step's weight products can take on a machine that reads
// bytes_per_s from memory and issues macs_per_s multiply-adds: each matrix is read once and
// multiplies its rows (the batch's tokens; a routed expert, the tokens that chose it), so it
// takes at least max(its bytes / bytes_per_s, its multiply-adds / macs_per_s), and the step
// the sum over its matrices. expert_rows[l][r] = how many experts of backbone layer l had r
// rows (a step's mean). quantized_macs_per_s: the rate of the FP8 / FP4 / BF16 matrices'
// products where it differs (reference numerics multiplies their bf16-exact rows, act-quantised
// or held in bf16 by the reference, with a bf16 dot-product instruction; 0: macs_per_s). The embedding and Engram rows count as reads
// only; macs_per_s 0: reads only (bound_s = memory_s). memory_s is
// batch_weight_bytes_per_step's bytes read.
struct StepBound {
  double memory_s = 0;   // every byte at bytes_per_s
  double compute_s = 0;  // every multiply-add at macs_per_s
  double bound_s = 0;    // per matrix the larger of the two, summed
};
StepBound batch_step_bound(const Config& cfg, const Weights& w, const std::vector<std::vector<double>>& expert_rows,
                           int64_t batch, double bytes_per_s, double macs_per_s, double quantized_macs_per_s = 0.0);

}  // namespace deepinfer::v4
