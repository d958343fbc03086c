// Fast CPU backend. Variants behind one interface, chosen once at creation:
//   Scalar - portable threaded C++: each thread decodes a weight row once (from its
//            FP8/FP4/BF16 encoding) and reuses it for every activation row; fp32
//            accumulation with 8 partial sums. Also the fallback for what the SIMD kernels
//            do not take: FP8 blocks that are not multiples of 32 (and, on AVX2, FP8 scales
//            >= 2^120), act blocks whose weight-scale indexing differs from per-element
//            scaling, and act-quant rows whose scales exceed 2^31 (huge activations).
//   Avx2 / Avx512 (x86-64), Neon / NeonBf16 (aarch64) - the kernels of cpu_kernels_avx2.cpp /
//            the *_avx512.cpp files / cpu_kernels_neon.cpp / cpu_kernels_neon_bf16.cpp behind the
//            driver below: activations are prepared once per call (copied, or act-quantised
//            bit-identically to act_quant_ref) into per-thread scratch, then output rows are
//            split over the pool. No allocation once the scratch has grown to the shapes in
//            use, no thread creation, no cpuid per call. Each architecture compiles and
//            registers only its own ISA files (isa_kernels, isa_attention below); the
//            others report unsupported.
// Batch invariance: every output's arithmetic depends only on its activation row and weight
// row (decode and prefill kernels run the same operation sequence, modes are chosen per
// activation row and per weight row, and a call whose rows need different modes is split),
// so a sequence's results do not depend on what shares its step, nor on the thread count.
// The GEMMs and sink attention accumulate in fp32, unlike the ref backend's double; the
// indexer scores, linear_f32_exact and the hyper-connection mixes keep double sums. Each op's
// bit contract against the referee is in the op registry (kernels/ops.h).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/formats.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define DI_KERNELS_X86 1
#elif defined(__aarch64__)
#define DI_KERNELS_ARM64 1
#endif

namespace deepinfer::kernels {

namespace {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Weight codes without scale (e4m3 / e2m1 values) of row r.
void decode_codes(const WeightMatrix& w, int64_t r, float* out) {
  if (w.format == WeightFormat::FP8_BLOCK) {
    const uint8_t* src = w.data + r * w.cols;
    for (int64_t c = 0; c < w.cols; ++c) out[c] = e4m3_to_f32(src[c]);
  } else {
    const uint8_t* src = w.data + r * (w.cols / 2);
    for (int64_t c = 0; c < w.cols; c += 2) {
      out[c] = e2m1_to_f32(src[c / 2] & 0xf);
      out[c + 1] = e2m1_to_f32(src[c / 2] >> 4);
    }
  }
}

class ScalarBackend final : public Backend {
 public:
  explicit ScalarBackend(ThreadPool* pool) : pool_(pool) {}
  const char* name() const override { return "cpu"; }
  ThreadPool* pool() const override { return pool_; }

  void linear_f32(const float* x, int64_t M, const WeightMatrix& W, float* y) const override {
    const int64_t N = W.rows, K = W.cols;
    parallel_for(pool_, N, 4, [&](int64_t n0, int64_t n1, int) {
      std::vector<float> row(K);
      for (int64_t n = n0; n < n1; ++n) {
        weight_decode_row(W, n, row.data());
        for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_f32(x + m * K, row.data(), K);
      }
    });
  }

  void linear_act_quant(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y,
                        BlockSum = BlockSum::kExact) const override {
    if (!W.is_quantized()) return linear_f32(x, M, W, y);
    const int64_t N = W.rows, K = W.cols, nb = K / act_block;
    const bool fp4 = W.format == WeightFormat::FP4_BLOCK;
    const int64_t kblock = fp4 ? 32 : act_block;
    std::vector<float> xq(M * K), sx(M * nb), tmp(K);
    for (int64_t m = 0; m < M; ++m) {
      std::copy(x + m * K, x + (m + 1) * K, tmp.begin());
      act_quant_ref(tmp.data(), K, act_block, xq.data() + m * K, sx.data() + m * nb);
    }
    parallel_for(pool_, N, 4, [&](int64_t n0, int64_t n1, int) {
      std::vector<float> codes(K);
      for (int64_t n = n0; n < n1; ++n) {
        decode_codes(W, n, codes.data());
        for (int64_t m = 0; m < M; ++m) {
          float acc = 0.0f;
          for (int64_t k0 = 0; k0 < K; k0 += kblock) {
            float part = dot_f32(xq.data() + m * K + k0, codes.data() + k0, kblock);
            float s_w = fp4 ? e8m0_to_f32(W.scale[n * W.scale_cols + k0 / 32])
                            : e8m0_to_f32(W.scale[(n / W.block) * W.scale_cols + k0 / W.block]);
            acc += part * (sx[m * nb + k0 / act_block] * s_w);
          }
          y[m * N + n] = acc;
        }
      }
    });
  }

  void sink_attention(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale, float sink,
                      bool round_probs, float* out) const override {
    sink_attention_ref(q, keys, n_keys, dim, scale, sink, round_probs, out);
  }

 private:
  ThreadPool* pool_;
};


// ------------------------------------------------------------------------------ SIMD driver

// 64-byte aligned, grow-only buffer; one per thread, so the steady state allocates nothing.
struct Scratch {
  std::vector<unsigned char> mem;
  void* get(size_t bytes) {
    if (mem.size() < bytes + 64) mem.resize(bytes + 64);
    const auto p = reinterpret_cast<uintptr_t>(mem.data());
    return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
  }
};
thread_local Scratch tl_act;   // prepared activations, owned by the calling thread
thread_local Scratch tl_work;  // weight tiles of the thread running a row range

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// One index_scores call, captured by one reference (keeps std::function off the heap).
struct IndexJob {
  const cpu::IsaKernels* k;
  const float* q;    // the query heads, [n_heads, dim]
  const double* qT;  // the same transposed, [dim, n_heads], in double (null with qb)
  const float* w;
  int64_t n_heads, dim;
  const float* const* keys;
  bool round;
  float* scores;
  const cpu::IndexQueryExact* qb;  // null: every dot in double

  float R(float x) const { return round ? round_bf16(x) : x; }
  // The dots of keys [b, b + nb): in fp32 where that is exact (qb, index_dots_exact), in
  // double for the rest (with qb rare keys: the referee's scalar loop, the order index_dots
  // keeps); the same values either way.
  void dots_of(int64_t b, int64_t nb, double* dots) const {
    if (!qb) return k->index_dots(qT, n_heads, dim, keys + b, nb, dots);
    uint8_t exact[64];
    k->index_dots_exact(*qb, n_heads, dim, keys + b, nb, dots, exact);
    for (int64_t s = 0; s < nb; ++s)
      if (!exact[s])
        for (int64_t h = 0; h < n_heads; ++h) {
          double d = 0.0;
          for (int64_t c = 0; c < dim; ++c) d += double(q[h * dim + c]) * double(keys[b + s][c]);
          dots[s * n_heads + h] = d;
        }
  }
  void operator()(int64_t s0, int64_t s1) const {
    // The dots of up to 64 keys at a time, on the stack: a worker thread's first share must
    // not allocate (which thread first gets one depends on the key count and the timing).
    // Each key's score depends on its own dots only, so the block size changes no bit.
    constexpr int64_t kDots = 4096;  // 64 keys of 64 heads
    double stack_dots[kDots];
    std::vector<double> heap_dots;  // more than kDots heads: one key at a time, on the heap
    double* dots = stack_dots;
    int64_t block = std::min<int64_t>(64, kDots / n_heads);
    if (block == 0) {
      block = 1;
      heap_dots.resize(size_t(n_heads));
      dots = heap_dots.data();
    }
    for (int64_t b = s0; b < s1; b += block) {
      const int64_t nb = std::min(block, s1 - b);
      dots_of(b, nb, dots);
      if (k->index_combine && n_heads <= cpu::kIndexCombineMaxHeads) {
        k->index_combine(dots, w, n_heads, nb, round, scores + b);
        continue;
      }
      for (int64_t s = 0; s < nb; ++s) {
        double total = 0.0;
        for (int64_t h = 0; h < n_heads; ++h) {
          const float dot = std::max(R(float(dots[s * n_heads + h])), 0.0f);
          total += double(R(dot * w[h]));
        }
        scores[b + s] = R(float(total));
      }
    }
  }
};

// One linear_f32_exact call, captured by one reference (keeps std::function off the heap).
struct ExactJob {
  const cpu::IsaKernels* k;
  const float* x;
  int64_t M;
  const WeightMatrix* W;
  float* y;
  // fp32 weights are read in place (no decode to share per weight row).
  bool in_place() const {
    return W->format == WeightFormat::F32 && reinterpret_cast<uintptr_t>(W->data) % alignof(float) == 0;
  }
  void dot(int64_t m, int64_t n, const float* w) const {
    const int64_t K = W->cols;
    double acc = 0.0;
    if (k->dot_f64) {
      acc = k->dot_f64(x + m * K, w, K);
    } else {
      for (int64_t i = 0; i < K; ++i) acc += double(x[m * K + i]) * double(w[i]);
    }
    y[m * W->rows + n] = float(acc);
  }
  // Output columns [n0, n1) of every row.
  void columns(int64_t n0, int64_t n1) const {
    thread_local std::vector<float> row;  // grow-only per thread
    const int64_t K = W->cols;
    row.resize(size_t(K));
    for (int64_t n = n0; n < n1; ++n) {
      const float* w = row.data();
      if (in_place())
        w = reinterpret_cast<const float*>(W->data) + n * K;
      else
        weight_decode_row(*W, n, row.data());
      for (int64_t m = 0; m < M; ++m) dot(m, n, w);
    }
  }
  // Every output column of rows [m0, m1): an x row stays in cache while the weight rows pass
  // (by columns, each of the few weight rows re-read all of x: a prefill's mHC mixer, 24 rows
  // of 8192, streamed 8 MiB of x per weight row).
  // Four weight rows at a time share the conversion of x (dot_f64_4: the same bits).
  void rows(int64_t m0, int64_t m1) const {
    const float* w = reinterpret_cast<const float*>(W->data);
    const int64_t K = W->cols, N = W->rows;
    for (int64_t m = m0; m < m1; ++m) {
      int64_t n = 0;
      if (k->dot_f64_4)
        for (; n + 4 <= N; n += 4) {
          double out[4];
          k->dot_f64_4(x + m * K, w + n * K, K, K, out);
          for (int r = 0; r < 4; ++r) y[m * N + n + r] = float(out[r]);
        }
      for (; n < N; ++n) dot(m, n, w + n * K);
    }
  }
};

// What a parallel region needs, captured by one reference (keeps std::function off the heap).
struct PrepJob {
  const cpu::IsaKernels* k;
  const float* x;
  int64_t K, act_block, xs;
  float* xf;
  uint16_t* xb;
  uint8_t* bf16_ok;  // float path, per row
  float* max_scale;  // act-quant path, per row
  void operator()(int64_t m0, int64_t m1) const {
    if (act_block > 0)
      k->prep_act_quant(x, K, act_block, m0, m1, xs, xf, xb, max_scale);
    else
      k->prep_float(x, K, m0, m1, xs, xf, xb, bf16_ok);
  }
};

struct RowsJob {
  const cpu::IsaKernels* k;
  const cpu::LinearCall* c;
  size_t scratch;
};

// Output rows (weight bytes, for a batch) are split over the threads in this many pieces per
// thread, each thread streaming through its own pieces in order and then taking what is left
// of the others' from the back: the two cores of a VM often run at different speeds (by 10%
// and more, changing from run to run), and a static split waited for the slower one.
constexpr int kPiecesPerThread = 16;

// How the kernels treat one activation row. Each row's outputs depend on that row (and the
// weights) only, so a call whose rows disagree is split into uniform sub-calls.
enum RowClass : uint8_t { kBf16Row, kF32Row, kScalarRow };

class SimdBackend final : public Backend {
 public:
  // attention may be null: then every dim takes the portable kernels.
  SimdBackend(ThreadPool* pool, const cpu::IsaKernels& k, const cpu::AttentionKernels* attention)
      : pool_(pool), k_(k), attention_(attention), scalar_(pool) {
    if (pool && pool->size() > 1) serial_ = std::make_unique<SimdBackend>(nullptr, k, attention);
  }
  const char* name() const override { return "cpu"; }
  ThreadPool* pool() const override { return pool_; }

  void linear_f32(const float* x, int64_t M, const WeightMatrix& W, float* y) const override {
    if (!supported(W)) return scalar_.linear_f32(x, M, W, y);
    run(x, M, W, 0, y);
  }

  // Double dots through the ISA kernel, output columns over the pool, each thread decoding a
  // weight row once into its own grow-only buffer (no allocation once warm); with fp32
  // weights and many rows, rows over the pool instead.
  void linear_f32_exact(const float* x, int64_t M, const WeightMatrix& W, float* y) const override {
    const ExactJob job{&k_, x, M, &W, y};
    // Each output is the same dot whichever thread computes it, so the split changes no bit.
    if (job.in_place() && M >= 2 * W.rows)
      parallel_for(pool_, M, 1, [&job](int64_t m0, int64_t m1, int) { job.rows(m0, m1); });
    else
      parallel_for(pool_, W.rows, 1, [&job](int64_t n0, int64_t n1, int) { job.columns(n0, n1); });
  }

  void linear_act_quant(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y,
                        BlockSum = BlockSum::kExact) const override {
    if (!W.is_quantized()) return linear_f32(x, M, W, y);
    if (!supported(W) || !act_supported(W, act_block)) return scalar_.linear_act_quant(x, M, W, act_block, y);
    run(x, M, W, act_block, y);
  }

  // The dots are exact fp32 sums where the values allow (FP4-QDQ'd q and keys: reference
  // numerics; IsaKernels::index_dots_exact), and run in the referee's order (in-order double
  // sums, the heads in vector lanes) otherwise, so the scores equal index_scores_ref's bit for
  // bit whatever the values.
  void index_scores(const float* q, const float* w, int64_t n_heads, int64_t dim, const float* const* keys,
                    int64_t n_keys, bool round, float* scores) const override {
    if (n_keys <= 0) return;
    thread_local std::vector<uint32_t> qdata;  // grow-only: nothing allocated once warm
    cpu::IndexQueryExact qb;
    if (k_.index_query_exact && dim <= cpu::kIndexExactMaxDim) {
      qdata.resize(size_t(cpu::index_query_exact_words(n_heads, dim)));
      k_.index_query_exact(q, n_heads, dim, qdata.data(), &qb);
    }
    thread_local std::vector<double> qT;
    if (!qb.ok) {
      qT.resize(size_t(n_heads * dim));
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t c = 0; c < dim; ++c) qT[c * n_heads + h] = q[h * dim + c];
    }
    // Plain pointers: inside the region a thread_local name would mean the worker's own copy.
    const IndexJob job{&k_, q, qb.ok ? nullptr : qT.data(), w, n_heads, dim, keys, round, scores,
                       qb.ok ? &qb : nullptr};
    parallel_for(pool_, n_keys, 16, [&job](int64_t s0, int64_t s1, int) { job(s0, s1); });
  }

  // Enough queries to share out (a prefill chunk's): each query whole on one thread through
  // serial_, balanced (a later query sees more keys). Few queries (a decode step, a
  // speculative verify) split each one's keys over the pool instead.
  void index_scores_many(const float* q, const float* w, int64_t n_q, int64_t n_heads, int64_t dim,
                         const float* const* keys, int64_t keys_ld, const int64_t* n_vis, bool round,
                         float* scores, int64_t ld) const override {
    if (!serial_ || n_q < 4 * int64_t(pool_->size()))
      return Backend::index_scores_many(q, w, n_q, n_heads, dim, keys, keys_ld, n_vis, round, scores, ld);
    struct Job {
      const SimdBackend* one;
      const float *q, *w;
      int64_t n_heads, dim;
      const float* const* keys;
      int64_t keys_ld;
      const int64_t* n_vis;
      bool round;
      float* scores;
      int64_t ld;
    } job{serial_.get(), q, w, n_heads, dim, keys, keys_ld, n_vis, round, scores, ld};
    parallel_for_balanced(pool_, n_q, 1, kPiecesPerThread, [&job](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i)
        job.one->index_scores(job.q + i * job.n_heads * job.dim, job.w + i * job.n_heads, job.n_heads, job.dim,
                              job.keys + i * job.keys_ld, job.n_vis[i], job.round, job.scores + i * job.ld);
    });
  }

  // The ISA's attention kernels (its AttentionKernels) where they take the dim, else the
  // portable ones.
  void sink_attention(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale, float sink,
                      bool round_probs, float* out) const override {
    if (attention_takes(dim))
      return attention_->sink_attention(q, keys, n_keys, dim, scale, sink, round_probs, out);
    cpu::sink_attention_fast(q, keys, n_keys, dim, scale, sink, round_probs, out);
  }

  void sink_attention_heads(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys, int64_t dim,
                            float scale, const float* sinks, bool round_probs, float* out) const override {
    if (attention_takes(dim) && attention_->sink_attention_heads)
      return attention_->sink_attention_heads(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
    Backend::sink_attention_heads(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
  }

  double fma_peak_macs_per_s() const override { return chains_peak(k_.fma_chains); }
  double bf16_dot_peak_macs_per_s() const override { return k_.bf16 ? chains_peak(k_.bf16_dot_chains) : 0.0; }

 private:
  // Every thread runs the ISA's chains at once; ~4M steps of 12 vector instructions is 10-50
  // ms per round on today's cores. The best of three rounds: another tenant can only slow it.
  double chains_peak(double (*chains)(int64_t, float, int64_t*)) const {
    if (!chains) return 0.0;
    const int threads = pool_ ? pool_->size() : 1;
    constexpr int64_t kSteps = int64_t(1) << 22;
    double best = 0;
    for (int round = 0; round < 3; ++round) {
      std::vector<int64_t> macs(size_t(threads), 0);
      std::vector<double> sums(size_t(threads), 0.0);
      const auto t0 = std::chrono::steady_clock::now();
      auto each = [&](int64_t t0_, int64_t t1_, int) {  // every core at once: run on each thread itself
        for (int64_t t = t0_; t < t1_; ++t) sums[size_t(t)] = chains(kSteps, 1.0f + float(t), &macs[size_t(t)]);
      };
      if (pool_) pool_->run_on_each_thread(each);
      else each(0, 1, 0);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      int64_t total = 0;
      for (int64_t m : macs) total += m;
      if (seconds > 0) best = std::max(best, double(total) / seconds);
    }
    return best;
  }

 public:
  void prefetch_hint(const WeightMatrix* const* weights, int n) const override {
    pool_prefetch_hint(pool_, weights, n);
  }

  void hc_expand(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc, int64_t dim,
                 bool round_bf16, float* Y, int64_t j0, int64_t j1) const override {
    if (k_.hc_expand)
      k_.hc_expand(o, Rs, comb, post, hc, dim, round_bf16, Y, j0, j1);
    else
      hc_expand_ref(o, Rs, comb, post, hc, dim, round_bf16, Y, j0, j1);
  }

  void hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, bool round_bf16,
                   float* out) const override {
    if (k_.hc_collapse)
      k_.hc_collapse(X, pre, hc, dim, round_bf16, out);
    else
      hc_collapse_ref(X, pre, hc, dim, round_bf16, out);
  }

  void swiglu(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
              float* out) const override {
    if (k_.swiglu)
      k_.swiglu(g, u, n, limit, weight, round_bf16, out);
    else
      swiglu_ref(g, u, n, limit, weight, round_bf16, out);
  }

 private:
  bool attention_takes(int64_t dim) const {
    return attention_ && attention_->sink_attention && dim % attention_->dim_align == 0;
  }

  bool supported(const WeightMatrix& W) const {
    switch (W.format) {
      case WeightFormat::F32:
      case WeightFormat::BF16: return true;
      case WeightFormat::FP8_BLOCK: {
        if (W.block <= 0 || W.block % 32 != 0) return false;
        if (k_.fp8_max_scale >= 255) return true;
        const int64_t n = ((W.rows + W.block - 1) / W.block) * W.scale_cols;  // a few hundred bytes
        for (int64_t i = 0; i < n; ++i)
          if (W.scale[i] > k_.fp8_max_scale) return false;
        return true;
      }
      case WeightFormat::FP4_BLOCK: return W.cols % 32 == 0;
    }
    return false;
  }

  // The act-quant GEMM equals the plain product of x_qdq with the exact weights when every
  // weight scale block lies inside one act block (FP8: act_block divides B; FP4: 32 divides
  // act_block); otherwise the reference's indexing differs and Scalar reproduces it.
  bool act_supported(const WeightMatrix& W, int64_t ab) const {
    if (ab <= 0 || W.cols % ab != 0 || ab % k_.act_align != 0) return false;
    return W.format == WeightFormat::FP8_BLOCK ? W.block % ab == 0 : ab % 32 == 0;
  }

  // FP4 weights whose bf16-mode products these kernels take in lane order.
  bool fp4_lane_order(const WeightMatrix& W) const {
    return W.format == WeightFormat::FP4_BLOCK && k_.fp4_lane_order != nullptr;
  }
  // FP4 weights whose prepared activations are rearranged (either mode).
  bool fp4_reordered(const WeightMatrix& W) const {
    return W.format == WeightFormat::FP4_BLOCK && (k_.fp4_lane_order != nullptr || k_.fp4_f32_order != nullptr);
  }
  bool bf16_pair_order(const WeightMatrix& W) const {
    return W.format == WeightFormat::BF16 && k_.bf16_pair_order != nullptr;
  }
  bool fp8_reordered(const WeightMatrix& W) const {
    return W.format == WeightFormat::FP8_BLOCK && k_.fp8_f32_order != nullptr;
  }

  // Row grain of a GEMV-sized call: the kernels' row group, or 1 where they stream one
  // row at a time (so a short, wide matrix such as the 24-row mHC mixer splits evenly).
  static int64_t gemv_grain(const cpu::IsaKernels& k, const cpu::LinearCall& c) {
    const bool plain = c.W->format == WeightFormat::F32 || c.W->format == WeightFormat::BF16;
    return k.plain_m1_rowwise && c.M == 1 && plain ? 1 : k.gemv_grain;
  }

  // act_block > 0: act-quant path.
  void run(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y) const {
    cpu::LinearCall c;
    if (!prepare(x, M, W, act_block, y, tl_act, c)) return;
    const RowsJob job{&k_, &c, work_bytes(k_.scratch_bytes(c))};
    const int64_t grain = c.M <= k_.gemv_max_m ? gemv_grain(k_, c) : k_.gemm_grain;
    parallel_for_balanced(pool_, c.N, grain, kPiecesPerThread, [&job](int64_t n0, int64_t n1, int) {
      void* scratch = job.scratch ? tl_work.get(job.scratch) : nullptr;
      job.k->rows(*job.c, n0, n1, scratch);
    });
  }

  // Prepares the activations of one call into `act` and describes the call in c. Returns
  // false when nothing is left to run: an empty call, or one handed whole to another path
  // (rows of mixed classes, Scalar rows).
  bool prepare(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y, Scratch& act,
               cpu::LinearCall& c) const {
    const int64_t N = W.rows, K = W.cols;
    if (M <= 0 || N <= 0) return false;
    if (K == 0) {
      std::memset(y, 0, size_t(M * N) * sizeof(float));
      return false;
    }
    const bool gemv = M <= k_.gemv_max_m;
    const bool lane_order = fp4_lane_order(W);
    const int64_t xs = round_up(K, lane_order ? std::max(k_.k_align, cpu::kFp4Chunk) : k_.k_align);
    const int64_t m_rows = gemv ? M : round_up(M, k_.m_align);
    const size_t nx = size_t(m_rows * xs);
    // xd (the dot-product order copy for bf16 products over 3+ rows) first: 64-byte aligned.
    const bool want_xd = M >= 3 && k_.bf16_dp_order != nullptr;
    const size_t nxd = want_xd ? nx : 0;
    float* xd = static_cast<float*>(act.get((nxd + nx) * sizeof(float) + nx * sizeof(uint16_t) + size_t(M) * 5));
    float* xf = xd + nxd;
    uint16_t* xb = reinterpret_cast<uint16_t*>(xf + nx);
    float* max_scale = reinterpret_cast<float*>(xb + nx);
    uint8_t* bf16_ok = reinterpret_cast<uint8_t*>(max_scale + M);

    const PrepJob prep{&k_, x, K, act_block, xs, xf, xb, bf16_ok, max_scale};
    if (M * K >= (int64_t(1) << 16))
      parallel_for(pool_, M, 1, [&prep](int64_t m0, int64_t m1, int) { prep(m0, m1); });
    else
      prep(0, M);

    // Row classes: act-quant rows whose scales leave the exact-product range, or that hold a
    // NaN (max_scale NaN: the comparison fails), go to Scalar;
    // float rows use the bf16 kernels when exact bf16 in range (and the weights have them).
    const bool bf16_weights = k_.bf16 && W.format != WeightFormat::F32;
    auto row_class = [&](int64_t m) -> RowClass {
      if (act_block > 0) return max_scale[m] <= cpu::kMaxActScale ? kBf16Row : kScalarRow;
      return bf16_weights && bf16_ok[m] ? kBf16Row : kF32Row;
    };
    const RowClass cls = row_class(0);
    for (int64_t m = 1; m < M; ++m)
      if (row_class(m) != cls) {
        split(x, M, W, act_block, y, row_class);
        return false;
      }
    if (cls == kScalarRow) {
      scalar_.linear_act_quant(x, M, W, act_block, y);
      return false;
    }

    if (m_rows > M) {
      std::memset(xf + M * xs, 0, size_t((m_rows - M) * xs) * sizeof(float));
      std::memset(xb + M * xs, 0, size_t((m_rows - M) * xs) * sizeof(uint16_t));
    }
    if (lane_order && cls == kBf16Row) k_.fp4_lane_order(xb, 0, M, xs);
    if (bf16_pair_order(W)) k_.bf16_pair_order(xf, 0, M, xs);  // every row: bf16 rows fall back to it
    if (W.format == WeightFormat::FP4_BLOCK && k_.fp4_f32_order) k_.fp4_f32_order(xf, 0, M, xs);  // likewise
    if (fp8_reordered(W)) k_.fp8_f32_order(xf, 0, M, xs);
    const bool use_bf16 = k_.bf16 && cls == kBf16Row;
    if (want_xd && use_bf16) {
      if (M * K >= (int64_t(1) << 16))
        parallel_for(pool_, m_rows, 1, [&](int64_t m0, int64_t m1, int) { k_.bf16_dp_order(xb, xd, m0, m1, xs); });
      else
        k_.bf16_dp_order(xb, xd, 0, m_rows, xs);
    }
    c.W = &W;
    c.M = M;
    c.N = N;
    c.K = K;
    c.y = y;
    c.xf = xf;
    c.xb = xb;
    c.xd = want_xd && use_bf16 ? xd : nullptr;
    c.xs = xs;
    c.m_rows = m_rows;
    c.use_bf16 = use_bf16;
    if (k_.call_setup) k_.call_setup(c);
    return true;
  }

 public:
  // Decode-sized calls (M within the GEMV path) share one parallel region, split by weight
  // bytes so each thread streams the same amount. Larger ones (a prefill's routed experts,
  // attention projections) go to run_large first.
  void linear_many(const LinearJob* jobs, size_t n) const override {
    ManyScratch& ms = tl_many;
    PrepKey last_key;
    ms.calls.clear();
    ms.large.clear();
    ms.small.clear();
    if (ms.act.size() < n) ms.act.resize(n);
    for (size_t i = 0; i < n; ++i) (in_gemv_region(jobs[i]) ? ms.small : ms.large).push_back(i);
    run_large(jobs, ms);
    for (size_t i : ms.small) {
      const LinearJob& j = jobs[i];
      const WeightMatrix& W = *j.W;
      const bool act_quant = j.act_block > 0 && W.is_quantized();
      // Products of one input (a MoE expert's w1 and w3, attention projections) share the
      // prepared activations when their preparation would be the same.
      const PrepKey key{j.x, j.M, W.cols, act_quant ? j.act_block : 0, W.format == WeightFormat::F32,
                        fp4_reordered(W), bf16_pair_order(W), fp8_reordered(W)};
      if (!ms.calls.empty() && key == last_key) {
        cpu::LinearCall c = ms.calls.back();
        c.W = &W;
        c.N = W.rows;
        c.y = j.y;
        if (k_.call_setup && !c.x_range) k_.call_setup(c);  // the same x: a range found stays true
        ms.calls.push_back(c);
        continue;
      }
      cpu::LinearCall c;
      if (prepare(j.x, j.M, W, act_quant ? j.act_block : 0, j.y, ms.act[i], c)) {
        ms.calls.push_back(c);
        last_key = key;
      } else {
        last_key = PrepKey{};
      }
    }
    if (ms.calls.empty()) return;
    // Cost of a weight row ~ its bytes; call i spans [start[i], start[i] + N * row_cost).
    ms.start.assign(ms.calls.size() + 1, 0);
    ms.row_cost.resize(ms.calls.size());
    size_t scratch = 0;
    for (size_t i = 0; i < ms.calls.size(); ++i) {
      const cpu::LinearCall& c = ms.calls[i];
      ms.row_cost[i] = row_bytes(*c.W);
      ms.start[i + 1] = ms.start[i] + c.N * ms.row_cost[i];
      scratch = std::max(scratch, k_.scratch_bytes(c));
    }
    const ManyJob job{&k_, &ms, work_bytes(scratch)};
    parallel_for_balanced(pool_, ms.start.back(), 1, kPiecesPerThread, [&job](int64_t b0, int64_t b1, int) {
      job.share(b0, b1, job.scratch ? tl_work.get(job.scratch) : nullptr);
    });
  }

 private:
  // What prepare() reads: two calls with the same key get the same prepared rows and row
  // class (the weight enters only through its width, whether it is F32, which never takes
  // the bf16 kernels, whether its xb / xf are in an FP4 order and its xf in BF16 pair order
  // or in FP8 order).
  struct PrepKey {
    const float* x = nullptr;
    int64_t M = 0, K = 0, act_block = 0;
    bool plain_f32 = false, fp4_order = false, pair_order = false, fp8_order = false;
    bool operator==(const PrepKey&) const = default;
  };

  static int64_t row_bytes(const WeightMatrix& W) {
    switch (W.format) {
      case WeightFormat::F32: return W.cols * 4;
      case WeightFormat::BF16: return W.cols * 2;
      case WeightFormat::FP8_BLOCK: return W.cols;
      case WeightFormat::FP4_BLOCK: return W.cols / 2 + W.cols / 32;
    }
    return W.cols;
  }

  struct ManyScratch {
    std::vector<Scratch> act;  // prepared activations of each batched call
    std::vector<cpu::LinearCall> calls;
    std::vector<int64_t> start, row_cost;
    std::vector<size_t> small, large;  // the jobs of the GEMV region, and the others
    std::vector<size_t> whole, order;  // run_large's
  };
  static thread_local ManyScratch tl_many;

  // Whether linear_many runs job j in its shared GEMV region: decode-sized, with kernels for
  // its weight format (and act-quant block).
  bool in_gemv_region(const LinearJob& j) const {
    const bool act_quant = j.act_block > 0 && j.W->is_quantized();
    return j.M <= k_.gemv_max_m && supported(*j.W) && (!act_quant || act_supported(*j.W, j.act_block));
  }

  // One product as its own call (linear_many's meaning of a job).
  void run_job(const LinearJob& j) const {
    if (j.act_block > 0 && j.W->is_quantized())
      linear_act_quant(j.x, j.M, *j.W, j.act_block, j.y);
    else
      linear_f32(j.x, j.M, *j.W, j.y);
  }

  // linear_many's jobs outside the GEMV region (ms.large). Where there are many of
  // comparable size (a prefill's routed experts: ~230 products of 9-25 rows at 512 tokens),
  // each runs whole on one thread (serial_, the same kernels with no pool), largest first, so
  // a layer takes one fork / join instead of one or two per expert and no thread waits for
  // another's serial activation preparation. The rest (a product over 1 / (4 x threads) of
  // the batch's multiply-adds, or too few products to share out) runs as its own call over
  // the pool. The kernel
  // an output gets depends only on its product's row count, so the bits are the same either
  // way.
  void run_large(const LinearJob* jobs, ManyScratch& ms) const {
    if (ms.large.empty()) return;
    const int T = pool_ ? pool_->size() : 1;
    auto cost = [jobs](size_t i) { return double(jobs[i].M) * double(jobs[i].W->rows) * double(jobs[i].W->cols); };
    double total = 0;
    for (size_t i : ms.large) total += cost(i);
    ms.whole.clear();
    for (size_t i : ms.large) {
      if (serial_ && cost(i) * 4 * T <= total)
        ms.whole.push_back(i);
      else
        run_job(jobs[i]);
    }
    const size_t nw = ms.whole.size();
    if (nw < size_t(2 * T)) {
      for (size_t i : ms.whole) run_job(jobs[i]);
      return;
    }
    // Largest first, dealt round-robin to the threads' shares: each share starts with its
    // largest products, and a thread done early takes the smallest from the back of another.
    std::stable_sort(ms.whole.begin(), ms.whole.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
    ms.order.resize(nw);
    size_t at = 0;
    for (int t = 0; t < T; ++t)
      for (size_t r = size_t(t); r < nw; r += size_t(T)) ms.order[at++] = ms.whole[r];
    const SimdBackend* one = serial_.get();
    const std::vector<size_t>& order = ms.order;
    parallel_for_balanced(pool_, int64_t(nw), 1, int((nw + T - 1) / T), [one, jobs, &order](int64_t b0, int64_t b1, int) {
      for (int64_t p = b0; p < b1; ++p) one->run_job(jobs[order[size_t(p)]]);
    });
  }


  struct ManyJob {
    const cpu::IsaKernels* k;
    const ManyScratch* ms;
    size_t scratch;
    // The weight rows whose first byte lies in [a, b) of the concatenated calls. Edges are
    // rounded to the call's GEMV row grain; neighbouring shares use the same rounding, so
    // every row is done exactly once.
    void share(int64_t a, int64_t b, void* scratch_mem) const {
      for (size_t i = 0; i < ms->calls.size(); ++i) {
        const cpu::LinearCall& c = ms->calls[i];
        const int64_t p = ms->start[i], cost = ms->row_cost[i], g = gemv_grain(*k, c);
        auto edge = [&](int64_t x) {
          if (x <= p) return int64_t(0);
          const int64_t r = (x - p + cost - 1) / cost;
          return std::min(c.N, (r + g - 1) / g * g);
        };
        const int64_t n0 = edge(a), n1 = edge(b);
        if (n1 > n0) k->rows(c, n0, n1, scratch_mem);
      }
    }
  };

  // Rows of different classes: each class as its own call on a gathered copy of its rows.
  // Rare (a batch mixing bf16-exact and general fp32 activations, or act-quant rows with
  // huge values), so plain vectors are fine here.
  template <class F>
  void split(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y, F&& row_class) const {
    const int64_t N = W.rows, K = W.cols;
    std::vector<uint8_t> cls(M);
    for (int64_t m = 0; m < M; ++m) cls[m] = row_class(m);  // before the sub-calls reuse the scratch
    std::vector<int64_t> rows;
    std::vector<float> xsub, ysub;
    for (uint8_t want : {kBf16Row, kF32Row, kScalarRow}) {
      rows.clear();
      for (int64_t m = 0; m < M; ++m)
        if (cls[m] == want) rows.push_back(m);
      if (rows.empty()) continue;
      const int64_t S = int64_t(rows.size());
      xsub.resize(S * K);
      ysub.resize(S * N);
      for (int64_t i = 0; i < S; ++i) std::memcpy(&xsub[i * K], x + rows[i] * K, size_t(K) * sizeof(float));
      if (want == kScalarRow)
        scalar_.linear_act_quant(xsub.data(), S, W, act_block, ysub.data());
      else
        run(xsub.data(), S, W, act_block, ysub.data());
      for (int64_t i = 0; i < S; ++i) std::memcpy(y + rows[i] * N, &ysub[i * N], size_t(N) * sizeof(float));
    }
  }

  // The thread scratch a call asks for: nothing when it needs none, else the most any call has
  // needed so far, which every thread of the pool grows to as soon as it rises. Which thread
  // runs which rows changes from call to call (a thread that finishes early takes others'
  // rows), so growing on first use let a decode step allocate whenever a thread first met,
  // say, an expert two tokens of the batch chose. Called by the thread that owns the pool.
  size_t work_bytes(size_t need) const {
    if (need == 0) return 0;
    if (!pool_) return need;  // serial_: one per worker at a time, each grows its own tl_work
    if (need > work_hw_) {
      work_hw_ = need;
      if (pool_) pool_->run_on_each_thread([need](int64_t, int64_t, int) { tl_work.get(need); });
      else tl_work.get(need);
    }
    return work_hw_;
  }

  ThreadPool* pool_;
  const cpu::IsaKernels& k_;
  const cpu::AttentionKernels* attention_;
  ScalarBackend scalar_;
  mutable size_t work_hw_ = 0;  // work_bytes()
  // The same kernels with no pool, for products run whole on one worker (run_large).
  std::unique_ptr<SimdBackend> serial_;
};
thread_local SimdBackend::ManyScratch SimdBackend::tl_many;

// The one place the ISA files are registered: each architecture's own (the others are not
// compiled there, and isa_supported() reports them absent). Two tables per ISA, the kernels
// (cpu_isa.h) and the attention (attention_cpu.h); the backend and the op registry
// (kernels/ops.h) read only these, never an ISA's name.
const cpu::IsaKernels* isa_kernels(Isa isa) {
  switch (isa) {
#if defined(DI_KERNELS_X86)
    case Isa::Avx2: return &cpu::avx2_kernels();
    case Isa::Avx512: return &cpu::avx512_kernels();
#elif defined(DI_KERNELS_ARM64)
    case Isa::Neon: return &cpu::neon_kernels();
    case Isa::NeonBf16: return &cpu::neon_bf16_kernels();
#endif
    default: break;
  }
  return nullptr;
}

#if defined(DI_KERNELS_X86)
constexpr cpu::AttentionKernels kAvx2Attention = {"avx2", cpu::sink_attention_avx2, cpu::sink_attention_heads_avx2, 16};
constexpr cpu::AttentionKernels kAvx512Attention = {"avx512", cpu::sink_attention_avx512,
                                                    cpu::sink_attention_heads_avx512, 16};
#elif defined(DI_KERNELS_ARM64)
// Both aarch64 variants run the NEON attention (Advanced SIMD only: the bits of the AVX-512 one).
constexpr cpu::AttentionKernels kNeonAttention = {"neon", cpu::sink_attention_neon, cpu::sink_attention_heads_neon, 16};
#endif

const cpu::AttentionKernels* isa_attention(Isa isa) {
  switch (isa) {
#if defined(DI_KERNELS_X86)
    case Isa::Avx2: return &kAvx2Attention;
    case Isa::Avx512: return &kAvx512Attention;
#elif defined(DI_KERNELS_ARM64)
    case Isa::Neon:
    case Isa::NeonBf16: return &kNeonAttention;
#endif
    default: break;
  }
  return nullptr;
}

Isa detect_isa() {
  // The CPU picks the variant, not the user (DESIGN: no kernel knobs); tests and benchmarks
  // that need a given ISA construct it with make_cpu_backend_isa().
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::NeonBf16, Isa::Neon})
    if (isa_supported(isa)) return isa;
  return Isa::Scalar;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
    case Isa::NeonBf16: return "neon-bf16";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
#if defined(DI_KERNELS_X86)
    case Isa::Avx2: return cpu_features().has_avx2_tier();
    case Isa::Avx512: return cpu_features().has_avx512_tier();
#elif defined(DI_KERNELS_ARM64)
    case Isa::Neon: return cpu_features().has_neon_tier();
    case Isa::NeonBf16: return cpu_features().has_neon_bf16_tier();
#endif
    default: return false;  // another architecture's kernels: not compiled here
  }
}

Isa cpu_dispatch_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

std::unique_ptr<Backend> make_cpu_backend_isa(ThreadPool* pool, Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("cpu backend: this CPU does not support ") + isa_name(isa));
  if (isa == Isa::Scalar) return std::make_unique<ScalarBackend>(pool);
  return std::make_unique<SimdBackend>(pool, *isa_kernels(isa), isa_attention(isa));
}

std::unique_ptr<Backend> make_cpu_backend_avx512_tiles(ThreadPool* pool, bool dp_tiles) {
  if (!isa_supported(Isa::Avx512)) throw std::invalid_argument("cpu backend: this CPU does not support avx512");
#if defined(DI_KERNELS_X86)
  return std::make_unique<SimdBackend>(pool, cpu::avx512_kernels_with_tiles(dp_tiles), isa_attention(Isa::Avx512));
#else
  (void)pool;
  (void)dp_tiles;
  return nullptr;  // not reached: isa_supported() is false off x86
#endif
}

const cpu::IsaKernels* isa_kernel_table(Isa isa) { return isa_supported(isa) ? isa_kernels(isa) : nullptr; }

const cpu::AttentionKernels* isa_attention_table(Isa isa) {
  return isa_supported(isa) ? isa_attention(isa) : nullptr;
}

std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool) { return make_cpu_backend_isa(pool, cpu_dispatch_isa()); }

void cpu_act_quant(Isa isa, float* x, int64_t n, int64_t block, float* q_out, float* s_out) {
  const cpu::IsaKernels* k = isa_supported(isa) ? isa_kernels(isa) : nullptr;
  if (!k || block <= 0 || block % k->act_align != 0 || n % block != 0) return act_quant_ref(x, n, block, q_out, s_out);
  k->act_quant(x, n, block, q_out, s_out);
}

}  // namespace deepinfer::kernels
