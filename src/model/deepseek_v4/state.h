// Per-sequence incremental state (docs/model/forward.md §4). Everything a later chunk or decode
// step needs: the window ring, the compressors' partial groups and their emitted entries.
// Fresh state is kv = 0 and score = -inf (the reference never resets; a clean engine must).
//
// Memory: all of it lives in fixed-size pages (core/page_arena.h); the objects below hold
// only page addresses, counters and where each row sits (O(1) per layer). Two parts:
//   fixed    the window rings and the compressors' kv/score rows: PageLayout::fixed_pages
//            pages for the life of the sequence, rewritten as it advances (never shared);
//   growing  the emitted entries: one page per `block_tokens` tokens of context, reached
//            through the sequence's PageTable; a full one is never written again.
// An engine sequence gets every page id from the engine's KV pool: its fixed blocks at
// create, its token pages through adopt_pages before the tokens that need them; it may share
// full token pages with other sequences (fork). A standalone sequence (CLI, tests) grows all
// its pages from a private source.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/page_arena.h"
#include "kv/kv_spec.h"
#include "model/deepseek_v4/config.h"

namespace deepinfer::v4 {

// The page layout is the KV layer's (kv/kv_spec.h: where every fixed row and every growing
// entry sits, the page size, the fixed page count); the engine's KV pool counts the same
// pages. Values are floats here (kv_layout_of sets bytes_per_value = sizeof(float)).
using kv::FixedRows;
using kv::kMinRingRows;
using kv::PageLayout;
using kv::pending_rows;

// What one sequence of this model holds, as the KV layer describes it: a ring on every layer
// state (backbone layers, then MTP layers), compressors and index keys where the layer owns
// them (Config::owns_compressor, owns_index_keys), and as the sequence row V4.1's Engram
// history: max(engram_max_ngram - 1, kMinRingRows) floats, token p's compressed id in float
// p % that. Every fixed buffer being a ring of at least kMinRingRows positions is what lets
// Undo (below) restore a speculative chunk from the rows of its own positions.
kv::KvLayout kv_layout_of(const Config& cfg);
// The page layout of cfg's sequences with pages of block_tokens tokens (>= 1; no multiple of 4
// needed for a standalone sequence). std::invalid_argument for block_tokens < 1.
PageLayout page_layout(const Config& cfg, int64_t block_tokens);

// A sequence's pages: its fixed pages, and logical block i (tokens [i*T, (i+1)*T)) -> a page
// of a PageSource.
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
  // Drops the pages past the first n (the engine released them); a standalone table keeps
  // its own.
  void truncate(int64_t n);

  // Fixed part: pages `ids` of `source`, set once. With `owned`, source is that private
  // source, which the table keeps. std::logic_error for a repeated id.
  void set_fixed(PageSource& source, std::unique_ptr<PageSource> owned, std::vector<int32_t> ids);
  const std::vector<int32_t>& fixed_ids() const { return fixed_ids_; }
  PageSource& fixed_source() const { return *fixed_source_; }
  float* const* fixed_pages() const { return fixed_data_.data(); }
  // Bytes of the private sources (pages the table grew or was given for itself).
  int64_t private_bytes() const;

 private:
  PageSource* source_;
  std::unique_ptr<PageSource> owned_;
  int64_t block_tokens_;
  std::vector<int32_t> ids_;
  std::vector<float*> data_;  // page addresses, cached (pages never move)
  PageSource* fixed_source_ = nullptr;
  std::unique_ptr<PageSource> fixed_owned_;
  std::vector<int32_t> fixed_ids_;
  std::vector<float*> fixed_data_;
};

struct CompressorState {
  int64_t ratio = 0, coff = 1, width = 0;

  // Rows of projections waiting to be pooled, pending_rows(ratio, coff) rows of coff*width
  // floats each, in the fixed pages: position p's in row p % pending_rows. ratio 4 (coff 2)
  // pools the previous group with the current one, other ratios the current group. None for
  // a V4.1 ratio-1 compressor and for V4.1 index keys (an entry per group, no pooling).
  int64_t n_pending_rows() const { return kv_.rows; }
  float* kv_row(int64_t i) { return kv_.row(pages_->fixed_pages(), i); }
  float* score_row(int64_t i) { return score_.row(pages_->fixed_pages(), i); }
  const float* kv_row(int64_t i) const { return kv_.row(pages_->fixed_pages(), i); }
  const float* score_row(int64_t i) const { return score_.row(pages_->fixed_pages(), i); }

  // page_offset (floats) is where this compressor's entries start in every token page; kv
  // and score, where its pending rows sit in the fixed pages.
  void init(int64_t ratio, int64_t coff, int64_t width, int64_t page_offset, const FixedRows& kv,
            const FixedRows& score);
  // kv = 0, score = -inf, no entries.
  void reset();
  // Entries only: an entry store without pending rows (V4.1 ratio-1 compressor, index keys).
  void init_entries(int64_t ratio, int64_t width, int64_t page_offset);
  bool has_pending_rows() const { return kv_.rows > 0; }
  // Emitted entries [n_entries, width], finished (normed, roped, QDQ'd), in pages.
  int64_t n_entries() const { return n_entries_; }
  const float* entry(int64_t w) const {
    const int64_t T = pages_->block_tokens();
    const int64_t b = (ratio * (w + 1) - 1) / T;
    return pages_->page(b) + page_offset_ + (w - b * T / ratio) * width;
  }
  // entry(w) for w < n into out, a page's entries at a time where a page holds whole ones.
  void entries(int64_t n, const float** out) const {
    if (n <= 0) return;  // also a compressor the layer lacks (ratio 0)
    const int64_t T = pages_->block_tokens();
    if (T % ratio != 0) {
      for (int64_t w = 0; w < n; ++w) out[w] = entry(w);
      return;
    }
    const int64_t per_page = T / ratio;
    for (int64_t w0 = 0; w0 < n; w0 += per_page) {
      const float* row = pages_->page(w0 / per_page) + page_offset_;
      for (int64_t w = w0; w < std::min(n, w0 + per_page); ++w, row += width) out[w] = row;
    }
  }
  // Where entry w (== n_entries(), the next one) is to be written; counts it.
  float* append_entry(int64_t w);

 private:
  friend struct SequenceState;
  PageTable* pages_ = nullptr;  // the owning sequence's table (stable: held by unique_ptr)
  int64_t page_offset_ = 0;
  int64_t n_entries_ = 0;
  FixedRows kv_, score_;
};

struct LayerState {
  CompressorState compressor;        // main KV compressor (V4: ratio != 0; V4.1: KV sources)
  CompressorState index_compressor;  // indexer keys (V4: ratio 4; V4.1: KV sources, no pooling)

  // Window ring: row `slot` [head_dim] of the ring's rows (position p lives in slot p % window).
  // A row lookup costs a division; the attention resolves the rows it reads once per step.
  int64_t window() const { return ring_.rows; }
  float* ring_row(int64_t slot) { return ring_.row(pages_->fixed_pages(), slot); }
  const float* ring_row(int64_t slot) const { return ring_.row(pages_->fixed_pages(), slot); }

 private:
  friend struct SequenceState;
  PageTable* pages_ = nullptr;
  FixedRows ring_;
};

struct SequenceState {
  static constexpr int64_t kDefaultBlockTokens = 64;

  int64_t n_past = 0;  // tokens already processed = position of the next token
  std::vector<LayerState> layers;
  std::vector<LayerState> mtp_layers;

  // V4.1 Engram: the compressed ids of the engram_history_size() tokens before position
  // n_past; engram_history(k) is token n_past-1-k's (-1 before the sequence start).
  int64_t engram_history_size() const { return engram_n_hist_; }
  int64_t engram_history(int64_t k) const;
  // Records token `pos`'s compressed id (pos >= n_past - 1 - engram_history_size()).
  void set_engram_id(int64_t pos, int64_t id);

  // A standalone sequence (CLI, tests): fixed pages and pages of block_tokens tokens from a
  // private source that grows with the context.
  static SequenceState create(const Config& cfg, int64_t block_tokens = kDefaultBlockTokens);
  // An engine sequence: every page (layout.page_bytes or more each) comes from `pages`, with
  // ids handed out by an outside allocator: fixed_ids (layout.fixed_pages ids, kept for life)
  // now, token pages through adopt_pages. `pages` must outlive the sequence.
  // std::logic_error for a wrong count or a repeated id, std::out_of_range for a bad one.
  static SequenceState create(const Config& cfg, const PageLayout& layout, PageSource& pages,
                              std::span<const int32_t> fixed_ids);
  // The same with the fixed part in a private source of its own (tests of the token pages).
  static SequenceState create(const Config& cfg, const PageLayout& layout, PageSource& pages);

  // Extends the page table to ids (see PageTable::adopt). Block i must be adopted before a
  // token of [i*T, (i+1)*T) is processed, else the forward throws std::logic_error.
  void adopt_pages(std::span<const int32_t> ids) { pages_->adopt(ids); }
  // The page table keeps its first n pages (after an undo, the engine takes back the pages
  // of the undone tokens).
  void truncate_pages(int64_t n) { pages_->truncate(n); }
  // std::logic_error unless the fixed pages are exactly ids (they never change).
  void expect_fixed_pages(std::span<const int32_t> ids) const;
  // A new sequence continuing from this one, with page table ids: where ids[i] equals this
  // table's page, the page is shared (it must be full: every token of block i processed);
  // where it differs, this page is copied into it (copy on write of a partly filled page).
  // The fixed pages are always copied: into pages fixed_ids of this sequence's source (fresh
  // ones: none of this sequence's pages, nor of ids), or, without fixed_ids, into a private
  // source. Not for standalone sequences (their pages are private).
  SequenceState fork(std::span<const int32_t> ids, std::span<const int32_t> fixed_ids) const;
  SequenceState fork(std::span<const int32_t> ids) const;

  const PageTable& pages() const { return *pages_; }
  // n_past and the entry count of every compressor, layers in order: with the contents of
  // the pages, the whole state (the prefix cache saves both to disk).
  std::vector<int64_t> counters() const;
  // Sets them on a state whose pages hold saved contents; std::invalid_argument if they do
  // not fit this model (another count, or entries that n_past cannot have emitted).
  void set_counters(std::span<const int64_t> c);
  // Bytes of the pages this sequence holds: fixed pages plus one page per table entry (shared
  // pages count for every sequence that holds them).
  int64_t bytes() const;
  // Of those, bytes in private sources (not in a shared arena): 0 for an engine sequence.
  int64_t private_bytes() const { return pages_->private_bytes(); }
  // Back to position 0; the pages are kept (and reused).
  void reset();

  // Speculative verification: before a chunk of n tokens at n_past (backbone) or at MTP
  // positions p0.. (mtp), what it will overwrite; undo(u, keep) then leaves the state as if
  // only the first `keep` tokens of the chunk had been processed. n <= kMinRingRows and no
  // more than the window (std::logic_error otherwise).
  struct Undo {
    bool mtp = false;
    int64_t p0 = 0, n = 0;
    std::vector<int64_t> counters;  // counters() before the chunk
    std::vector<float> rows;        // the rows of positions p0 .. p0+n-1 in every ring of the part
  };
  void save_undo(bool mtp, int64_t p0, int64_t n, Undo* u) const;
  void undo(const Undo& u, int64_t keep);

  SequenceState() = default;
  SequenceState(SequenceState&&) = default;
  SequenceState& operator=(SequenceState&&) = default;

 private:
  static SequenceState create(const Config& cfg, const PageLayout& layout, std::unique_ptr<PageTable> table);
  static SequenceState fork_into(const SequenceState& from, std::span<const int32_t> ids,
                                 std::unique_ptr<PageTable> table);
  void bind_pages();  // points every layer and compressor at pages_
  std::unique_ptr<PageTable> pages_;
  int64_t fixed_page_bytes_ = 0;  // layout.page_bytes: every fixed row lies in a page's first bytes
  FixedRows engram_history_;
  int64_t engram_n_hist_ = 0;
};

}  // namespace deepinfer::v4
