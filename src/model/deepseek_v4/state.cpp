#include "model/deepseek_v4/state.h"

#include <algorithm>
#include <limits>

namespace deepinfer::v4 {

void CompressorState::init(int64_t r, int64_t w) {
  ratio = r;
  coff = r == 4 ? 2 : 1;
  width = w;
  reset();
}

void CompressorState::reset() {
  kv.assign(coff * ratio * coff * width, 0.0f);
  score.assign(coff * ratio * coff * width, -std::numeric_limits<float>::infinity());
  entries.clear();
}

static LayerState make_layer_state(const Config& cfg, int64_t ratio) {
  LayerState s;
  s.ring.assign(cfg.window * cfg.head_dim, 0.0f);
  if (ratio != 0) s.compressor.init(ratio, cfg.head_dim);
  if (ratio == 4) s.index_compressor.init(4, cfg.index_head_dim);
  return s;
}

SequenceState SequenceState::create(const Config& cfg) {
  SequenceState st;
  for (int64_t l = 0; l < cfg.n_layers; ++l) st.layers.push_back(make_layer_state(cfg, cfg.ratio(l)));
  for (int64_t k = 0; k < cfg.n_mtp_layers; ++k)
    st.mtp_layers.push_back(make_layer_state(cfg, cfg.ratio(cfg.n_layers + k)));
  return st;
}

void SequenceState::reset() {
  n_past = 0;
  for (auto* group : {&layers, &mtp_layers})
    for (auto& l : *group) {
      std::fill(l.ring.begin(), l.ring.end(), 0.0f);
      if (l.compressor.ratio) l.compressor.reset();
      if (l.index_compressor.ratio) l.index_compressor.reset();
    }
}

}  // namespace deepinfer::v4
