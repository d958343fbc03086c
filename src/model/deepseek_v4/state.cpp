#include "model/deepseek_v4/state.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace deepinfer::v4 {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

// ---- page layout

PageLayout PageLayout::make(const Config& cfg, int64_t block_tokens) {
  if (block_tokens < 1) throw std::invalid_argument("page block size must be at least one token");
  PageLayout p;
  p.block_tokens = block_tokens;
  int64_t floats = 0;
  for (int64_t l = 0; l < cfg.n_layers + cfg.n_mtp_layers; ++l) {
    const int64_t r = cfg.ratio(l);
    int64_t main = -1, index = -1;
    if (r != 0) {
      main = floats;
      floats += ceil_div(block_tokens, r) * cfg.head_dim;
    }
    if (r == 4) {
      index = floats;
      floats += ceil_div(block_tokens, r) * cfg.index_head_dim;
    }
    p.main_offset.push_back(main);
    p.index_offset.push_back(index);
  }
  const int64_t a = PageSource::kAlign;
  p.page_bytes = std::max<int64_t>(a, ceil_div(floats * int64_t(sizeof(float)), a) * a);
  return p;
}

// ---- page table

PageTable::PageTable(PageSource& source, std::unique_ptr<PageSource> owned, int64_t block_tokens)
    : source_(&source), owned_(std::move(owned)), block_tokens_(block_tokens) {
  if (block_tokens < 1) throw std::invalid_argument("page block size must be at least one token");
}

float* PageTable::page(int64_t b) const {
  if (b < 0 || b >= size())
    throw std::logic_error("KV page for tokens [" + std::to_string(b * block_tokens_) + ", " +
                           std::to_string((b + 1) * block_tokens_) + ") was not reserved (the table has " +
                           std::to_string(size()) + " pages)");
  return data_[size_t(b)];
}

float* PageTable::page_for_write(int64_t b) {
  if (owned_) {
    while (size() <= b) {
      const int32_t id = source_->grow();
      if (id < 0) throw std::length_error("standalone sequence: out of page ids");
      push(id);
    }
  }
  return page(b);
}

void PageTable::push(int32_t id) {
  float* data = reinterpret_cast<float*>(source_->page(id));  // throws for a bad id, before any change
  ids_.push_back(id);
  data_.push_back(data);
}

void PageTable::adopt(std::span<const int32_t> ids) {
  if (owned_) throw std::logic_error("a standalone sequence grows its own pages");
  if (int64_t(ids.size()) < size() || !std::equal(ids_.begin(), ids_.end(), ids.begin()))
    throw std::logic_error("KV pages changed under a sequence");
  for (size_t i = ids_.size(); i < ids.size(); ++i) push(ids[i]);
}

// ---- compressor state

void CompressorState::init(int64_t r, int64_t w, int64_t page_offset) {
  ratio = r;
  coff = r == 4 ? 2 : 1;
  width = w;
  page_offset_ = page_offset;
  reset();
}

void CompressorState::reset() {
  kv.assign(coff * ratio * coff * width, 0.0f);
  score.assign(coff * ratio * coff * width, -std::numeric_limits<float>::infinity());
  n_entries_ = 0;
}

float* CompressorState::append_entry(int64_t w) {
  if (w != n_entries_)
    throw std::logic_error("compressor: entry " + std::to_string(w) + " emitted after " + std::to_string(n_entries_));
  const int64_t T = pages_->block_tokens();
  const int64_t b = (ratio * (w + 1) - 1) / T;
  float* dst = pages_->page_for_write(b) + page_offset_ + (w - b * T / ratio) * width;
  ++n_entries_;
  return dst;
}

// ---- sequence state

static LayerState make_layer_state(const Config& cfg, int64_t layer, const PageLayout& layout) {
  const int64_t ratio = cfg.ratio(layer);
  LayerState s;
  s.ring.assign(cfg.window * cfg.head_dim, 0.0f);
  if (ratio != 0) s.compressor.init(ratio, cfg.head_dim, layout.main_offset[size_t(layer)]);
  if (ratio == 4) s.index_compressor.init(4, cfg.index_head_dim, layout.index_offset[size_t(layer)]);
  return s;
}

void SequenceState::bind_pages() {
  for (auto* group : {&layers, &mtp_layers})
    for (auto& l : *group) {
      l.compressor.pages_ = pages_.get();
      l.index_compressor.pages_ = pages_.get();
    }
}

SequenceState SequenceState::create(const Config& cfg, const PageLayout& layout, PageSource& pages,
                                    std::unique_ptr<PageSource> owned) {
  if (pages.page_bytes() < layout.page_bytes)
    throw std::invalid_argument("pages of " + std::to_string(pages.page_bytes()) + " B are smaller than the " +
                                std::to_string(layout.page_bytes) + " B this model's layout needs");
  SequenceState st;
  for (int64_t l = 0; l < cfg.n_layers; ++l) st.layers.push_back(make_layer_state(cfg, l, layout));
  for (int64_t k = 0; k < cfg.n_mtp_layers; ++k) st.mtp_layers.push_back(make_layer_state(cfg, cfg.n_layers + k, layout));
  st.pages_ = std::make_unique<PageTable>(pages, std::move(owned), layout.block_tokens);
  st.bind_pages();
  return st;
}

SequenceState SequenceState::create(const Config& cfg, const PageLayout& layout, PageSource& pages) {
  return create(cfg, layout, pages, nullptr);
}

SequenceState SequenceState::create(const Config& cfg, int64_t block_tokens) {
  const PageLayout layout = PageLayout::make(cfg, block_tokens);
  auto source = std::make_unique<GrowingPageSource>(layout.page_bytes);
  PageSource& src = *source;
  return create(cfg, layout, src, std::move(source));
}

SequenceState SequenceState::fork(std::span<const int32_t> ids) const {
  const PageTable& from = *pages_;
  if (from.standalone()) throw std::logic_error("fork: a standalone sequence's pages are private");
  const int64_t T = from.block_tokens();
  const int64_t n_used = std::min(from.size(), ceil_div(n_past, T));  // pages holding entries
  if (int64_t(ids.size()) < n_used) throw std::logic_error("fork: fewer pages than the sequence fills");
  const std::unordered_set<int32_t> old_ids(from.ids().begin(), from.ids().end());
  SequenceState out;
  out.n_past = n_past;
  out.layers = layers;
  out.mtp_layers = mtp_layers;
  out.pages_ = std::make_unique<PageTable>(from.source(), nullptr, T);
  const size_t page_bytes = size_t(from.source().page_bytes());
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool in_use = int64_t(i) < n_used;
    if (in_use && ids[i] == from.ids()[i]) {
      if (int64_t(i + 1) * T > n_past) throw std::logic_error("fork: a partly filled page cannot be shared");
    } else if (old_ids.count(ids[i])) {
      throw std::logic_error("fork: page " + std::to_string(ids[i]) + " would alias another page of the source");
    }
    out.pages_->push(ids[i]);
    if (in_use && ids[i] != from.ids()[i]) std::memcpy(out.pages_->page(int64_t(i)), from.page(int64_t(i)), page_bytes);
  }
  out.bind_pages();
  return out;
}

int64_t SequenceState::bytes() const {
  int64_t n = 0;
  for (const auto* group : {&layers, &mtp_layers})
    for (const auto& l : *group)
      n += int64_t(l.ring.capacity() + l.compressor.kv.capacity() + l.compressor.score.capacity() +
                   l.index_compressor.kv.capacity() + l.index_compressor.score.capacity()) *
           int64_t(sizeof(float));
  return n + pages_->size() * pages_->source().page_bytes();
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
