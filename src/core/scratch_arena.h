// A grow-only scratch arena for the temporaries of one forward step (activations, key lists,
// routing tables), so that a warm decode loop never calls the heap allocator.
//
// Bump allocation in chunks: take() hands out the next 64-byte aligned bytes of the current
// chunk; a Scope remembers where the arena stood and gives everything taken since back when
// it ends (scopes nest, last in first out). When a request does not fit, the arena moves on
// to the next chunk it already has, or adds a new one at least as large as all the others
// together; chunks are never freed or moved, so a live span stays valid and, once the
// arena has seen a step's largest demand, the same step takes no new memory.
//
// Memory comes back uninitialised: callers clear what must start at zero (take_zeroed).
// Not thread-safe: one arena per thread.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <vector>

namespace deepinfer {

class ScratchArena {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kFirstChunkBytes = size_t(1) << 20;

  ScratchArena() = default;
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // Where the arena stands; Scope returns to it.
  struct Mark {
    size_t chunk = 0, used = 0;
  };

  // Gives back everything taken while it lives.
  class Scope {
   public:
    explicit Scope(ScratchArena& arena) : arena_(arena), mark_(arena.mark()) {}
    ~Scope() { arena_.release(mark_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ScratchArena& arena_;
    Mark mark_;
  };

  // n default-initialised T: numbers stay uninitialised, a struct gets its member
  // initialisers. Never destroyed, hence plain data only.
  template <typename T>
  std::span<T> take(int64_t n) {
    static_assert(std::is_trivially_destructible_v<T>, "the arena never runs destructors");
    static_assert(alignof(T) <= kAlign);
    if (n <= 0) return {};
    std::span<T> s{static_cast<T*>(take_bytes(size_t(n) * sizeof(T))), size_t(n)};
    std::uninitialized_default_construct(s.begin(), s.end());
    return s;
  }
  // n value-initialised T (zeros for numbers and pointers).
  template <typename T>
  std::span<T> take_zeroed(int64_t n) {
    std::span<T> s = take<T>(n);
    std::fill(s.begin(), s.end(), T{});
    return s;
  }
  // A copy of [first, first + n).
  template <typename T>
  std::span<T> take_copy(const T* first, int64_t n) {
    std::span<T> s = take<T>(n);
    std::copy_n(first, s.size(), s.begin());
    return s;
  }

  Mark mark() const { return {current_, used_}; }
  void release(Mark m) {
    current_ = m.chunk;
    used_ = m.used;
  }

  // Memory held, in bytes (all chunks).
  size_t capacity() const {
    size_t total = 0;
    for (const Chunk& c : chunks_) total += c.bytes;
    return total;
  }
  size_t n_chunks() const { return chunks_.size(); }

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(kAlign)); }
  };
  struct Chunk {
    std::unique_ptr<std::byte[], AlignedDelete> data;
    size_t bytes = 0;
  };

  void* take_bytes(size_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    if (current_ < chunks_.size() && chunks_[current_].bytes - used_ >= bytes) {
      void* p = chunks_[current_].data.get() + used_;
      used_ += bytes;
      return p;
    }
    // Does not fit: the first later chunk that can hold it, else a new one. The tail of the
    // chunks skipped stays unused until the scope that skipped them ends.
    size_t next = chunks_.empty() ? 0 : current_ + 1;
    while (next < chunks_.size() && chunks_[next].bytes < bytes) ++next;
    if (next == chunks_.size()) {
      const size_t size = std::max({bytes, capacity(), kFirstChunkBytes});
      chunks_.push_back(
          Chunk{std::unique_ptr<std::byte[], AlignedDelete>(
                    static_cast<std::byte*>(::operator new[](size, std::align_val_t(kAlign)))),
                size});
    }
    current_ = next;
    used_ = bytes;
    return chunks_[current_].data.get();
  }

  std::vector<Chunk> chunks_;
  size_t current_ = 0, used_ = 0;
};

}  // namespace deepinfer
