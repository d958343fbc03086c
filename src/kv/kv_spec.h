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
// holds (a shared page counted for each holder). PageLayout below is where every row sits: the
// one definition of the page layout, which the model's SequenceState (model/deepseek_v4/state.h)
// addresses its rows through and KvSpec takes its block size and fixed block count from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::kv {

// Every position-indexed fixed buffer (pending groups, the Engram history) has at least this
// many rows, so that a speculative chunk of up to this many tokens can be undone.
inline constexpr int64_t kMinRingRows = 8;

// Pending rows of a compressor: coff*ratio, rounded up to a multiple of coff*ratio that is at
// least kMinRingRows (a group's rows are those of its positions modulo this).
int64_t pending_rows(int64_t ratio, int64_t coff);

// DeepSeek-V4.1 (docs/model/v41.md §8) shares compressed caches: only its KV sources hold state
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

  bool operator==(const KvLayout&) const = default;
};

// Where the rows of one fixed buffer sit in a sequence's fixed pages: `rows` rows of
// `row_values` values; row 0 at value `offset` of fixed page `page`, the `first` rows there
// one after another, the rest filling the following pages from their start, `per_page` each.
// No row straddles two pages.
struct FixedRows {
  int64_t rows = 0, row_values = 0;
  int64_t page = 0, offset = 0, first = 0, per_page = 0;

  // Row i, given the addresses of the sequence's fixed pages (as arrays of values).
  template <class Value>
  Value* row(Value* const* pages, int64_t i) const {
    if (i < first) return pages[page] + offset + i * row_values;
    const int64_t j = i - first;
    return pages[page + 1 + j / per_page] + (j % per_page) * row_values;
  }
};

// The page layout of one sequence (see the top of this file); offsets and widths count values
// of layout.bytes_per_value bytes.
//
// Growing part. A page covers block_tokens tokens [b*T, (b+1)*T) of context: for every layer
// state that owns compressed entries (V4: ratio != 0; V4.1: the KV sources), in layer order,
// the entries emitted while those tokens were processed: ceil(T / ratio) rows of head_dim
// (main compressor), then on the layers with index keys (V4: ratio 4; V4.1: the KV sources)
// as many rows of index_head_dim. Entry w of a ratio-r compressor is emitted by token
// r*(w+1)-1, so it lives in page (r*(w+1)-1) / T at row w - floor(b*T/r); a ratio-128 entry
// thus sits in the page of its last token even when its group spans pages. A page whose tokens
// have all been processed is never written again, so it can be shared read-only.
//
// Fixed part: fixed_pages pages holding, in this order, for every layer state:
//   ring          window rows of head_dim (position p in row p % window)
//   main kv       pending_rows(ratio, coff) rows of            V4: ratio != 0 (coff: 2 for
//   main score    coff*head_dim (the same)                     ratio 4, else 1); V4.1: KV
//                                                              sources with ratio > 1 (coff 1)
//   index kv      pending_rows(4, 2) rows of 2*index_head_dim  V4 ratio 4 (V4.1 index keys
//   index score   the same                                     have no pending rows)
// then, once per sequence, the sequence row (layout.sequence_values values: V4.1's Engram
// history). Every buffer is a ring indexed by position with at least kMinRingRows rows, so a
// chunk of n <= kMinRingRows tokens overwrites only the rows of its own positions.
// Packed row after row from value 0 of fixed page 0; a row that does not fit in what is left
// of a page starts the next one (the tail stays unused), so no row straddles two pages.
//
// Page size: the growing rows of T tokens, but at least the largest fixed row, rounded up to
// 64 bytes.
struct PageLayout {
  struct LayerRows {
    FixedRows ring, main_kv, main_score, index_kv, index_score;  // rows == 0 where the layer has none
  };

  int64_t block_tokens = 0;
  int64_t page_bytes = 0;
  // Growing part, per layer state, in values from the page start; -1 where the layer has no
  // such entries.
  std::vector<int64_t> main_offset, index_offset;
  // Fixed part, per layer state, then the sequence row.
  int64_t fixed_pages = 0;
  std::vector<LayerRows> fixed;
  FixedRows sequence_row;  // rows == 0 without sequence values

  // Throws std::invalid_argument for block_tokens < 1 or an inconsistent layout (V4.1: a
  // kv_sources entry missing, or a source without a ratio).
  static PageLayout make(const KvLayout& layout, int64_t block_tokens);
};

struct KvSpec {
  KvLayout layout;
  PageLayout pages;  // where every row sits; block_bytes and fixed_blocks are its page size and count
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
