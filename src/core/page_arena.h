// Fixed-size memory pages addressed by a 32-bit id: where a sequence's attention state lives
// (window rings and compressor state in its fixed pages, compressed KV entries and indexer
// keys in its token pages). Sizes and addresses only; who owns which page is decided
// elsewhere (the engine's KV block pool, or the sequence itself).
//
//   PageArena          one allocation of n_pages * page_bytes made up front (the serving KV
//                      budget). Ids come from an outside allocator (kv::BlockPool), so the
//                      arena never hands out pages itself: grow() is -1.
//   GrowingPageSource  a private source for one standalone sequence (CLI, tests) or its fixed
//                      part: each grow() allocates one page of exactly page_bytes, freed with
//                      the source.
//
// Pages are 64-byte aligned and never move, so a cached page address stays valid for the
// life of the source. Page memory is not cleared when it changes hands: readers only read
// what their owner wrote.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer {

class PageSource {
 public:
  static constexpr int64_t kAlign = 64;

  explicit PageSource(int64_t page_bytes) : page_bytes_(page_bytes) {
    if (page_bytes <= 0 || page_bytes % kAlign != 0)
      throw std::invalid_argument("page size must be a positive multiple of " + std::to_string(kAlign) +
                                  " bytes, got " + std::to_string(page_bytes));
  }
  virtual ~PageSource() = default;
  PageSource(const PageSource&) = delete;
  PageSource& operator=(const PageSource&) = delete;

  int64_t page_bytes() const { return page_bytes_; }
  // Address of page `id`; std::out_of_range for an id this source does not have.
  virtual std::byte* page(int32_t id) const = 0;
  // A fresh page for the caller to keep, or -1 where pages are handed out by someone else.
  virtual int32_t grow() = 0;
  // Memory this source holds, in bytes.
  virtual int64_t bytes() const = 0;

 protected:
  [[noreturn]] static void bad_id(int32_t id, int64_t n) {
    throw std::out_of_range("page " + std::to_string(id) + " outside [0, " + std::to_string(n) + ")");
  }

 private:
  int64_t page_bytes_;
};

namespace detail {
struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(PageSource::kAlign)); }
};
using AlignedBytes = std::unique_ptr<std::byte[], AlignedDelete>;
// Uninitialised on purpose: a large arena stays virtual until its pages are first written.
inline AlignedBytes aligned_bytes(int64_t n) {
  return AlignedBytes(static_cast<std::byte*>(::operator new[](size_t(n), std::align_val_t(PageSource::kAlign))));
}
}  // namespace detail

class PageArena final : public PageSource {
 public:
  PageArena(int64_t page_bytes, int64_t n_pages) : PageSource(page_bytes), n_pages_(n_pages) {
    if (n_pages < 0 || n_pages > INT32_MAX) throw std::invalid_argument("page arena: page count out of range");
    if (n_pages > 0 && page_bytes > INT64_MAX / n_pages) throw std::invalid_argument("page arena: size overflows");
    if (n_pages > 0) data_ = detail::aligned_bytes(page_bytes * n_pages);
  }

  int64_t n_pages() const { return n_pages_; }
  std::byte* page(int32_t id) const override {
    if (id < 0 || id >= n_pages_) bad_id(id, n_pages_);
    return data_.get() + int64_t(id) * page_bytes();
  }
  int32_t grow() override { return -1; }
  int64_t bytes() const override { return n_pages_ * page_bytes(); }

 private:
  int64_t n_pages_;
  detail::AlignedBytes data_;
};

class GrowingPageSource final : public PageSource {
 public:
  explicit GrowingPageSource(int64_t page_bytes) : PageSource(page_bytes) {}

  std::byte* page(int32_t id) const override {
    if (id < 0 || size_t(id) >= pages_.size()) bad_id(id, int64_t(pages_.size()));
    return pages_[size_t(id)].get();
  }
  int32_t grow() override {
    if (pages_.size() >= size_t(INT32_MAX)) return -1;
    pages_.push_back(detail::aligned_bytes(page_bytes()));
    return int32_t(pages_.size() - 1);
  }
  int64_t bytes() const override { return int64_t(pages_.size()) * page_bytes(); }

 private:
  std::vector<detail::AlignedBytes> pages_;
};

}  // namespace deepinfer
