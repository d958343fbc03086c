#include "kv/kv_spec.h"

#include <algorithm>
#include <sstream>
#include <vector>
#include <stdexcept>

namespace deepinfer::kv {

namespace {
constexpr int64_t kPageAlign = 64;  // core/page_arena.h: PageSource::kAlign

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of a pending-group ring: coff*ratio rounded up to a multiple that holds kMinRingRows.
int64_t pending_rows(int64_t ratio, int64_t coff) {
  const int64_t group = coff * ratio;
  return group * ceil_div(kMinRingRows, group);
}

// kv + score buffers of one compressor (state.h: [pending_rows, coff*width] each).
int64_t compressor_values(int64_t ratio, int64_t width) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  return 2 * pending_rows(ratio, coff) * (coff * width);
}

struct Rows {
  int64_t n, bytes;  // n rows of `bytes` each
};

// The fixed buffers of layer state i in their page order (kv_spec.h: fixed part).
std::vector<Rows> fixed_rows(const KvLayout& l, size_t i) {
  const int64_t ratio = l.layer_ratios[i];
  const int64_t v = l.bytes_per_value, coff = ratio == 4 ? 2 : 1;
  std::vector<Rows> out = {{l.window_tokens, l.head_dim * v}};
  if (l.shared_sources) {  // V4.1: a pooling source's pending group
    if (l.kv_sources[i] && ratio > 1) out.insert(out.end(), 2, Rows{pending_rows(ratio, 1), l.head_dim * v});
    return out;
  }
  if (ratio != 0) out.insert(out.end(), 2, Rows{pending_rows(ratio, coff), coff * l.head_dim * v});  // kv, score
  if (ratio == 4) out.insert(out.end(), 2, Rows{pending_rows(4, 2), 2 * l.index_head_dim * v});  // indexer kv, score
  return out;
}

// Every fixed row group of a sequence in page order: the layers', then the sequence's own.
std::vector<Rows> all_fixed_rows(const KvLayout& l) {
  std::vector<Rows> out;
  for (size_t i = 0; i < l.layer_ratios.size(); ++i)
    for (const Rows& r : fixed_rows(l, i)) out.push_back(r);
  if (l.sequence_values > 0) out.push_back({1, l.sequence_values * l.bytes_per_value});
  return out;
}

// V4.1 sizes: growing rows per block and the fixed bytes.
void make_shared(const KvLayout& layout, int64_t block_tokens, KvSpec& s, int64_t& rows) {
  if (layout.kv_sources.size() != layout.layer_ratios.size())
    throw std::invalid_argument("KV layout: kv_sources needs one entry per layer");
  const int64_t bpv = layout.bytes_per_value;
  rows = 0;
  for (size_t i = 0; i < layout.layer_ratios.size(); ++i) {
    const int64_t r = layout.layer_ratios[i];
    ++s.n_layers;
    s.window_ring_bytes += layout.window_tokens * layout.head_dim * bpv;
    if (!layout.kv_sources[i]) continue;
    if (r < 1) throw std::invalid_argument("KV layout: a KV source needs a compress ratio >= 1");
    ++s.n_sources;
    if (r > 1) s.compressor_state_bytes += 2 * pending_rows(r, 1) * layout.head_dim * bpv;
    rows += ceil_div(block_tokens, r) * (layout.head_dim + layout.index_head_dim) * bpv;
  }
  s.compressor_state_bytes += layout.sequence_values * bpv;
}
}  // namespace

KvSpec KvSpec::make(const KvLayout& layout, int64_t block_tokens) {
  if (block_tokens < 4 || block_tokens % 4 != 0 || block_tokens > 65536)
    throw std::invalid_argument("KV block size must be a multiple of 4 tokens between 4 and 65536, got " +
                                std::to_string(block_tokens));
  KvSpec s;
  s.layout = layout;
  s.block_tokens = block_tokens;
  const int64_t bpv = layout.bytes_per_value;
  int64_t rows = 0;
  if (layout.shared_sources) make_shared(layout, block_tokens, s, rows);
  for (int64_t r : layout.shared_sources ? std::vector<int64_t>{} : layout.layer_ratios) {
    ++s.n_layers;
    s.window_ring_bytes += layout.window_tokens * layout.head_dim * bpv;
    if (r == 4) {
      ++s.n_c4_layers;
      s.compressor_state_bytes += (compressor_values(4, layout.head_dim) + compressor_values(4, layout.index_head_dim)) * bpv;
    } else if (r == 128) {
      ++s.n_c128_layers;
      s.compressor_state_bytes += compressor_values(128, layout.head_dim) * bpv;
    } else if (r != 0) {
      throw std::invalid_argument("KV layout: unsupported compress ratio " + std::to_string(r));
    }
  }
  s.c4_row_bytes = (layout.head_dim + layout.index_head_dim) * bpv;
  s.c128_row_bytes = layout.head_dim * bpv;
  if (!layout.shared_sources)
    rows = block_tokens / 4 * s.n_c4_layers * s.c4_row_bytes +
           ceil_div(block_tokens, 128) * s.n_c128_layers * s.c128_row_bytes;
  const std::vector<Rows> fixed = all_fixed_rows(layout);
  for (const Rows& f : fixed) s.fixed_row_bytes = std::max(s.fixed_row_bytes, f.bytes);
  // Pages are 64-byte aligned and hold at least one fixed row; a model without compressed
  // layers still gets a page per block, which keeps the arithmetic defined (its fixed part
  // then dominates, as it should).
  s.block_bytes = std::max<int64_t>(kPageAlign, ceil_div(std::max(rows, s.fixed_row_bytes), kPageAlign) * kPageAlign);
  // Fixed rows in order, a row never straddling two pages.
  int64_t left = 0;  // bytes left in the last fixed page
  for (const Rows& f : fixed)
    for (int64_t n = f.bytes > 0 ? f.n : 0; n > 0;) {
      if (left < f.bytes) {
        ++s.fixed_blocks;
        left = s.block_bytes;
      }
      const int64_t k = std::min(n, left / f.bytes);
      n -= k;
      left -= k * f.bytes;
    }
  return s;
}

int64_t KvSpec::entry_bytes(int64_t n) const {
  if (layout.shared_sources) {
    int64_t b = 0;
    for (size_t i = 0; i < layout.layer_ratios.size(); ++i)
      if (layout.kv_sources[i])
        b += n / layout.layer_ratios[i] * (layout.head_dim + layout.index_head_dim) * layout.bytes_per_value;
    return b;
  }
  return n / 4 * n_c4_layers * c4_row_bytes + n / 128 * n_c128_layers * c128_row_bytes;
}

int64_t KvSpec::pages_for(int64_t n_tokens) const { return ceil_div(n_tokens < 0 ? 0 : n_tokens, block_tokens); }

int64_t KvSpec::blocks_for(int64_t n_tokens) const { return fixed_blocks + pages_for(n_tokens); }

int64_t KvSpec::max_tokens_in(int64_t n_blocks) const {
  return n_blocks <= fixed_blocks ? 0 : (n_blocks - fixed_blocks) * block_tokens;
}

std::string KvSpec::describe() const {
  std::ostringstream o;
  if (layout.shared_sources) {
    o << "KV per sequence: window rings " << window_ring_bytes << " B (" << n_layers << " layers), pending groups + "
      << "history " << compressor_state_bytes << " B (fixed: " << fixed_blocks << " blocks = " << fixed_blocks * block_bytes
      << " B); growing: " << n_sources << " shared KV sources (entry + index key per group); block = " << block_tokens
      << " tokens = " << block_bytes << " B";
    return o.str();
  }
  o << "KV per sequence: window rings " << window_ring_bytes << " B (" << n_layers << " layers), compressor state "
    << compressor_state_bytes << " B (fixed: " << fixed_blocks << " blocks = " << fixed_blocks * block_bytes
    << " B); growing: " << n_c4_layers
    << " ratio-4 layers x " << c4_row_bytes << " B per 4 tokens, " << n_c128_layers << " ratio-128 layers x "
    << c128_row_bytes << " B per 128 tokens; block = " << block_tokens << " tokens = " << block_bytes << " B";
  return o.str();
}

}  // namespace deepinfer::kv
