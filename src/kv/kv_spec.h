// What one sequence's attention state costs, per layer kind, and how that maps onto KV
// blocks. Sizes and ownership only: no math, no tensors.
//
// A DeepSeek-V4 sequence holds, per layer (MTP layers included):
//   window ring        [window, head_dim]                 every layer       fixed
//   compressor state   kv + score, [coff*ratio, coff*w]   ratio 4 and 128   fixed
//                      (ratio 4: coff 2, for the main and the indexer compressor)
//   ratio-4 rows       one [head_dim] entry + one [index_head_dim] indexer key per 4 tokens   grows
//   ratio-128 rows     one [head_dim] entry per 128 tokens                                     grows
//
// The pool is counted in blocks of `block_tokens` (T) tokens of context. A block is one page
// of the KV arena with a concrete layout: for every compressed layer, the rows emitted while
// its T tokens were processed - T/4 main entries + T/4 indexer keys per ratio-4 layer,
// ceil(T/128) entries per ratio-128 layer (an entry lives in the block of its last token, so
// a ratio-128 group spanning blocks still has one row) - rounded up to 64 bytes. The model's
// PageLayout (model/deepseek_v4/state.h) places the rows; the engine checks both agree.
// The fixed part of a sequence (window rings, compressor state) lives outside the arena in
// exactly sized buffers and is charged as `fixed_blocks` whole blocks, so blocks_for(n) *
// block_bytes always covers what a sequence really holds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::kv {

struct KvLayout {
  int64_t window_tokens = 0;
  int64_t head_dim = 0;
  int64_t index_head_dim = 0;
  std::vector<int64_t> layer_ratios;  // compress ratio of every layer that holds state (0, 4 or 128)
  int64_t bytes_per_value = 4;        // the model's SequenceState holds fp32 today
};

struct KvSpec {
  KvLayout layout;
  int64_t block_tokens = 0;
  int64_t n_layers = 0, n_c4_layers = 0, n_c128_layers = 0;
  int64_t window_ring_bytes = 0;        // all layers together
  int64_t compressor_state_bytes = 0;   // all compressors together
  int64_t c4_row_bytes = 0;             // one ratio-4 group of one layer (entry + indexer key)
  int64_t c128_row_bytes = 0;           // one ratio-128 entry of one layer
  int64_t block_bytes = 0;              // one page: the rows above for T tokens, 64-byte multiple
  int64_t fixed_blocks = 0;

  // Throws std::invalid_argument for a block size that is not a positive multiple of 4 or
  // a layout with an unknown ratio.
  static KvSpec make(const KvLayout& layout, int64_t block_tokens);

  int64_t fixed_bytes() const { return window_ring_bytes + compressor_state_bytes; }
  // Bytes of compressed entries a sequence holds after n_tokens tokens.
  int64_t entry_bytes(int64_t n_tokens) const;
  // Pages (growing part) a sequence of n_tokens processed tokens holds: ceil(n / T).
  int64_t pages_for(int64_t n_tokens) const;
  // Blocks a sequence of n_tokens processed tokens holds: fixed_blocks + pages_for(n).
  int64_t blocks_for(int64_t n_tokens) const;
  // Longest context one sequence can reach in n_blocks blocks.
  int64_t max_tokens_in(int64_t n_blocks) const;
  std::string describe() const;
};

}  // namespace deepinfer::kv
