// What sets the DeepSeek-V4 releases apart, as named rules over the shared V4 core.
//
// One Config struct and one forward serve every release; where the releases differ, the
// code asks the release's rules (release_rules(cfg).<rule>), never which release it is.
// Each release writes its rules in its own file, whose head lists what differs:
//   release_v4.cpp         V4-Flash / V4-Pro: the core, every rule at its V4 value
//   release_v4_dspark.cpp  V4-Flash-0731 / V4-Pro-0813: V4 with DSpark stages instead of MTP
//   release_v41.cpp        V4.1-Flash: 32-blocks, shared attention runtime, staggered mHC, ...
// Whole algorithms of a release stay in their own files and are reached through a rule:
// shared_attention.cpp (shared_attention_runtime), engram.cpp (the config's Engram layers),
// dspark.cpp (drafting == kDspark).
//
// Adding a release: recognise it in config.cpp (a Family value, its config keys), write
// release_<name>.cpp starting from v4_release() and changing only what differs (cite the
// notes in docs/model/), and map it in release_rules() in release.cpp: the one place a
// release is registered. Add a rule here when the new release does something no rule
// covers; give it the V4 value in release_v4.cpp.
#pragma once
#include <cstdint>

#include "kernels/kernels.h"

namespace deepinfer {
class TensorStore;  // loader/safetensors.h
}

namespace deepinfer::v4 {

struct Config;

// FP8 QDQ of a window key (reference numerics): the dims it covers and its block.
struct KeyQdq {
  bool rope_dims;  // the whole head (true) or only the non-rope dims (false)
  int64_t block;
};

// What a checkpoint's mtp.* prefixes hold.
enum class Drafting {
  kMtpModule,  // V4's MTP module (docs/model/mtp_dspark.md §1)
  kDspark,     // DSpark stages: a block of drafts at once from taps (docs/model/mtp_dspark.md §2, §3)
};

// The rules, each named for what it does; release_v4.cpp gives every one its V4 value.
struct ReleaseRules {
  const char* name;  // for logs

  // ---- numerics (docs/model/numerics.md §2, §3)
  int64_t act_block;                 // act-quant block of every FP8 / FP4 product's input
  kernels::BlockSum act_block_sum;   // how the ref kernels add an act-quant product's K blocks
  KeyQdq window_key_qdq;             // also V4's per-layer compressed entries
  // Pooled (gated) compressor projections taken with double dots in reference numerics
  // (LayerProduct::kFp32Exact) instead of the kernels' fp32 product.
  bool exact_pooled_projections;

  // ---- attention
  bool query_head_norm;  // unweighted per-head RMS of the queries before RoPE
  // Compressed layers share caches: KV sources compress, index sources select, the layers
  // after them read both (shared_attention.cpp). Off: every compressed layer owns its
  // compressor (ratio 4: overlapping halves) and every ratio-4 layer its lightning indexer.
  bool shared_attention_runtime;

  // ---- mHC
  // Each site collapses with the previous site's pre, and the last one replaces the final
  // hc_head (no hc_head weights, also none in the drafter). Off: own pre, final hc_head.
  bool staggered_mhc;

  // ---- MoE router
  bool router_temperature;  // router logits are divided by gate_temp
  bool renorm_one_expert;   // norm_topk_prob renormalises also a single chosen expert
  float renorm_epsilon;     // added to the renormalisation's denominator
  bool image_router_bias;   // gate.bias_vl ships: bound when present, never read (text only)

  // ---- drafter
  Drafting drafting;
  bool dspark_taps_layer_output;  // a target layer's tap after its block (else its input)
  // The DSpark Markov head's tables under mtp.<last>.markov_head.: token embedding, bias head.
  const char* markov_embed;
  const char* markov_head;

  // What a load logs about the release's extras (null: nothing).
  void (*log_load)(const Config& cfg, const TensorStore& store);
};

// The rules of cfg's release (a reference to a static: stable for the program's life).
const ReleaseRules& release_rules(const Config& cfg);

// Each release's rules (release_<name>.cpp).
const ReleaseRules& v4_release();
const ReleaseRules& v4_dspark_release();
const ReleaseRules& v41_release();

}  // namespace deepinfer::v4
