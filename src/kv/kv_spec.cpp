#include "kv/kv_spec.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace deepinfer::kv {

namespace {
constexpr int64_t kPageAlign = 64;  // core/page_arena.h: PageSource::kAlign

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Places runs of rows one after another in pages of page_values values, never splitting a row.
class RowPacker {
 public:
  explicit RowPacker(int64_t page_values) : page_values_(page_values) {}

  FixedRows place(int64_t rows, int64_t row_values) {
    FixedRows f;
    f.rows = rows;
    f.row_values = row_values;
    if (rows <= 0 || row_values <= 0) return f;
    if (used_ + row_values > page_values_) {  // not even one row fits here: next page
      ++page_;
      used_ = 0;
    }
    f.page = page_;
    f.offset = used_;
    f.per_page = page_values_ / row_values;
    f.first = std::min(rows, (page_values_ - used_) / row_values);
    const int64_t rest = rows - f.first;
    if (rest == 0) {
      used_ += rows * row_values;
    } else {
      const int64_t more = ceil_div(rest, f.per_page);  // pages after the first
      page_ += more;
      used_ = (rest - (more - 1) * f.per_page) * row_values;
    }
    return f;
  }
  int64_t pages() const { return used_ > 0 ? page_ + 1 : page_; }

 private:
  int64_t page_values_, page_ = 0, used_ = 0;
};

// What layer state i holds besides its ring (widths in values; 0 where it has none).
struct LayerShape {
  int64_t ratio = 0;
  bool entries = false, index_keys = false;  // growing: main entries, index keys
  int64_t pending = 0, pending_width = 0;              // main compressor kv and score rows
  int64_t index_pending = 0, index_pending_width = 0;  // V4 indexer compressor kv and score rows
};

LayerShape shape_of(const KvLayout& l, size_t i) {
  LayerShape s;
  s.ratio = l.layer_ratios[i];
  if (l.shared_sources) {  // V4.1: a KV source pools one group (ratio > 1) and keeps index keys
    if (!l.kv_sources[i]) return s;
    if (s.ratio < 1) throw std::invalid_argument("KV layout: a KV source needs a compress ratio >= 1");
    s.entries = s.index_keys = true;
    if (s.ratio > 1) {
      s.pending = pending_rows(s.ratio, 1);
      s.pending_width = l.head_dim;
    }
    return s;
  }
  if (s.ratio < 0) throw std::invalid_argument("KV layout: negative compress ratio " + std::to_string(s.ratio));
  if (s.ratio == 0) return s;
  // V4: ratio 4 pools overlapping pairs of groups (coff 2), other ratios one group.
  const int64_t coff = s.ratio == 4 ? 2 : 1;
  s.entries = true;
  s.pending = pending_rows(s.ratio, coff);
  s.pending_width = coff * l.head_dim;
  if (s.ratio == 4) {  // the lightning indexer's compressor
    s.index_keys = true;
    s.index_pending = pending_rows(4, 2);
    s.index_pending_width = 2 * l.index_head_dim;
  }
  return s;
}

// Every fixed row group of a sequence, in page order (the rows of `p`).
std::vector<const FixedRows*> all_fixed_rows(const PageLayout& p) {
  std::vector<const FixedRows*> out;
  for (const PageLayout::LayerRows& r : p.fixed)
    for (const FixedRows* f : {&r.ring, &r.main_kv, &r.main_score, &r.index_kv, &r.index_score}) out.push_back(f);
  out.push_back(&p.sequence_row);
  return out;
}
}  // namespace

int64_t pending_rows(int64_t ratio, int64_t coff) {
  const int64_t group = coff * ratio;
  return group * ceil_div(kMinRingRows, group);
}

PageLayout PageLayout::make(const KvLayout& layout, int64_t block_tokens) {
  if (block_tokens < 1) throw std::invalid_argument("page block size must be at least one token");
  if (layout.shared_sources && layout.kv_sources.size() != layout.layer_ratios.size())
    throw std::invalid_argument("KV layout: kv_sources needs one entry per layer");
  PageLayout p;
  p.block_tokens = block_tokens;
  std::vector<LayerShape> shapes;
  for (size_t i = 0; i < layout.layer_ratios.size(); ++i) shapes.push_back(shape_of(layout, i));

  // Growing rows of one page, and the widest fixed row: every page must hold both.
  int64_t values = 0, widest = layout.sequence_values;
  for (const LayerShape& s : shapes) {
    int64_t main = -1, index = -1;
    widest = std::max({widest, layout.head_dim, s.pending_width, s.index_pending_width});
    if (s.entries) {
      main = values;
      values += ceil_div(block_tokens, s.ratio) * layout.head_dim;
    }
    if (s.index_keys) {
      index = values;
      values += ceil_div(block_tokens, s.ratio) * layout.index_head_dim;
    }
    p.main_offset.push_back(main);
    p.index_offset.push_back(index);
  }
  const int64_t bpv = layout.bytes_per_value;
  p.page_bytes = std::max<int64_t>(kPageAlign, ceil_div(std::max(values, widest) * bpv, kPageAlign) * kPageAlign);

  RowPacker pack(p.page_bytes / bpv);
  for (const LayerShape& s : shapes) {
    LayerRows rows;
    rows.ring = pack.place(layout.window_tokens, layout.head_dim);
    if (s.pending > 0) {
      rows.main_kv = pack.place(s.pending, s.pending_width);
      rows.main_score = pack.place(s.pending, s.pending_width);
    }
    if (s.index_pending > 0) {
      rows.index_kv = pack.place(s.index_pending, s.index_pending_width);
      rows.index_score = pack.place(s.index_pending, s.index_pending_width);
    }
    p.fixed.push_back(rows);
  }
  if (layout.sequence_values > 0) p.sequence_row = pack.place(1, layout.sequence_values);
  p.fixed_pages = pack.pages();
  return p;
}

KvSpec KvSpec::make(const KvLayout& layout, int64_t block_tokens) {
  if (block_tokens < 4 || block_tokens % 4 != 0 || block_tokens > 65536)
    throw std::invalid_argument("KV block size must be a multiple of 4 tokens between 4 and 65536, got " +
                                std::to_string(block_tokens));
  if (!layout.shared_sources)
    for (int64_t r : layout.layer_ratios)
      if (r != 0 && r != 4 && r != 128)
        throw std::invalid_argument("KV layout: unsupported compress ratio " + std::to_string(r));
  KvSpec s;
  s.layout = layout;
  s.pages = PageLayout::make(layout, block_tokens);
  s.block_tokens = block_tokens;
  s.block_bytes = s.pages.page_bytes;
  s.fixed_blocks = s.pages.fixed_pages;

  const int64_t bpv = layout.bytes_per_value;
  for (size_t i = 0; i < layout.layer_ratios.size(); ++i) {
    const int64_t r = layout.layer_ratios[i];
    ++s.n_layers;
    if (layout.shared_sources) {
      s.n_sources += layout.kv_sources[i] ? 1 : 0;
    } else {
      s.n_c4_layers += r == 4 ? 1 : 0;
      s.n_c128_layers += r == 128 ? 1 : 0;
    }
  }
  s.c4_row_bytes = (layout.head_dim + layout.index_head_dim) * bpv;
  s.c128_row_bytes = layout.head_dim * bpv;
  // The fixed part's totals, from the rows as placed.
  for (const PageLayout::LayerRows& r : s.pages.fixed) s.window_ring_bytes += r.ring.rows * r.ring.row_values * bpv;
  for (const FixedRows* f : all_fixed_rows(s.pages)) {
    if (f->rows == 0) continue;
    s.fixed_row_bytes = std::max(s.fixed_row_bytes, f->row_values * bpv);
    s.compressor_state_bytes += f->rows * f->row_values * bpv;
  }
  s.compressor_state_bytes -= s.window_ring_bytes;
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
