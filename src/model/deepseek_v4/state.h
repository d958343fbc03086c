// Per-sequence incremental state (MODEL.md section 9.1). Everything a later chunk or decode
// step needs: the window ring, the compressors' partial groups and their emitted entries.
// Fresh state is kv = 0 and score = -inf (the reference never resets; a clean engine must).
#pragma once
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/config.h"

namespace deepinfer::v4 {

struct CompressorState {
  int64_t ratio = 0, coff = 1, width = 0;
  // Rows of projections waiting to be pooled, [coff*ratio, coff*width] each.
  // ratio 4 (coff 2): rows 0..3 hold the previous complete group, rows 4..7 the current one.
  // other ratios (coff 1): rows 0..ratio-1 hold the current group.
  std::vector<float> kv, score;
  std::vector<float> entries;  // emitted entries [n_entries, width], finished (normed, roped, QDQ'd)

  void init(int64_t ratio, int64_t width);
  void reset();
  int64_t n_entries() const { return width ? int64_t(entries.size()) / width : 0; }
  const float* entry(int64_t w) const { return entries.data() + w * width; }
};

struct LayerState {
  std::vector<float> ring;           // [window, head_dim]; position p lives in slot p % window
  CompressorState compressor;        // main KV compressor (ratio != 0)
  CompressorState index_compressor;  // lightning indexer keys (ratio 4)
};

struct SequenceState {
  int64_t n_past = 0;  // tokens already processed = position of the next token
  std::vector<LayerState> layers;
  std::vector<LayerState> mtp_layers;

  static SequenceState create(const Config& cfg);
  void reset();
};

}  // namespace deepinfer::v4
