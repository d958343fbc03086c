// DeepSeek-V4-Flash / V4-Pro: the V4 core. Every other release copies these rules and
// changes what differs (release_v4_dspark.cpp, release_v41.cpp). Where each is written down:
//   numerics: act-quant blocks of 128, K blocks summed exactly    docs/model/numerics.md §1.2, §2
//   window and compressed keys: FP8 QDQ of the non-rope dims       docs/model/attention.md §3, §4.3
//   queries: per-head RMS before RoPE                              docs/model/attention.md §2
//   per-layer compressors; ratio-4 layers run a lightning indexer  docs/model/attention.md §4, §5
//   per-site mHC, final hc_head                                    docs/model/hyper_connections.md §3, §4
//   router: sqrt-softplus, hash or bias, plain renormalisation     docs/model/moe.md §1
//   drafter: the MTP module                                        docs/model/mtp_dspark.md §1
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

const ReleaseRules& v4_release() {
  static const ReleaseRules rules{
      .name = "DeepSeek-V4",
      .act_block = 128,
      .act_block_sum = kernels::BlockSum::kExact,
      .window_key_qdq = {.rope_dims = false, .block = 64},
      .exact_pooled_projections = false,
      .query_head_norm = true,
      .shared_attention_runtime = false,
      .staggered_mhc = false,
      .router_temperature = false,
      .renorm_one_expert = true,
      .renorm_epsilon = 0.0f,  // the reference adds nothing
      .image_router_bias = false,
      .drafting = Drafting::kMtpModule,
      .dspark_taps_layer_output = true,  // no DSpark here; the refreshes' convention
      .markov_embed = "",
      .markov_head = "",
      .log_load = nullptr,
  };
  return rules;
}

}  // namespace deepinfer::v4
