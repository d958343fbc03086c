// The same bits on x86-64 and aarch64. The NEON kernels run the x86 kernels' arithmetic lane for
// lane (neon_kernels(): the AVX2 kernels'; neon_bf16_kernels(): the AVX-512 kernels', both
// modes; attention_neon.cpp: the AVX-512 attention, which AVX2 reproduces too), so a model
// gives the same logits on either machine. No machine runs both, so each pair is checked
// through a fingerprint (FNV-1a of the outputs' bits) of fixed products, recorded on x86 and
// compared on whichever member of the pair this machine supports. The inputs come from
// std::mt19937's integers and bit operations only (no libm, whose last bits are not promised
// to agree between builds). A kernel change that moves any output bit fails here on the
// machine that runs it: then its mirror on the other architecture has to follow, and the
// fingerprint is recorded again (printed below).
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

// Fingerprints of the sets below, recorded on x86-64 (AVX2 and AVX-512 kernels).
constexpr uint64_t kFp32SetAvx2 = 0xa4e654743d69db69ull;    // AVX2 = NEON
constexpr uint64_t kFp32SetAvx512 = 0x71d10c20ea1859e3ull;  // AVX-512 = NEON + BF16
constexpr uint64_t kBf16SetBits = 0xf4dde3ad733f1e2full;    // AVX-512 bf16 mode = NEON + BF16
constexpr uint64_t kAttentionBits = 0x405acc1809b6710bull;  // AVX-512 = AVX2 = NEON sink attention

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  // NaN payloads follow each ISA's own propagation rules: every NaN counts as one.
  void add(const std::vector<float>& v) {
    for (float f : v) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      add(std::isnan(f) ? 0x7fc00000u : b);
    }
  }
};

// Values from the generator's bits only.
struct Gen {
  std::mt19937 rng;
  explicit Gen(uint32_t seed) : rng(seed) {}
  // Uniform in [-r, r) with a full 24-bit mantissa grid.
  float uniform(float r) { return (float(int32_t(rng() >> 8) - (1 << 23)) * 0x1p-23f) * r; }
  float bf16(float r) {
    const float f = uniform(r);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    b &= 0xffff0000u;
    float o;
    std::memcpy(&o, &b, 4);
    return o;
  }
  int in(int lo, int hi) { return lo + int(rng() % uint32_t(hi - lo + 1)); }
};

struct Weight {
  std::vector<uint8_t> data, scale;
  WeightMatrix w;
};

Weight make_weight(WeightFormat f, int64_t rows, int64_t cols, Gen& g, int64_t block = 128) {
  Weight o;
  o.w.format = f;
  o.w.rows = rows;
  o.w.cols = cols;
  if (f == WeightFormat::FP8_BLOCK) {
    o.data.resize(size_t(rows * cols));
    for (auto& b : o.data) {
      do b = uint8_t(g.rng());
      while ((b & 0x7f) == 0x7f);
    }
    o.w.block = block;
    o.w.scale_cols = (cols + block - 1) / block;
    o.scale.resize(size_t((rows + block - 1) / block * o.w.scale_cols));
  } else if (f == WeightFormat::FP4_BLOCK) {
    o.data.resize(size_t(rows * cols / 2));
    for (auto& b : o.data) b = uint8_t(g.rng());
    o.w.block = 32;
    o.w.scale_cols = cols / 32;
    o.scale.resize(size_t(rows * o.w.scale_cols));
  } else if (f == WeightFormat::BF16) {
    o.data.resize(size_t(rows * cols * 2));
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = g.bf16(0.1f);
      uint32_t b;
      std::memcpy(&b, &v, 4);
      o.data[2 * i] = uint8_t(b >> 16);
      o.data[2 * i + 1] = uint8_t(b >> 24);
    }
  } else {
    o.data.resize(size_t(rows * cols * 4));
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = g.uniform(0.1f);
      std::memcpy(&o.data[4 * i], &v, 4);
    }
  }
  for (auto& s : o.scale) s = uint8_t(g.in(118, 128));
  o.w.data = o.data.data();
  o.w.scale = o.scale.empty() ? nullptr : o.scale.data();
  return o;
}

std::vector<float> make_x(int64_t n, bool bf16, Gen& g) {
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = bf16 ? g.bf16(3.0f) : g.uniform(3.0f);
  return x;
}

// fp32 activations (every ISA's fp32 mode): all formats, decode and prefill row counts, K
// tails; act-quant (bf16 mode where the kernels have one); the double dots of
// linear_f32_exact (80 rows: fp32 weights take the four-row dots); SwiGLU.
uint64_t fp32_set(const Backend& be) {
  Fnv h;
  Gen g(2026);
  for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t K : {64, 200, 256}) {
      if (f == WeightFormat::FP4_BLOCK && K % 32) continue;
      const Weight o = make_weight(f, 37, K, g, K == 200 ? 32 : 128);
      for (int64_t M : {1, 5, 12}) {
        const std::vector<float> x = make_x(M * K, false, g);
        std::vector<float> y(size_t(M * 37));
        be.linear_f32(x.data(), M, o.w, y.data());
        h.add(y);
        if (f == WeightFormat::FP8_BLOCK || f == WeightFormat::FP4_BLOCK) {
          be.linear_act_quant(x.data(), M, o.w, K == 200 ? 8 : 32, y.data());
          h.add(y);
        }
      }
      const std::vector<float> x = make_x(80 * K, false, g);
      std::vector<float> y(size_t(80 * 37));
      be.linear_f32_exact(x.data(), 80, o.w, y.data());
      h.add(y);
    }
  std::vector<float> gate = make_x(333, false, g), up = make_x(333, false, g), out(333);
  for (auto& v : gate) v *= 8.0f;
  const float weight = 0.375f;
  be.swiglu(gate.data(), up.data(), 333, 7.0f, &weight, true, out.data());
  h.add(out);
  be.swiglu(gate.data(), up.data(), 333, 0.0f, nullptr, false, out.data());
  h.add(out);
  return h.h;
}

// bf16 mode (activations exact bf16 in range, weight scales and values in range): act-quant
// FP8 (V4 and V4.1 blocks) and FP4 over the row counts of every path of the AVX-512 kernels
// (one-row GEMV, multi-row GEMV, FP4's multi-row kernel, tiles), BF16 / FP8 / FP4 weights
// against bf16 activations.
uint64_t bf16_set(const Backend& be) {
  Fnv h;
  Gen g(4051);
  for (int64_t K : {128, 384, 1024}) {
    const Weight fp8 = make_weight(WeightFormat::FP8_BLOCK, 29, K, g, 128);
    const Weight fp8_32 = make_weight(WeightFormat::FP8_BLOCK, 29, K, g, 32);
    const Weight fp4 = make_weight(WeightFormat::FP4_BLOCK, 29, K, g);
    const Weight bf16 = make_weight(WeightFormat::BF16, 29, K, g);
    for (int64_t M : {1, 2, 3, 5, 9, 12, 20}) {
      const std::vector<float> x = make_x(M * K, true, g);
      std::vector<float> y(size_t(M * 29));
      be.linear_act_quant(x.data(), M, fp8.w, 128, y.data());
      h.add(y);
      be.linear_act_quant(x.data(), M, fp8_32.w, 32, y.data());
      h.add(y);
      be.linear_act_quant(x.data(), M, fp4.w, 128, y.data());
      h.add(y);
      be.linear_act_quant(x.data(), M, fp4.w, 32, y.data());
      h.add(y);
      for (const Weight* o : {&bf16, &fp8, &fp4}) {
        be.linear_f32(x.data(), M, o->w, y.data());
        h.add(y);
      }
    }
  }
  return h.h;
}

uint64_t attention_set(const Backend& be) {
  Fnv h;
  Gen g(77);
  for (int64_t n : {1, 70, 200})
    for (int64_t dim : {16, 48, 128}) {
      const int64_t heads = 5;
      const std::vector<float> q = make_x(heads * dim, false, g), kv = make_x(n * dim, false, g);
      const std::vector<float> sinks = make_x(heads, false, g);
      std::vector<const float*> keys(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) keys[size_t(j)] = (j > 0 && g.rng() % 4 == 0) ? nullptr : &kv[size_t(j * dim)];
      for (bool round : {false, true}) {
        std::vector<float> out(size_t(heads * dim));
        be.sink_attention_heads(q.data(), heads, keys.data(), n, dim, 0.125f, sinks.data(), round, out.data());
        h.add(out);
      }
    }
  return h.h;
}

void check(const char* set, uint64_t got, uint64_t want, Isa isa) {
  std::printf("%s fingerprint on %s: 0x%016" PRIx64 "\n", set, isa_name(isa), got);
  EXPECT_EQ(got, want) << set << " on " << isa_name(isa)
                       << ": the bits moved. The NEON kernels mirror the x86 ones lane for lane; change both "
                          "together and record the new fingerprint.";
}

}  // namespace

TEST(CrossIsaBits, NeonEqualsAvx2) {
  int checked = 0;
  for (Isa isa : {Isa::Avx2, Isa::Neon}) {
    if (!isa_supported(isa)) continue;
    ThreadPool pool(2);
    check("fp32 set", fp32_set(*make_cpu_backend_isa(&pool, isa)), kFp32SetAvx2, isa);
    ++checked;
  }
  if (!checked) GTEST_SKIP() << "needs AVX2 or NEON";
}

TEST(CrossIsaBits, NeonBf16EqualsAvx512) {
  int checked = 0;
  for (Isa isa : {Isa::Avx512, Isa::NeonBf16}) {
    if (!isa_supported(isa) || !isa_kernel_table(isa)->bf16) continue;  // no bf16 mode on this CPU
    ThreadPool pool(2);
    const auto be = make_cpu_backend_isa(&pool, isa);
    check("fp32 set", fp32_set(*be), kFp32SetAvx512, isa);
    check("bf16 set", bf16_set(*be), kBf16SetBits, isa);
    ++checked;
  }
  if (!checked) GTEST_SKIP() << "needs AVX-512 or NEON with BF16 (bf16 mode)";
}

TEST(CrossIsaBits, AttentionNeonEqualsAvx512) {
  int checked = 0;
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::NeonBf16, Isa::Neon}) {
    if (!isa_supported(isa)) continue;
    ThreadPool pool(1);
    check("attention", attention_set(*make_cpu_backend_isa(&pool, isa)), kAttentionBits, isa);
    ++checked;
  }
  if (!checked) GTEST_SKIP() << "needs a vector ISA";
}
