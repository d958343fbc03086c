#include "kv/kv_spec.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace deepinfer::kv {

namespace {
constexpr int64_t kPageAlign = 64;  // core/page_arena.h: PageSource::kAlign

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// kv + score buffers of one compressor (state.h: [coff*ratio, coff*width] each).
int64_t compressor_values(int64_t ratio, int64_t width) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  return 2 * (coff * ratio) * (coff * width);
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
  for (int64_t r : layout.layer_ratios) {
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
  const int64_t rows = block_tokens / 4 * s.n_c4_layers * s.c4_row_bytes +
                       ceil_div(block_tokens, 128) * s.n_c128_layers * s.c128_row_bytes;
  // Pages are 64-byte aligned; a model without compressed layers still gets one cache line
  // per block, which keeps the arithmetic defined (its fixed part then dominates, as it should).
  s.block_bytes = std::max<int64_t>(kPageAlign, ceil_div(rows, kPageAlign) * kPageAlign);
  s.fixed_blocks = ceil_div(s.fixed_bytes(), s.block_bytes);
  return s;
}

int64_t KvSpec::entry_bytes(int64_t n) const {
  return n / 4 * n_c4_layers * c4_row_bytes + n / 128 * n_c128_layers * c128_row_bytes;
}

int64_t KvSpec::pages_for(int64_t n_tokens) const { return ceil_div(n_tokens < 0 ? 0 : n_tokens, block_tokens); }

int64_t KvSpec::blocks_for(int64_t n_tokens) const { return fixed_blocks + pages_for(n_tokens); }

int64_t KvSpec::max_tokens_in(int64_t n_blocks) const {
  return n_blocks <= fixed_blocks ? 0 : (n_blocks - fixed_blocks) * block_tokens;
}

std::string KvSpec::describe() const {
  std::ostringstream o;
  o << "KV per sequence: window rings " << window_ring_bytes << " B (" << n_layers << " layers), compressor state "
    << compressor_state_bytes << " B (fixed: " << fixed_blocks << " blocks); growing: " << n_c4_layers
    << " ratio-4 layers x " << c4_row_bytes << " B per 4 tokens, " << n_c128_layers << " ratio-128 layers x "
    << c128_row_bytes << " B per 128 tokens; block = " << block_tokens << " tokens = " << block_bytes << " B";
  return o.str();
}

}  // namespace deepinfer::kv
