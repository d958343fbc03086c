#include "model/deepseek_v4/state.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

// ---- page layout

kv::KvLayout kv_layout_of(const Config& cfg) {
  kv::KvLayout l;
  l.window_tokens = cfg.window;
  l.head_dim = cfg.head_dim;
  l.index_head_dim = cfg.index_head_dim;
  // A state for every backbone layer and every MTP layer (SequenceState::create).
  for (int64_t i = 0; i < cfg.n_layers + cfg.n_mtp_layers; ++i) l.layer_ratios.push_back(cfg.ratio(i));
  l.bytes_per_value = sizeof(float);
  if (release_rules(cfg).shared_attention_runtime) {  // only the KV sources hold entries and pending groups
    l.shared_sources = true;
    for (int64_t i = 0; i < cfg.n_layers + cfg.n_mtp_layers; ++i) l.kv_sources.push_back(cfg.owns_compressor(i));
    l.sequence_values = cfg.engram_layer_ids.empty() ? 0 : std::max(cfg.engram_max_ngram - 1, kMinRingRows);
  }
  return l;
}

PageLayout page_layout(const Config& cfg, int64_t block_tokens) { return PageLayout::make(kv_layout_of(cfg), block_tokens); }

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
  if (fixed_source_ == source_ && std::find(fixed_ids_.begin(), fixed_ids_.end(), id) != fixed_ids_.end())
    throw std::logic_error("KV page " + std::to_string(id) + " is one of the sequence's fixed pages");
  ids_.push_back(id);
  data_.push_back(data);
}

void PageTable::truncate(int64_t n) {
  if (owned_ || n >= size()) return;
  ids_.resize(size_t(std::max<int64_t>(n, 0)));
  data_.resize(ids_.size());
}

void PageTable::adopt(std::span<const int32_t> ids) {
  if (owned_) throw std::logic_error("a standalone sequence grows its own pages");
  if (int64_t(ids.size()) < size() || !std::equal(ids_.begin(), ids_.end(), ids.begin()))
    throw std::logic_error("KV pages changed under a sequence");
  for (size_t i = ids_.size(); i < ids.size(); ++i) push(ids[i]);
}

void PageTable::set_fixed(PageSource& source, std::unique_ptr<PageSource> owned, std::vector<int32_t> ids) {
  if (fixed_source_) throw std::logic_error("a sequence's fixed KV pages are set once");
  if (std::unordered_set<int32_t>(ids.begin(), ids.end()).size() != ids.size())
    throw std::logic_error("fixed KV pages repeat a page id");
  std::vector<float*> data;
  for (int32_t id : ids) data.push_back(reinterpret_cast<float*>(source.page(id)));  // throws for a bad id
  fixed_source_ = &source;
  fixed_owned_ = std::move(owned);
  fixed_ids_ = std::move(ids);
  fixed_data_ = std::move(data);
}

int64_t PageTable::private_bytes() const {
  return (owned_ ? owned_->bytes() : 0) + (fixed_owned_ ? fixed_owned_->bytes() : 0);
}

// ---- compressor state

void CompressorState::init(int64_t r, int64_t c, int64_t w, int64_t page_offset, const FixedRows& kv,
                           const FixedRows& score) {
  ratio = r;
  coff = c;
  width = w;
  page_offset_ = page_offset;
  kv_ = kv;
  score_ = score;
}

void CompressorState::init_entries(int64_t r, int64_t w, int64_t page_offset) {
  init(r, 1, w, page_offset, FixedRows{}, FixedRows{});
}

void CompressorState::reset() {
  for (int64_t i = 0; i < kv_.rows; ++i) {
    std::fill_n(kv_row(i), coff * width, 0.0f);
    std::fill_n(score_row(i), coff * width, -std::numeric_limits<float>::infinity());
  }
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

void SequenceState::bind_pages() {
  for (auto* group : {&layers, &mtp_layers})
    for (auto& l : *group) {
      l.pages_ = pages_.get();
      l.compressor.pages_ = pages_.get();
      l.index_compressor.pages_ = pages_.get();
    }
}

SequenceState SequenceState::create(const Config& cfg, const PageLayout& layout, std::unique_ptr<PageTable> table) {
  for (PageSource* src : {&table->source(), &table->fixed_source()})
    if (src->page_bytes() < layout.page_bytes)
      throw std::invalid_argument("pages of " + std::to_string(src->page_bytes()) + " B are smaller than the " +
                                  std::to_string(layout.page_bytes) + " B this model's layout needs");
  if (int64_t(layout.fixed.size()) != cfg.n_layers + cfg.n_mtp_layers)
    throw std::invalid_argument("a page layout for " + std::to_string(layout.fixed.size()) + " layer states, this model has " +
                                std::to_string(cfg.n_layers + cfg.n_mtp_layers));
  const bool shared = release_rules(cfg).shared_attention_runtime;
  auto layer_state = [&](int64_t layer) {
    const int64_t ratio = cfg.ratio(layer);
    const PageLayout::LayerRows& rows = layout.fixed[size_t(layer)];
    LayerState s;
    s.ring_ = rows.ring;
    if (cfg.owns_compressor(layer)) {
      // V4's own ratio-4 compressors pool overlapping halves (coff 2); every other compressor
      // (a shared runtime's KV sources included) pools one group.
      const int64_t coff = !shared && ratio == 4 ? 2 : 1;
      s.compressor.init(ratio, coff, cfg.head_dim, layout.main_offset[size_t(layer)], rows.main_kv, rows.main_score);
    }
    if (cfg.owns_index_keys(layer)) {
      if (shared)  // keys derived from the source's latents: entries only
        s.index_compressor.init_entries(ratio, cfg.index_head_dim, layout.index_offset[size_t(layer)]);
      else
        s.index_compressor.init(4, 2, cfg.index_head_dim, layout.index_offset[size_t(layer)], rows.index_kv,
                                rows.index_score);
    }
    return s;
  };
  SequenceState st;
  for (int64_t l = 0; l < cfg.n_layers; ++l) st.layers.push_back(layer_state(l));
  for (int64_t k = 0; k < cfg.n_mtp_layers; ++k) st.mtp_layers.push_back(layer_state(cfg.n_layers + k));
  st.pages_ = std::move(table);
  st.fixed_page_bytes_ = layout.page_bytes;
  st.engram_history_ = layout.sequence_row;
  st.engram_n_hist_ = layout.sequence_row.rows ? cfg.engram_max_ngram - 1 : 0;
  st.bind_pages();
  st.reset();
  return st;
}

namespace {
std::vector<int32_t> grow_pages(PageSource& src, int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = src.grow();
    if (id < 0) throw std::length_error("standalone sequence: out of page ids");
    ids.push_back(id);
  }
  return ids;
}

// A private source holding n fresh fixed pages, and their ids.
std::pair<std::unique_ptr<PageSource>, std::vector<int32_t>> private_fixed_pages(int64_t page_bytes, int64_t n) {
  auto src = std::make_unique<GrowingPageSource>(page_bytes);
  std::vector<int32_t> ids = grow_pages(*src, n);
  return {std::move(src), std::move(ids)};
}
}  // namespace

SequenceState SequenceState::create(const Config& cfg, const PageLayout& layout, PageSource& pages,
                                    std::span<const int32_t> fixed_ids) {
  if (int64_t(fixed_ids.size()) != layout.fixed_pages)
    throw std::logic_error("a sequence needs " + std::to_string(layout.fixed_pages) + " fixed KV pages, got " +
                           std::to_string(fixed_ids.size()));
  auto table = std::make_unique<PageTable>(pages, nullptr, layout.block_tokens);
  table->set_fixed(pages, nullptr, std::vector<int32_t>(fixed_ids.begin(), fixed_ids.end()));
  return create(cfg, layout, std::move(table));
}

SequenceState SequenceState::create(const Config& cfg, const PageLayout& layout, PageSource& pages) {
  auto table = std::make_unique<PageTable>(pages, nullptr, layout.block_tokens);
  auto [src, ids] = private_fixed_pages(layout.page_bytes, layout.fixed_pages);
  PageSource& fixed = *src;
  table->set_fixed(fixed, std::move(src), std::move(ids));
  return create(cfg, layout, std::move(table));
}

SequenceState SequenceState::create(const Config& cfg, int64_t block_tokens) {
  const PageLayout layout = page_layout(cfg, block_tokens);
  auto source = std::make_unique<GrowingPageSource>(layout.page_bytes);
  PageSource& src = *source;
  std::vector<int32_t> fixed = grow_pages(src, layout.fixed_pages);  // ids 0 .. fixed_pages - 1
  auto table = std::make_unique<PageTable>(src, std::move(source), block_tokens);
  table->set_fixed(src, nullptr, std::move(fixed));
  return create(cfg, layout, std::move(table));
}

void SequenceState::expect_fixed_pages(std::span<const int32_t> ids) const {
  const std::vector<int32_t>& mine = pages_->fixed_ids();
  if (!std::equal(mine.begin(), mine.end(), ids.begin(), ids.end()))
    throw std::logic_error("fixed KV pages changed under a sequence");
}

SequenceState SequenceState::fork(std::span<const int32_t> ids, std::span<const int32_t> fixed_ids) const {
  const PageTable& from = *pages_;
  if (from.standalone()) throw std::logic_error("fork: a standalone sequence's pages are private");
  if (fixed_ids.size() != from.fixed_ids().size())
    throw std::logic_error("fork: " + std::to_string(fixed_ids.size()) + " fixed pages for a sequence that has " +
                           std::to_string(from.fixed_ids().size()));
  // The fixed pages are rewritten as the fork advances: none may be a page someone else reads.
  std::unordered_set<int32_t> taken(from.ids().begin(), from.ids().end());
  taken.insert(ids.begin(), ids.end());
  if (&from.fixed_source() == &from.source()) taken.insert(from.fixed_ids().begin(), from.fixed_ids().end());
  for (int32_t id : fixed_ids)
    if (taken.count(id)) throw std::logic_error("fork: fixed page " + std::to_string(id) + " is not a fresh page");
  auto table = std::make_unique<PageTable>(from.source(), nullptr, from.block_tokens());
  table->set_fixed(from.source(), nullptr, std::vector<int32_t>(fixed_ids.begin(), fixed_ids.end()));
  return fork_into(*this, ids, std::move(table));
}

SequenceState SequenceState::fork(std::span<const int32_t> ids) const {
  const PageTable& from = *pages_;
  if (from.standalone()) throw std::logic_error("fork: a standalone sequence's pages are private");
  auto table = std::make_unique<PageTable>(from.source(), nullptr, from.block_tokens());
  auto [src, fixed] = private_fixed_pages(fixed_page_bytes_, int64_t(from.fixed_ids().size()));
  PageSource& s = *src;
  table->set_fixed(s, std::move(src), std::move(fixed));
  return fork_into(*this, ids, std::move(table));
}

SequenceState SequenceState::fork_into(const SequenceState& src, std::span<const int32_t> ids,
                                       std::unique_ptr<PageTable> table) {
  const PageTable& from = *src.pages_;
  const int64_t T = from.block_tokens();
  const int64_t n_used = std::min(from.size(), ceil_div(src.n_past, T));  // pages holding entries
  if (int64_t(ids.size()) < n_used) throw std::logic_error("fork: fewer pages than the sequence fills");
  const std::unordered_set<int32_t> old_ids(from.ids().begin(), from.ids().end());
  SequenceState out;
  out.n_past = src.n_past;
  out.layers = src.layers;
  out.mtp_layers = src.mtp_layers;
  out.fixed_page_bytes_ = src.fixed_page_bytes_;
  out.engram_history_ = src.engram_history_;
  out.engram_n_hist_ = src.engram_n_hist_;
  out.pages_ = std::move(table);
  const size_t page_bytes = size_t(from.source().page_bytes());
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool in_use = int64_t(i) < n_used;
    if (in_use && ids[i] == from.ids()[i]) {
      if (int64_t(i + 1) * T > src.n_past) throw std::logic_error("fork: a partly filled page cannot be shared");
    } else if (old_ids.count(ids[i])) {
      throw std::logic_error("fork: page " + std::to_string(ids[i]) + " would alias another page of the source");
    }
    out.pages_->push(ids[i]);
    if (in_use && ids[i] != from.ids()[i]) std::memcpy(out.pages_->page(int64_t(i)), from.page(int64_t(i)), page_bytes);
  }
  // Fixed rows all lie in the first fixed_page_bytes_ of a page.
  for (size_t i = 0; i < from.fixed_ids().size(); ++i)
    std::memcpy(out.pages_->fixed_pages()[i], from.fixed_pages()[i], size_t(src.fixed_page_bytes_));
  out.bind_pages();
  return out;
}

std::vector<int64_t> SequenceState::counters() const {
  std::vector<int64_t> c{n_past};
  for (const auto* group : {&layers, &mtp_layers})
    for (const LayerState& l : *group) {
      c.push_back(l.compressor.n_entries_);
      c.push_back(l.index_compressor.n_entries_);
    }
  return c;
}

void SequenceState::set_counters(std::span<const int64_t> c) {
  if (c.size() != 1 + 2 * (layers.size() + mtp_layers.size()))
    throw std::invalid_argument("saved sequence state: " + std::to_string(c.size()) + " counters for a model with " +
                                std::to_string(layers.size() + mtp_layers.size()) + " layer states");
  if (c[0] < 0) throw std::invalid_argument("saved sequence state: negative position");
  size_t i = 1;
  for (auto* group : {&layers, &mtp_layers})
    for (LayerState& l : *group)
      for (CompressorState* cs : {&l.compressor, &l.index_compressor}) {
        const int64_t n = c[i++];
        if (n < 0 || (cs->ratio == 0 && n != 0) || (cs->ratio > 0 && n > c[0] / cs->ratio))
          throw std::invalid_argument("saved sequence state: " + std::to_string(n) + " compressed entries after " +
                                      std::to_string(c[0]) + " tokens");
        cs->n_entries_ = n;
      }
  n_past = c[0];
}

int64_t SequenceState::bytes() const {
  return int64_t(pages_->fixed_ids().size()) * pages_->fixed_source().page_bytes() +
         pages_->size() * pages_->source().page_bytes();
}

int64_t SequenceState::engram_history(int64_t k) const {
  const int64_t pos = n_past - 1 - k;
  if (pos < 0) return -1;
  return int64_t(engram_history_.row(pages_->fixed_pages(), 0)[pos % engram_history_.row_values]);
}

void SequenceState::set_engram_id(int64_t pos, int64_t id) {
  // Compressed ids are below 2^24, so a float holds them exactly.
  engram_history_.row(pages_->fixed_pages(), 0)[pos % engram_history_.row_values] = float(id);
}

void SequenceState::reset() {
  n_past = 0;
  if (engram_history_.rows) std::fill_n(engram_history_.row(pages_->fixed_pages(), 0), engram_history_.row_values, -1.0f);
  for (auto* group : {&layers, &mtp_layers})
    for (auto& l : *group) {
      for (int64_t s = 0; s < l.window(); ++s) std::fill_n(l.ring_row(s), l.ring_.row_values, 0.0f);
      if (l.compressor.ratio) l.compressor.reset();
      if (l.index_compressor.ratio) l.index_compressor.reset();
    }
}

// ---- undo of a speculative chunk

void SequenceState::save_undo(bool mtp, int64_t p0, int64_t n, Undo* u) const {
  u->mtp = mtp;
  u->p0 = p0;
  u->n = n;
  u->counters = counters();
  u->rows.clear();
  auto save = [&](const FixedRows& f) {
    if (f.rows == 0) return;
    if (n > f.rows)
      throw std::logic_error("undo: a chunk of " + std::to_string(n) + " tokens overruns a ring of " +
                             std::to_string(f.rows) + " rows");
    for (int64_t i = 0; i < n; ++i) {
      const float* r = f.row(pages_->fixed_pages(), (p0 + i) % f.rows);
      u->rows.insert(u->rows.end(), r, r + f.row_values);
    }
  };
  for (const LayerState& l : mtp ? mtp_layers : layers) {
    save(l.ring_);
    save(l.compressor.kv_);
    save(l.compressor.score_);
    save(l.index_compressor.kv_);
    save(l.index_compressor.score_);
  }
  if (!mtp && engram_history_.rows) {
    if (n > engram_history_.row_values) throw std::logic_error("undo: a chunk overruns the Engram history");
    const float* h = engram_history_.row(pages_->fixed_pages(), 0);
    for (int64_t i = 0; i < n; ++i) u->rows.push_back(h[(p0 + i) % engram_history_.row_values]);
  }
}

void SequenceState::undo(const Undo& u, int64_t keep) {
  if (keep < 0 || keep > u.n) throw std::logic_error("undo: keeps " + std::to_string(keep) + " of " + std::to_string(u.n));
  size_t at = 0;
  auto restore = [&](const FixedRows& f) {
    if (f.rows == 0) return;
    for (int64_t i = 0; i < u.n; ++i, at += size_t(f.row_values))
      if (i >= keep) std::copy_n(&u.rows[at], f.row_values, f.row(pages_->fixed_pages(), (u.p0 + i) % f.rows));
  };
  std::vector<LayerState>& part = u.mtp ? mtp_layers : layers;
  for (LayerState& l : part) {
    restore(l.ring_);
    restore(l.compressor.kv_);
    restore(l.compressor.score_);
    restore(l.index_compressor.kv_);
    restore(l.index_compressor.score_);
  }
  if (!u.mtp && engram_history_.rows) {
    float* h = engram_history_.row(pages_->fixed_pages(), 0);
    for (int64_t i = 0; i < u.n; ++i, ++at)
      if (i >= keep) h[(u.p0 + i) % engram_history_.row_values] = u.rows[at];
  }
  // Entry counts: what the kept positions emitted (entry w is emitted by position r*(w+1)-1).
  const int64_t end = u.p0 + keep;
  size_t c = 1 + (u.mtp ? 2 * layers.size() : 0);
  for (LayerState& l : part)
    for (CompressorState* cs : {&l.compressor, &l.index_compressor}) {
      const int64_t before = u.counters[c++];
      if (cs->ratio > 0) cs->n_entries_ = before + end / cs->ratio - u.p0 / cs->ratio;
    }
  if (!u.mtp) n_past = end;
}

}  // namespace deepinfer::v4
