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
// of the KV arena, and every byte of a sequence's state lives in the pages of its blocks:
//
//   growing part   one page per T tokens of context. For every compressed layer, the rows
//                  emitted while its T tokens were processed - T/4 main entries + T/4 indexer
//                  keys per ratio-4 layer, ceil(T/128) entries per ratio-128 layer (an entry
//                  lives in the block of its last token, so a ratio-128 group spanning blocks
//                  still has one row). Full pages are never written again: forks share them.
//   fixed part     `fixed_blocks` pages per sequence holding, layer after layer (MTP layers
//                  last): the window ring (window rows of head_dim), then, on compressed
//                  layers, the main compressor's kv and score (coff*ratio rows rounded up
//                  to hold kMinRingRows, of coff*head_dim each), then, on ratio-4 layers, the indexer compressor's kv and
//                  score (8 rows of 2*index_head_dim each). Rows are packed in that order and
//                  never straddle two pages: a row that does not fit in what is left of a page
//                  starts the next one. Rewritten as the sequence advances, so never shared.
//
// block_bytes = the growing rows of T tokens, but at least the largest fixed row, rounded up
// to 64 bytes; so blocks_for(n) * block_bytes is exactly the memory a sequence of n tokens
// holds (a shared page counted for each holder). The model's PageLayout (model/deepseek_v4/state.h) places the rows; the engine
// checks both sides compute the same block_bytes and fixed_blocks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::kv {

// Every position-indexed fixed buffer (pending groups, the Engram history) has at least this
// many rows, so that a speculative chunk of up to this many tokens can be undone
// (v4::kMinRingRows, state.h, is the same number on the model's side).
inline constexpr int64_t kMinRingRows = 8;

// DeepSeek-V4.1 (MODEL.md 11.8) shares compressed caches: only its KV sources hold state
// beyond the window ring. A source of ratio r holds, per r tokens, one [head_dim] entry and one
// [index_head_dim] index key (growing, in the block of the group's last token), and for r > 1
// the pending group: kv + score, r rows (rounded up to hold kMinRingRows) of head_dim each
// (fixed, after its ring). Every other
// layer holds its ring only. After all layers, one fixed row of sequence_values values (the
// Engram compressed-id history).
struct KvLayout {
  int64_t window_tokens = 0;
  int64_t head_dim = 0;
  int64_t index_head_dim = 0;
  std::vector<int64_t> layer_ratios;  // compress ratio of every layer that holds state (V4: 0, 4 or 128)
  int64_t bytes_per_value = 4;        // the model's SequenceState holds fp32 today
  // V4.1: set; kv_sources[i] tells whether layer state i is a KV source (any ratio >= 1).
  bool shared_sources = false;
  std::vector<bool> kv_sources;
  int64_t sequence_values = 0;
};

struct KvSpec {
  KvLayout layout;
  int64_t block_tokens = 0;
  int64_t n_layers = 0, n_c4_layers = 0, n_c128_layers = 0;
  int64_t n_sources = 0;                // V4.1 KV sources (compressed entries + index keys)
  int64_t window_ring_bytes = 0;        // all layers together
  int64_t compressor_state_bytes = 0;   // all compressors together (V4.1: + the sequence row)
  int64_t c4_row_bytes = 0;             // one ratio-4 group of one layer (entry + indexer key)
  int64_t c128_row_bytes = 0;           // one ratio-128 entry of one layer
  int64_t fixed_row_bytes = 0;          // the largest fixed row (ring, compressor kv or score)
  int64_t block_bytes = 0;              // one page: growing rows for T tokens (>= fixed_row_bytes), 64-byte multiple
  int64_t fixed_blocks = 0;             // pages of the fixed part, rows packed as above

  // Throws std::invalid_argument for a block size that is not a positive multiple of 4 or
  // a layout with an unknown ratio (V4) or a source without a ratio (V4.1).
  static KvSpec make(const KvLayout& layout, int64_t block_tokens);

  // Bytes of the fixed rows (fixed_blocks * block_bytes minus what page tails leave unused).
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
