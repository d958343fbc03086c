// DeepSeek-V4.1-Flash (docs/model/v41.md §1): what differs from the V4 core (release_v4.cpp).
//   * act-quant blocks of 32; the ref kernels add K blocks in fp32    docs/model/numerics.md §2
//   * window keys: FP8 QDQ of the whole head in blocks of 32; no per-head query norm
//                                                                    docs/model/v41.md §4
//   * shared attention runtime (shared_attention.cpp): KV sources compress (ratio 2 gated
//     pairs, pooled with double dots; ratio 1 per token, FP4 entries), index sources select,
//     a candidate source restricts the later ones                    docs/model/v41.md §2, §4, §5
//   * staggered mHC, no hc_head                                       docs/model/hyper_connections.md §5
//   * router: logits / gate_temp; renormalise only K > 1, with + 1e-20; gate.bias_vl ships
//                                                                    docs/model/moe.md §4
//   * drafter: DSpark stages (staggered, own MoE) tapping the target layers' INPUTS;
//     Markov tables markov_head.embed / markov_head.head             docs/model/mtp_dspark.md §2
//   * vision tensors ship and stay unbound (text only)
// Config data rather than rules (config.cpp): rms_norm_eps 1e-20, 32 x 32 FP8 weight blocks,
// no hash layers, the layer roles, gate_temp, and the Engram layers (engram.cpp,
// docs/model/v41.md §6), which run wherever the config lists them.
#include "core/log.h"
#include "loader/safetensors.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

namespace {

void log_v41(const Config& c, const TensorStore& store) {
  size_t vision = 0;
  for (const auto& [name, t] : store.all())
    if (name.rfind("vision.", 0) == 0 || name.rfind("aligner.", 0) == 0 || name.rfind("image_", 0) == 0) ++vision;
  if (c.has_dspark())
    log_info("DeepSeek-V4.1: DSpark drafter with %lld stages, blocks of %lld tokens", (long long)c.n_mtp_layers,
             (long long)c.dspark_block_size);
  if (vision > 0) log_info("DeepSeek-V4.1: %zu vision tensors recognised, not used (text only)", vision);
}

}  // namespace

const ReleaseRules& v41_release() {
  static const ReleaseRules rules = [] {
    ReleaseRules r = v4_release();
    r.name = "DeepSeek-V4.1";
    r.act_block = 32;
    r.act_block_sum = kernels::BlockSum::kF32;  // the V4.1 goldens' rule (kernels.h)
    r.window_key_qdq = {.rope_dims = true, .block = 32};
    r.exact_pooled_projections = true;  // their last bits decide roundings ahead of the FP4 QDQ
    r.query_head_norm = false;
    r.shared_attention_runtime = true;
    r.staggered_mhc = true;
    r.router_temperature = true;
    r.renorm_one_expert = false;
    r.renorm_epsilon = 1e-20f;  // its training value, not rms_norm_eps
    r.image_router_bias = true;
    r.drafting = Drafting::kDspark;  // also when no stages ship: never an MTP module
    r.dspark_taps_layer_output = false;
    r.markov_embed = "embed";
    r.markov_head = "head";
    r.log_load = log_v41;
    return r;
  }();
  return rules;
}

}  // namespace deepinfer::v4
