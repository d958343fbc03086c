// "No allocation in the decode loop": once warm, a decode step (one token per sequence through
// Model::forward or forward_batch, cpu kernels on a 2-thread pool) never calls the heap
// allocator. Its own executable (test_decode_no_alloc, not globbed into test_model): it
// replaces the global operator new / delete to count every allocation made while counting
// is on, on any thread (the calling thread and the pool's workers).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <tuple>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "model/deepseek_v4/model.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t))
    p = std::malloc(n);
  else
    p = std::aligned_alloc(align, (n + align - 1) / align * align);
  return p;
}

// Allocations made by fn().
template <typename Fn>
int64_t allocations_in(Fn&& fn) {
  g_allocations = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_allocations.load();
}

}  // namespace

// Every replacement allocates with malloc / aligned_alloc and frees with free (GCC cannot see
// that the pair matches).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = counted_alloc(n, std::size_t(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, std::size_t(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, std::size_t(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using namespace deepinfer;
using namespace deepinfer::v4;

// tiny-v4-c, and tiny-v41-a (V4.1: Engram hashing, the shared top-k runtime, ratio-2 groups).
std::string tiny_model(const std::string& set) { return std::string(DI_SHARED_DIR) + "/golden/" + set + "/model"; }

// Positions: every sequence here stays inside its first KV page (SequenceState's default 64
// tokens), so no step grows a page from the sequence's private source (that allocation is
// the page itself, legitimately, and happens once per 64 tokens). A first sequence warms the
// arenas up to kWarmTo tokens; the measured sequences then decode positions below kWarmTo,
// whose temporaries (key lists and indexer scores grow with the context) are no larger.
constexpr int64_t kPrompt = 5;
constexpr int64_t kWarmTo = 60;
constexpr int64_t kMeasuredSteps = 24;
static_assert(kWarmTo <= SequenceState::kDefaultBlockTokens && kPrompt + 2 + kMeasuredSteps < kWarmTo);

int32_t token_at(int64_t p) { return int32_t((p * 7 + 3) % 50); }

void prefill(const Model& m, SequenceState& st, const Numerics& num) {
  std::vector<int32_t> prompt;
  for (int64_t p = 0; p < kPrompt; ++p) prompt.push_back(token_at(p));
  std::vector<float> logits(size_t(kPrompt * m.config().vocab_size));
  m.forward(prompt.data(), kPrompt, st, num, logits.data());
}

class DecodeNoAlloc : public ::testing::TestWithParam<std::tuple<std::string, NumericsMode>> {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(2);
    cpu_ = kernels::make_cpu_backend(pool_).release();
  }
  static void TearDownTestSuite() {
    delete cpu_;
    delete pool_;
    for (auto& [set, m] : models_) delete m;
    models_.clear();
  }
  void SetUp() override {
    Model*& m = models_[std::get<0>(GetParam())];
    if (!m) m = Model::load(tiny_model(std::get<0>(GetParam()))).release();
    model_ = m;
  }
  Numerics numerics() const {
    Numerics num;
    num.mode = std::get<1>(GetParam());
    num.backend = cpu_;
    return num;
  }
  // Decodes n sequences together up to kWarmTo tokens, so every grow-only buffer (the
  // model's step arena, the kernels' thread_local scratch) reaches its size for them. The
  // kernels' buffers follow how many rows each expert gets, which depends on the routing: a
  // batch warmed with more sequences than the measured one covers every split of its rows.
  void warm_up(int n) const {
    const Numerics num = numerics();
    const int64_t V = model_->config().vocab_size;
    std::vector<SequenceState> seqs;
    for (int s = 0; s < n; ++s) {
      seqs.push_back(model_->new_sequence());
      prefill(*model_, seqs.back(), num);
    }
    std::vector<float> logits(static_cast<size_t>(n * V));
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::vector<SequenceChunk> chunks(static_cast<size_t>(n));
    while (seqs[0].n_past < kWarmTo) {
      for (size_t s = 0; s < size_t(n); ++s) {
        tokens[s] = token_at(seqs[s].n_past + int64_t(s));
        chunks[s] = SequenceChunk{&tokens[s], 1, &seqs[s], &logits[s * size_t(V)], false};
      }
      model_->forward_batch(chunks, num);
    }
  }

  Model* model_ = nullptr;
  static inline std::map<std::string, Model*> models_;
  static ThreadPool* pool_;
  static kernels::Backend* cpu_;
};
ThreadPool* DecodeNoAlloc::pool_ = nullptr;
kernels::Backend* DecodeNoAlloc::cpu_ = nullptr;

TEST_P(DecodeNoAlloc, ForwardOneToken) {
  warm_up(1);
  const Numerics num = numerics();
  SequenceState st = model_->new_sequence();
  prefill(*model_, st, num);
  std::vector<float> logits(size_t(model_->config().vocab_size));
  for (int i = 0; i < 2; ++i) {
    const int32_t tok = token_at(st.n_past);
    model_->forward(&tok, 1, st, num, logits.data());
  }
  const int64_t n = allocations_in([&] {
    for (int i = 0; i < kMeasuredSteps; ++i) {
      const int32_t tok = token_at(st.n_past);
      model_->forward(&tok, 1, st, num, logits.data());
    }
  });
  EXPECT_EQ(n, 0) << "allocations in " << kMeasuredSteps << " decode steps";
  std::printf("forward: %.1f allocations per decode step\n", double(n) / kMeasuredSteps);
}

TEST_P(DecodeNoAlloc, ForwardBatchOfThree) {
  warm_up(6);
  const Numerics num = numerics();
  const int64_t V = model_->config().vocab_size;
  std::vector<SequenceState> seqs;
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(model_->new_sequence());
    prefill(*model_, seqs.back(), num);
  }
  std::vector<float> logits(size_t(3 * V));
  std::vector<int32_t> tokens(3);
  std::vector<SequenceChunk> chunks(3);
  auto step = [&] {
    for (size_t s = 0; s < 3; ++s) {
      tokens[s] = token_at(seqs[s].n_past + int64_t(s));
      chunks[s] = SequenceChunk{&tokens[s], 1, &seqs[s], &logits[s * size_t(V)], false};
    }
    model_->forward_batch(chunks, num);
  };
  for (int i = 0; i < 2; ++i) step();
  const int64_t n = allocations_in([&] {
    for (int i = 0; i < kMeasuredSteps; ++i) step();
  });
  EXPECT_EQ(n, 0) << "allocations in " << kMeasuredSteps << " batched decode steps";
  std::printf("forward_batch (3 sequences): %.1f allocations per decode step\n", double(n) / kMeasuredSteps);
}

// The kernels' per-thread scratch: when a call needs more than any before it, every thread of
// the pool grows to it at once, not whichever threads happen to run the call's rows. Here the
// first call has one weight row, so the calling thread runs it alone; the calls after it
// spread 3000 rows over all three threads and must not allocate.
TEST(DecodeNoAllocScratch, EveryThreadGrowsWhenTheLargestNeedRises) {
  ThreadPool pool(3);
  auto be = kernels::make_cpu_backend(&pool);
  const int64_t K = 1000, N = 3000, M = 16;
  std::vector<float> w(size_t(N * K)), x(size_t(M * K)), y(size_t(M * N));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 13) - 6) / 8.0f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 7) - 3) / 4.0f;
  WeightMatrix one_row{WeightFormat::F32, 1, K, reinterpret_cast<const uint8_t*>(w.data())};
  WeightMatrix many_rows{WeightFormat::F32, N, K, reinterpret_cast<const uint8_t*>(w.data())};
  be->linear_f32(x.data(), M, one_row, y.data());
  const int64_t n = allocations_in([&] {
    for (int64_t rows : {M, int64_t(3), int64_t(8), M}) be->linear_f32(x.data(), rows, many_rows, y.data());
  });
  EXPECT_EQ(n, 0);
}

// The indexer's scores and sink attention run on the pool's workers; a worker's first share
// must not allocate either (which worker first gets one depends on the key count and, in the
// model's balanced loops, on timing). The caller's own buffers are warmed by a short call.
TEST(DecodeNoAllocScratch, IndexerAndAttentionAllocateNothingOnAFreshThread) {
  ThreadPool pool(3);
  auto be = kernels::make_cpu_backend(&pool);
  const int64_t H = 64, D = 128, S = 600;
  std::vector<float> q(static_cast<size_t>(H * D)), w(static_cast<size_t>(H)), keys(static_cast<size_t>(S * D)),
      scores(static_cast<size_t>(S));
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i % 11) - 5) / 8.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 5) + 1) / 16.0f;
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = float(int(i % 13) - 6) / 8.0f;
  std::vector<const float*> key_ptrs(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) key_ptrs[size_t(s)] = &keys[size_t(s * D)];
  be->index_scores(q.data(), w.data(), H, D, key_ptrs.data(), 8, true, scores.data());  // the caller alone
  EXPECT_EQ(allocations_in([&] { be->index_scores(q.data(), w.data(), H, D, key_ptrs.data(), S, true, scores.data()); }),
            0);
  // One head per thread, head size 40 (not the SIMD kernels' multiple of 16: the plain kernel).
  struct Heads {
    const kernels::Backend* be;
    const float* q;
    const float* const* keys;
    float* out;
    void operator()(int i) const { be->sink_attention(q + 40 * i, keys, 600, 40, 0.125f, 0.0f, false, out + 40 * i); }
  } heads{be.get(), q.data(), key_ptrs.data(), nullptr};
  std::vector<float> out(3 * 40);
  heads.out = out.data();
  EXPECT_EQ(allocations_in([&] { pool.run(3, 1, [&heads](int64_t i, int64_t, int) { heads(int(i)); }); }), 0);
}

// The counter itself: an allocation in the measured region is seen.
TEST(DecodeNoAllocCounter, SeesAnAllocation) {
  const int64_t n = allocations_in([] {
    std::vector<float> v(16);
    ::testing::PrintToString(v);  // v is used, so the allocation is not elided
  });
  EXPECT_GE(n, 1);
}

INSTANTIATE_TEST_SUITE_P(Numerics, DecodeNoAlloc,
                         ::testing::Combine(::testing::Values(std::string("tiny-v4-c"), std::string("tiny-v41-a")),
                                            ::testing::Values(NumericsMode::Reference, NumericsMode::Float)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, NumericsMode>>& info) {
                           std::string set = std::get<0>(info.param);
                           for (char& ch : set)
                             if (ch == '-') ch = '_';
                           return set + "_" + numerics_name(std::get<1>(info.param));
                         });

}  // namespace
