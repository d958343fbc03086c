// Per-sequence incremental state (MODEL.md section 9.1). Everything a later chunk or decode
// step needs: the window ring, the compressors' partial groups and their emitted entries.
// Fresh state is kv = 0 and score = -inf (the reference never resets; a clean engine must).
//
// Memory: the ring and the compressors' kv/score buffers have a fixed size per sequence and
// are plain vectors of exactly that size. The emitted entries grow with the context and
// live in fixed-size pages (core/page_arena.h), one page per `block_tokens` tokens of
// context, reached through the sequence's PageTable. A standalone sequence grows its own
// pages; an engine sequence gets page ids from the engine's KV pool (adopt_pages) before
// the tokens that need them, and may share full pages with other sequences (fork).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/page_arena.h"
#include "model/deepseek_v4/config.h"

namespace deepinfer::v4 {

// What one page holds. A page covers block_tokens tokens [b*T, (b+1)*T) of context: for
// every compressed layer (backbone layers, then MTP layers), the entries emitted while those
// tokens were processed: ceil(T / ratio) rows of head_dim (main compressor) and, on ratio-4
// layers, as many rows of index_head_dim (indexer keys). Entry w of a ratio-r compressor is
// emitted by token r*(w+1)-1, so it lives in page (r*(w+1)-1) / T at row w - floor(b*T/r);
// a ratio-128 entry thus sits in the page of its last token even when its group spans pages.
// Consequence: a page whose tokens have all been processed is never written again, so it
// can be shared read-only between sequences.
struct PageLayout {
  int64_t block_tokens = 0;
  int64_t page_bytes = 0;  // rows of all layers, rounded up to 64 bytes (at least 64)
  // Per layer state (backbone layers, then MTP layers), in floats from the page start;
  // -1 where the layer has no such compressor.
  std::vector<int64_t> main_offset, index_offset;

  // Throws std::invalid_argument for block_tokens < 1.
  static PageLayout make(const Config& cfg, int64_t block_tokens);
};

// Logical block i of one sequence (tokens [i*T, (i+1)*T)) -> a page of a PageSource.
class PageTable {
 public:
  // `owned` set: a standalone table that grows its own pages from it (and frees them with it).
  PageTable(PageSource& source, std::unique_ptr<PageSource> owned, int64_t block_tokens);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t size() const { return int64_t(ids_.size()); }
  const std::vector<int32_t>& ids() const { return ids_; }
  PageSource& source() const { return *source_; }
  bool standalone() const { return owned_ != nullptr; }

  // Page of block b; std::logic_error if the table has none (the KV pool did not reserve it).
  float* page(int64_t b) const;
  // The same for writing; a standalone table first grows pages up to block b.
  float* page_for_write(int64_t b);
  // The table becomes ids: its current pages must be the first ones of ids (a page never
  // changes under a sequence), the rest are appended. std::logic_error otherwise.
  void adopt(std::span<const int32_t> ids);
  void push(int32_t id);

 private:
  PageSource* source_;
  std::unique_ptr<PageSource> owned_;
  int64_t block_tokens_;
  std::vector<int32_t> ids_;
  std::vector<float*> data_;  // page addresses, cached (pages never move)
};

struct CompressorState {
  int64_t ratio = 0, coff = 1, width = 0;
  // Rows of projections waiting to be pooled, [coff*ratio, coff*width] each.
  // ratio 4 (coff 2): rows 0..3 hold the previous complete group, rows 4..7 the current one.
  // other ratios (coff 1): rows 0..ratio-1 hold the current group.
  std::vector<float> kv, score;

  // entries: page_offset (floats) is where this compressor's rows start in every page.
  void init(int64_t ratio, int64_t width, int64_t page_offset);
  void reset();
  // Emitted entries [n_entries, width], finished (normed, roped, QDQ'd), in pages.
  int64_t n_entries() const { return n_entries_; }
  const float* entry(int64_t w) const {
    const int64_t T = pages_->block_tokens();
    const int64_t b = (ratio * (w + 1) - 1) / T;
    return pages_->page(b) + page_offset_ + (w - b * T / ratio) * width;
  }
  // Where entry w (== n_entries(), the next one) is to be written; counts it.
  float* append_entry(int64_t w);

 private:
  friend struct SequenceState;
  PageTable* pages_ = nullptr;  // the owning sequence's table (stable: held by unique_ptr)
  int64_t page_offset_ = 0;
  int64_t n_entries_ = 0;
};

struct LayerState {
  std::vector<float> ring;           // [window, head_dim]; position p lives in slot p % window
  CompressorState compressor;        // main KV compressor (ratio != 0)
  CompressorState index_compressor;  // lightning indexer keys (ratio 4)
};

struct SequenceState {
  static constexpr int64_t kDefaultBlockTokens = 64;

  int64_t n_past = 0;  // tokens already processed = position of the next token
  std::vector<LayerState> layers;
  std::vector<LayerState> mtp_layers;

  // A standalone sequence (CLI, tests): pages of block_tokens tokens from a private source
  // that grows with the context.
  static SequenceState create(const Config& cfg, int64_t block_tokens = kDefaultBlockTokens);
  // A sequence whose pages (layout.page_bytes each) come from `pages`, with ids handed out
  // by an outside allocator through adopt_pages. `pages` must outlive the sequence.
  static SequenceState create(const Config& cfg, const PageLayout& layout, PageSource& pages);

  // Extends the page table to ids (see PageTable::adopt). Block i must be adopted before a
  // token of [i*T, (i+1)*T) is processed, else the forward throws std::logic_error.
  void adopt_pages(std::span<const int32_t> ids) { pages_->adopt(ids); }
  // A new sequence continuing from this one, with page table ids: where ids[i] equals this
  // table's page, the page is shared (it must be full: every token of block i processed);
  // where it differs, this page is copied into it (copy on write of a partly filled page).
  // Fixed parts are copied. Not for standalone sequences (their pages are private).
  SequenceState fork(std::span<const int32_t> ids) const;

  const PageTable& pages() const { return *pages_; }
  // Bytes this sequence holds: fixed buffers plus one page per table entry (shared pages
  // count for every sequence that holds them).
  int64_t bytes() const;
  // Back to position 0; the page table is kept (and reused).
  void reset();

  SequenceState() = default;
  SequenceState(SequenceState&&) = default;
  SequenceState& operator=(SequenceState&&) = default;

 private:
  static SequenceState create(const Config& cfg, const PageLayout& layout, PageSource& pages,
                              std::unique_ptr<PageSource> owned);
  void bind_pages();  // points every compressor at pages_
  std::unique_ptr<PageTable> pages_;
};

}  // namespace deepinfer::v4
