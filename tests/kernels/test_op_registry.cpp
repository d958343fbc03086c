// The op registry's test (kernels/ops.h): every op of op_catalogue() on every ISA this machine
// runs (Scalar included), each over its list of awkward shapes (one row, tails that are not a
// multiple of the vector widths, odd sizes, short and long K), against its referee, as its bit
// contract says: bits (NaN by bits or by NaN-ness, as the contract says), units in the last
// place (with a cap on how many outputs may differ), or fp32 reassociation's bound. NaN / inf /
// subnormal inputs are generated exactly where the contract covers them, and every output
// buffer carries guard values after its end (the ops write their outputs only). A case is one
// op on one ISA; each op has one generator below, and OpRegistry.EveryOpHasACaseGenerator fails
// for an op that has none. The light per-token ops (light_ops.h) have no implementation but
// their referee, the same on every backend: their cases check it against the test's own
// evaluation of its formula, and for the same bits from a worker thread (light_case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/formats.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"
#include "kernels/light_ops.h"
#include "kernels/ops.h"
#include "random_weight.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

using kernel_test::OwnedWeight;
using kernel_test::random_weight;

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kInff = std::numeric_limits<float>::infinity();

// ----------------------------------------------------------------------------- comparison

constexpr float kGuard = -4321.25f;
constexpr int64_t kGuards = 5;

// An output buffer of n floats, filled with `fill`, followed by guard values.
struct Out {
  std::vector<float> v;
  int64_t n;
  explicit Out(int64_t n_, float fill = 0.0f) : v(size_t(n_ + kGuards), kGuard), n(n_) {
    std::fill_n(v.begin(), n_, fill);
  }
  float* data() { return v.data(); }
  const float* data() const { return v.data(); }
  bool guards_intact() const {
    for (int64_t g = 0; g < kGuards; ++g)
      if (f32_bits(v[size_t(n + g)]) != f32_bits(kGuard)) return false;
    return true;
  }
};

// One case's comparisons against the referee, as the op's contract says.
struct Checker {
  const OpSpec& spec;
  Isa isa;
  int64_t outputs = 0, differing = 0, failures = 0;

  void fail(const std::string& where, const std::string& what) {
    if (++failures <= 8) ADD_FAILURE() << spec.name << " on " << isa_name(isa) << ", " << where << ": " << what;
  }

  // got against want (n outputs); mag: each output's sum of |terms| (Magnitude::kSumAbsTerms);
  // rounded: the op's bf16 flag was set (bound_rounded, bf16 units).
  void compare(const float* got, const float* want, int64_t n, const std::string& where, bool rounded = false,
               const double* mag = nullptr) {
    const double bound = rounded ? spec.contract.bound_rounded : spec.contract.bound;
    for (int64_t i = 0; i < n; ++i) {
      ++outputs;
      const float g = got[i], w = want[i];
      auto detail = [&] { return describe(i, g, w); };
      if (std::isnan(w)) {
        if (!std::isnan(g)) fail(where, "want NaN, " + detail());
        else if (spec.contract.nan_bits && f32_bits(g) != f32_bits(w)) fail(where, "NaN bits differ, " + detail());
        continue;
      }
      if (f32_bits(g) == f32_bits(w)) continue;
      ++differing;
      switch (spec.contract.bits) {
        case BitContract::kBits: fail(where, "bits differ, " + detail()); break;
        case BitContract::kUlp: {
          if (std::isnan(g) || std::isinf(w) || w == 0.0f || std::signbit(g) != std::signbit(w)) {
            fail(where, "special value differs, " + detail());
            break;
          }
          const int64_t unit = rounded ? 0x10000 : 1;  // one bf16 / fp32 unit in the last place
          const int64_t d = std::abs(int64_t(f32_bits(g)) - int64_t(f32_bits(w)));
          if (double(d) > bound * double(unit)) fail(where, "beyond " + std::to_string(bound) + " ulp, " + detail());
          break;
        }
        case BitContract::kFp32Reassoc: {
          if (std::isinf(w) || !std::isfinite(g)) {
            fail(where, "non-finite result differs, " + detail());
            break;
          }
          double m = 0.0;
          if (spec.contract.magnitude == Magnitude::kSumAbsTerms) m = mag ? mag[i] : 0.0;
          if (spec.contract.magnitude == Magnitude::kOnePlusAbs) m = 1.0 + std::abs(double(w));
          const double err = std::abs(double(g) - double(w));
          if (!(err <= bound * m + 0x1p-126))
            fail(where, detail() + ", |error| " + std::to_string(err) + " > " + std::to_string(bound) + " * " +
                            std::to_string(m));
          break;
        }
      }
    }
  }
  void compare(const Out& got, const std::vector<float>& want, const std::string& where, bool rounded = false,
               const std::vector<double>* mag = nullptr) {
    if (!got.guards_intact()) fail(where, "wrote past its output");
    compare(got.data(), want.data(), got.n, where, rounded, mag ? mag->data() : nullptr);
  }
  // An op with no implementation but its referee against the test's own evaluation of the
  // formula its header states: the bits, a NaN by NaN-ness (which NaN an IEEE operation passes
  // on is the hardware's choice, not the formula's).
  void matches_formula(const float* got, const float* want, int64_t n, const std::string& where) {
    for (int64_t i = 0; i < n; ++i) {
      ++outputs;
      if (f32_bits(got[i]) != f32_bits(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i])))
        fail(where, "not the formula's bits, " + describe(i, got[i], want[i]));
    }
  }
  // Two results of the same backend that its contract makes equal bit for bit.
  void same_bits(const float* a, const float* b, int64_t n, const std::string& where) {
    if (std::memcmp(a, b, size_t(n) * sizeof(float)) != 0) fail(where, "not the bits of the backend's own call");
  }
  static std::string describe(int64_t i, float g, float w) {
    return "index " + std::to_string(i) + ": got " + std::to_string(g) + " (0x" + hex(f32_bits(g)) + "), want " +
           std::to_string(w) + " (0x" + hex(f32_bits(w)) + ")";
  }
  static std::string hex(uint32_t b) {
    char s[16];
    std::snprintf(s, sizeof s, "%08x", b);
    return s;
  }
};

// ----------------------------------------------------------------------------- inputs

std::vector<float> normal(int64_t n, std::mt19937& rng, float sd = 1.0f, bool bf16 = false) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = bf16 ? round_bf16(nd(rng)) : nd(rng);
  return v;
}

// Sum over k of |x[m] * W[n]| per output: the scale of fp32 reassociation noise.
std::vector<double> magnitudes(const std::vector<float>& x, int64_t M, const WeightMatrix& W) {
  const int64_t N = W.rows, K = W.cols;
  std::vector<double> mag(static_cast<size_t>(M * N));
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    weight_decode_row(W, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::abs(double(x[size_t(m * K + k)]) * double(row[size_t(k)]));
      mag[size_t(m * N + n)] = s;
    }
  }
  return mag;
}

// x act-quantised row by row, as the act-quant GEMMs see it.
std::vector<float> act_quantised(std::vector<float> x, int64_t M, int64_t K, int64_t act_block) {
  for (int64_t m = 0; m < M; ++m) act_quant_ref(x.data() + m * K, K, act_block);
  return x;
}

std::string shape(const char* fmt, std::initializer_list<int64_t> v) {
  std::string s = fmt;
  for (int64_t x : v) {
    s += ' ';
    s += std::to_string(x);
  }
  return s;
}

// Puts a NaN into the weight's row r (a NaN code, a NaN scale byte, a NaN value).
void plant_nan_weight(OwnedWeight& o, int64_t r) {
  const WeightMatrix& w = o.w;
  switch (w.format) {
    case WeightFormat::F32: {
      std::memcpy(&o.data[size_t(4 * (r * w.cols + w.cols / 2))], &kNaNf, 4);
      break;
    }
    case WeightFormat::BF16: {
      const uint16_t nan = 0x7fc1;
      std::memcpy(&o.data[size_t(2 * (r * w.cols + w.cols - 1))], &nan, 2);
      break;
    }
    case WeightFormat::FP8_BLOCK:
      o.data[size_t(r * w.cols)] = 0x7f;  // NaN code in column 0
      if (w.rows > w.block) o.scale[size_t((w.rows - 1) / w.block * w.scale_cols)] = 0xff;  // the last row block
      break;
    case WeightFormat::FP4_BLOCK: o.scale[size_t(r * w.scale_cols + w.scale_cols - 1)] = 0xff; break;
  }
}

// ----------------------------------------------------------------------------- cases

struct Env {
  const OpSpec& spec;
  Isa isa;
  const Backend& be;  // the ISA's cpu backend
  Checker& check;
  std::mt19937 rng;
  ThreadPool* pool;  // the backend's
  int64_t light_cases = 0;  // light_case calls so far
  bool covers(uint8_t special) const { return (spec.contract.specials & special) != 0; }
  bool covers_weights(uint8_t special) const { return (spec.contract.weight_specials & special) != 0; }
};

// linear_f32 on one weight format: x of fp32, exact bf16 (bf16 mode where the ISA has one) and
// sparse values, then NaN weights and activations, and subnormal activations, where covered.
void gen_linear(Env& e, WeightFormat f) {
  struct Shape {
    int64_t M, N, K, block;
  };
  std::vector<Shape> shapes;
  if (f == WeightFormat::F32 || f == WeightFormat::BF16) {
    for (int64_t K : {1, 7, 17, 33, 100, 130, 384})
      for (int64_t M : {1, 3, 17})
        for (int64_t N : {1, 9, 33}) shapes.push_back({M, N, K, 0});
  } else if (f == WeightFormat::FP8_BLOCK) {
    for (int64_t block : {128, 32})
      for (int64_t K : {40, 200, 256})
        for (int64_t M : {1, 2, 9})
          for (int64_t N : {5, 161}) shapes.push_back({M, N, K, block});
    shapes.push_back({3, 17, 256, 48});  // a block the vector kernels do not take
  } else {
    for (int64_t K : {32, 96, 416})
      for (int64_t M : {1, 2, 6, 17})
        for (int64_t N : {3, 34}) shapes.push_back({M, N, K, 32});
  }
  std::uniform_int_distribution<int> coin(0, 3);
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    OwnedWeight o = random_weight(f, s.N, s.K, e.rng, 0.05f, 118, 128, s.block ? s.block : 128);
    // 0 fp32, 1 bf16, 2 sparse; 3 NaN (in the weights, one activation), 4 subnormal activations.
    for (int kind = 0; kind < 5; ++kind) {
      if (kind == 3 && !e.covers(kSpecialNaN) && !e.covers_weights(kSpecialNaN)) continue;
      if (kind == 4 && !e.covers(kSpecialSubnormal)) continue;
      if (kind >= 3 && (si + size_t(kind)) % 4 != 0) continue;  // special passes on every fourth shape
      std::vector<float> x = normal(s.M * s.K, e.rng, 2.0f, kind != 0);
      if (kind == 2)
        for (auto& v : x)
          if (coin(e.rng) != 0) v = 0.0f;
      OwnedWeight w = o;  // the NaN pass plants into a copy
      w.w.data = w.data.data();
      w.w.scale = w.scale.empty() ? nullptr : w.scale.data();
      if (kind == 3 && e.covers_weights(kSpecialNaN)) plant_nan_weight(w, s.N / 2);
      if (kind == 3 && e.covers(kSpecialNaN)) x[size_t((s.M - 1) * s.K + s.K / 3)] = kNaNf;
      if (kind == 4)
        for (int64_t i = 0; i < s.M * s.K; i += 5) x[size_t(i)] = (i % 2 ? 1e-40f : -3e-39f);
      std::vector<float> want(static_cast<size_t>(s.M * s.N));
      linear_f32_ref(x.data(), s.M, w.w, want.data());
      Out got(s.M * s.N);
      e.be.linear_f32(x.data(), s.M, w.w, got.data());
      const std::vector<double> mag = magnitudes(x, s.M, w.w);
      const std::string where = shape("format M N K block kind", {int64_t(f), s.M, s.N, s.K, s.block, kind});
      e.check.compare(got, want, where, false, &mag);
    }
  }
}

void gen_linear_exact(Env& e) {
  for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t K : {1, 7, 100, 1003, 1024})
      for (int64_t N : {1, 24})
        for (int64_t M : {1, 3, 53}) {
          if (f == WeightFormat::FP4_BLOCK && K % 32 != 0) continue;
          if (f != WeightFormat::F32 && (K == 1003 || M == 53)) continue;  // the rows split: F32 weights only
          OwnedWeight o = random_weight(f, N, K, e.rng);
          std::vector<float> x = normal(M * K, e.rng);
          const bool nans = e.covers(kSpecialNaN) || e.covers_weights(kSpecialNaN);
          for (int nan_pass = 0; nan_pass < (nans && M == 3 ? 2 : 1); ++nan_pass) {
            if (nan_pass && e.covers_weights(kSpecialNaN)) plant_nan_weight(o, N - 1);
            if (nan_pass && e.covers(kSpecialNaN)) x[size_t(K / 2)] = kNaNf;  // row 0
            std::vector<float> want(static_cast<size_t>(M * N));
            linear_f32_ref(x.data(), M, o.w, want.data());
            Out got(M * N);
            e.be.linear_f32_exact(x.data(), M, o.w, got.data());
            e.check.compare(got, want, shape("format M N K nan", {int64_t(f), M, N, K, nan_pass}));
          }
        }
}

// linear_act_quant: V4 (act block 128, FP8 B 128 / FP4) and V4.1 (32), blocks the vector
// kernels hand to the portable ones, both BlockSum rules, a row of huge activations (act
// scales past 2^31: the portable kernels, the other rows the vector ones) and tiny ones.
void gen_linear_act_quant(Env& e, WeightFormat f) {
  struct Shape {
    int64_t block, act_block;
  };
  const std::vector<Shape> blocks = f == WeightFormat::FP8_BLOCK
                                        ? std::vector<Shape>{{128, 128}, {32, 32}, {128, 256}, {128, 64}}
                                        : std::vector<Shape>{{32, 128}, {32, 32}, {32, 16}, {32, 64}};
  int pass = 0;
  for (const Shape& b : blocks)
    for (int64_t K : {128, 512})
      for (int64_t M : {1, 2, 17})
        for (int64_t N : {1, 31, 130}) {
          if (K % b.act_block != 0) continue;
          ++pass;
          OwnedWeight o = random_weight(f, N, K, e.rng, 0.05f, 118, 128, b.block);
          std::vector<float> x = normal(M * K, e.rng, 2.0f, true);
          // 0 plain, 1 a huge and a tiny row, 2 NaN weights / a NaN activation, 3 subnormal activations
          const bool nans = e.covers(kSpecialNaN) || e.covers_weights(kSpecialNaN);
          int kind = 0;
          if (pass % 5 == 0) kind = 1;
          else if (pass % 7 == 0 && nans) kind = 2;
          else if (pass % 3 == 0 && e.covers(kSpecialSubnormal)) kind = 3;
          if (kind == 1) {
            for (int64_t k = 0; k < K; ++k) x[size_t((M - 1) * K + k)] *= 1e30f;
            if (M > 1)
              for (int64_t k = 0; k < K; ++k) x[size_t(k)] *= 1e-30f;
          }
          if (kind == 2 && e.covers_weights(kSpecialNaN)) plant_nan_weight(o, N / 2);
          if (kind == 2 && e.covers(kSpecialNaN)) x[size_t((M - 1) * K + 5)] = kNaNf;
          if (kind == 3)
            for (int64_t i = 0; i < M * K; i += 3) x[size_t(i)] = i % 2 ? 2e-39f : -1e-44f;
          const BlockSum sum = pass % 2 ? BlockSum::kF32 : BlockSum::kExact;
          std::vector<float> want(static_cast<size_t>(M * N));
          linear_act_quant_ref(x.data(), M, o.w, b.act_block, want.data(), sum);
          Out got(M * N);
          e.be.linear_act_quant(x.data(), M, o.w, b.act_block, got.data(), sum);
          const std::vector<double> mag = magnitudes(act_quantised(x, M, K, b.act_block), M, o.w);
          const std::string where = shape("format M N K block act_block kind sum",
                                          {int64_t(f), M, N, K, b.block, b.act_block, kind, int64_t(sum)});
          e.check.compare(got, want, where, false, &mag);
        }
}

// linear_many: mixed formats and modes in one batch, jobs sharing an input, a GEMM-sized job,
// a job of huge activations; each job against its referee and against its own call.
void gen_linear_many(Env& e) {
  struct Spec {
    WeightFormat f;
    int64_t N, K, M;
    int64_t act_block;
    int x;  // which input
  };
  const std::vector<Spec> specs = {
      {WeightFormat::FP4_BLOCK, 37, 256, 1, 128, 0}, {WeightFormat::FP4_BLOCK, 64, 256, 1, 128, 0},
      {WeightFormat::FP8_BLOCK, 29, 256, 1, 128, 0}, {WeightFormat::BF16, 13, 256, 1, 0, 0},
      {WeightFormat::F32, 9, 256, 1, 0, 0},          {WeightFormat::FP4_BLOCK, 70, 64, 2, 0, 1},
      {WeightFormat::FP8_BLOCK, 130, 96, 5, 0, 2},   {WeightFormat::FP4_BLOCK, 1, 128, 3, 32, 3},
      {WeightFormat::FP8_BLOCK, 17, 128, 1, 128, 4}, {WeightFormat::BF16, 40, 96, 21, 0, 5},
      {WeightFormat::FP8_BLOCK, 33, 128, 21, 32, 6},
  };
  std::vector<std::vector<float>> xs = {normal(256, e.rng, 2.0f, true), normal(2 * 64, e.rng),
                                        normal(5 * 96, e.rng, 2.0f, true), normal(3 * 128, e.rng, 2.0f, true),
                                        normal(128, e.rng, 2.0f, true), normal(21 * 96, e.rng, 1.0f, true),
                                        normal(21 * 128, e.rng, 2.0f, true)};
  for (auto& v : xs[4]) v *= 1e30f;  // act scales past the exact range: the portable kernels
  std::vector<OwnedWeight> ws;
  for (const Spec& s : specs) ws.push_back(random_weight(s.f, s.N, s.K, e.rng, 0.05f, 118, 128, 32));
  for (int round = 0; round < 2; ++round) {
    std::vector<LinearJob> jobs;
    std::vector<Out> many, single;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      many.emplace_back(s.M * s.N, -1.0f);
      single.emplace_back(s.M * s.N, -2.0f);
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      const BlockSum sum = round ? BlockSum::kF32 : BlockSum::kExact;
      jobs.push_back({xs[size_t(s.x)].data(), s.M, &ws[i].w, s.act_block, many[i].data(), sum});
    }
    e.be.linear_many(jobs.data(), jobs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      const LinearJob& j = jobs[i];
      const std::string where = shape("job", {int64_t(i), s.M, s.N, s.K, s.act_block, round});
      std::vector<float> want(static_cast<size_t>(s.M * s.N));
      std::vector<double> mag;
      if (s.act_block > 0) {
        linear_act_quant_ref(j.x, s.M, *j.W, s.act_block, want.data(), j.block_sum);
        e.be.linear_act_quant(j.x, s.M, *j.W, s.act_block, single[i].data(), j.block_sum);
        mag = magnitudes(act_quantised(xs[size_t(s.x)], s.M, s.K, s.act_block), s.M, *j.W);
      } else {
        linear_f32_ref(j.x, s.M, *j.W, want.data());
        e.be.linear_f32(j.x, s.M, *j.W, single[i].data());
        mag = magnitudes(xs[size_t(s.x)], s.M, *j.W);
      }
      e.check.compare(many[i], want, where, false, &mag);
      e.check.same_bits(many[i].data(), single[i].data(), s.M * s.N, where);
    }
  }
}

// act_quant through cpu_act_quant (the ISA's IsaKernels::act_quant; the referee for Scalar and
// for blocks the ISA does not take): values, codes and scales; zeros, ties, the 448 edge, huge
// values, and NaN / inf / subnormal where covered.
void gen_act_quant(Env& e) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15), expo(-30, 30);
  for (int64_t block : {8, 16, 24, 32, 64, 128})
    for (int64_t blocks : {1, 3})
      for (int trial = 0; trial < 12; ++trial) {
        const int64_t n = block * blocks;
        const int e_ = expo(e.rng);
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) {
          switch (pick(e.rng)) {
            case 0: v = 0.0f; break;
            case 1: v = -0.0f; break;
            case 2: v = e.covers(kSpecialSubnormal) ? std::ldexp(u(e.rng), -130) : 0.0f; break;
            case 3: v = round_bf16(std::ldexp(float(int(u(e.rng) * 64)) + 0.5f, e_ - 6)); break;  // ties
            case 4: v = trial % 5 == 0 && e.covers(kSpecialInf) ? kInff : 448.0f; break;
            case 5: v = trial % 7 == 0 && e.covers(kSpecialNaN) ? kNaNf : -448.0f; break;
            case 6: v = std::ldexp(u(e.rng), 100); break;
            default: v = std::ldexp(u(e.rng), e_); break;
          }
          if (trial % 2) v = round_bf16(v);
        }
        const bool outs = trial % 3 != 0;  // q_out / s_out given or not
        std::vector<float> xr = x, qr(static_cast<size_t>(n)), sr(static_cast<size_t>(n / block));
        act_quant_ref(xr.data(), n, block, outs ? qr.data() : nullptr, outs ? sr.data() : nullptr);
        Out xi(n), qi(n), si(n / block);
        std::copy(x.begin(), x.end(), xi.v.begin());
        cpu_act_quant(e.isa, xi.data(), n, block, outs ? qi.data() : nullptr, outs ? si.data() : nullptr);
        const std::string where = shape("block n trial", {block, n, trial});
        e.check.compare(xi, xr, where + " values");
        if (outs) {
          e.check.compare(qi, qr, where + " codes");
          e.check.compare(si, sr, where + " scales");
        }
      }
}

// An op with no implementation but its referee (the model calls the referee on every backend):
// the case runs what the model runs. When an ISA registers one, this fails until the
// generator calls it.
void expect_referee_only(Env& e) {
  EXPECT_EQ(implementation(e.spec.op, e.isa), Impl::kReferee)
      << e.spec.name << ": " << isa_name(e.isa) << " implements it now; make its generator run that";
}

template <class F>
void gen_in_place(Env& e, const std::vector<std::pair<int64_t, int64_t>>& shapes, F&& op) {
  expect_referee_only(e);
  for (auto [n, block] : shapes)
    for (float sd : {1e-3f, 1.0f, 30.0f}) {
      const std::vector<float> x = normal(n, e.rng, sd, true);
      std::vector<float> want = x;
      op(want.data(), n, block);
      Out got(n);
      std::copy(x.begin(), x.end(), got.v.begin());
      op(got.data(), n, block);
      e.check.compare(got, want, shape("n block", {n, block}));
    }
}

void gen_fp4_qdq_pow2(Env& e) {
  gen_in_place(e, {{32, 32}, {96, 32}, {16, 16}, {48, 16}, {7, 7}},
               [](float* x, int64_t n, int64_t block) { fp4_qdq_pow2_ref(x, n, block); });
}

void gen_fp4_qdq_e4m3(Env& e) {
  gen_in_place(e, {{16, 16}, {160, 16}, {32, 32}, {96, 32}},
               [](float* x, int64_t n, int64_t block) { fp4_qdq_e4m3_ref(x, n, block); });
}

void gen_hadamard(Env& e) {
  gen_in_place(e, {{1, 0}, {2, 0}, {8, 0}, {64, 0}, {128, 0}, {512, 0}},
               [](float* x, int64_t n, int64_t) { hadamard_ref(x, n); });
}

// Random keys (bf16 values, some null: never key 0, so no all-invalid tile comes first).
struct Keys {
  std::vector<float> kv;
  std::vector<const float*> ptr;
  Keys(int64_t n, int64_t dim, std::mt19937& rng) : kv(normal(n * dim, rng, 1.0f, true)), ptr(size_t(n)) {
    std::uniform_int_distribution<int> coin(0, 3);
    for (int64_t j = 0; j < n; ++j) ptr[size_t(j)] = (j > 0 && coin(rng) == 0) ? nullptr : &kv[size_t(j * dim)];
  }
};

// Dims the ISA's attention kernels take (multiples of dim_align) and dims they do not.
std::vector<int64_t> attention_dims(Isa isa, std::initializer_list<int64_t> aligned_mults) {
  const cpu::AttentionKernels* a = isa_attention_table(isa);
  const int64_t align = a ? a->dim_align : 16;
  std::vector<int64_t> dims;
  for (int64_t m : aligned_mults) dims.push_back(align * m);
  dims.push_back(align * 2 + 8);  // not a multiple: the portable kernels
  dims.push_back(7);
  return dims;
}

void gen_sink_attention(Env& e) {
  for (int64_t n : {1, 2, 17, 64, 65, 129})
    for (int64_t dim : attention_dims(e.isa, {1, 3, 8}))
      for (bool round_probs : {false, true}) {
        const std::vector<float> q = normal(dim, e.rng, 1.0f, true);
        const Keys keys(n, dim, e.rng);
        const float scale = 1.0f / std::sqrt(float(dim)), sink = 0.7f;
        std::vector<float> want(static_cast<size_t>(dim));
        sink_attention_ref(q.data(), keys.ptr.data(), n, dim, scale, sink, round_probs, want.data());
        Out got(dim);
        e.be.sink_attention(q.data(), keys.ptr.data(), n, dim, scale, sink, round_probs, got.data());
        e.check.compare(got, want, shape("n dim round", {n, dim, round_probs}), round_probs);
      }
}

void gen_sink_attention_heads(Env& e) {
  for (int64_t n : {1, 63, 65, 200})
    for (int64_t dim : attention_dims(e.isa, {1, 32}))
      for (int64_t H : {1, 3, 17})
        for (bool round_probs : {false, true}) {
          if (dim > 128 && (H > 3 || n < 200)) continue;  // the long head once: it is the slow one
          const std::vector<float> q = normal(H * dim, e.rng, 1.0f, true), sinks = normal(H, e.rng);
          const Keys keys(n, dim, e.rng);
          const float scale = 1.0f / std::sqrt(float(dim));
          std::vector<float> want(static_cast<size_t>(H * dim)), alone(static_cast<size_t>(H * dim));
          for (int64_t h = 0; h < H; ++h) {
            sink_attention_ref(&q[size_t(h * dim)], keys.ptr.data(), n, dim, scale, sinks[size_t(h)], round_probs,
                               &want[size_t(h * dim)]);
            e.be.sink_attention(&q[size_t(h * dim)], keys.ptr.data(), n, dim, scale, sinks[size_t(h)], round_probs,
                                &alone[size_t(h * dim)]);
          }
          Out got(H * dim);
          e.be.sink_attention_heads(q.data(), H, keys.ptr.data(), n, dim, scale, sinks.data(), round_probs, got.data());
          const std::string where = shape("n dim heads round", {n, dim, H, round_probs});
          e.check.compare(got, want, where, round_probs);
          e.check.same_bits(got.data(), alone.data(), H * dim, where);
        }
}

// Indexer scores: FP4-QDQ'd q and keys in reference numerics (the exact fp32 dots), plain
// values in float numerics; a key whose in-order double sum loses a 1 that another order
// keeps (2^60 + 1 - 2^60), a key of more than two significant bits, and NaN / -inf keys where
// covered.
void gen_index_scores(Env& e) {
  for (auto [heads, dim, n_keys] : {std::tuple<int64_t, int64_t, int64_t>{64, 128, 300}, {3, 64, 17}, {1, 7, 1},
                                    {5, 40, 65}, {2, 1, 9}})
    for (bool round : {true, false}) {
      std::vector<float> q = normal(heads * dim, e.rng), w = normal(heads, e.rng, 0.1f, true),
                         kmem = normal(n_keys * dim, e.rng);
      if (round) {
        for (int64_t h = 0; h < heads; ++h) fp4_qdq_pow2_ref(&q[size_t(h * dim)], dim, dim % 32 == 0 ? 32 : dim);
        for (int64_t s = 0; s < n_keys; ++s) fp4_qdq_pow2_ref(&kmem[size_t(s * dim)], dim, dim % 32 == 0 ? 32 : dim);
        if (n_keys > 3 && dim >= 3) {
          for (int64_t h = 0; h < heads; ++h) std::fill_n(&q[size_t(h * dim)], 3, 1.0f);
          kmem[size_t(2 * dim)] = std::ldexp(1.0f, 60);
          kmem[size_t(2 * dim + 1)] = 1.0f;
          kmem[size_t(2 * dim + 2)] = -std::ldexp(1.0f, 60);
          kmem[size_t(3 * dim + 1)] = 1.1f;  // more than two significant bits
        }
      }
      if (n_keys > 5 && dim >= 2) {
        if (e.covers(kSpecialNaN)) kmem[size_t(4 * dim + 1)] = kNaNf;
        if (e.covers(kSpecialInf)) {
          for (int64_t c = 0; c < dim; ++c) kmem[size_t(5 * dim + c)] = c == 0 ? -kInff : 0.0f;
          for (int64_t h = 0; h < heads; ++h) q[size_t(h * dim)] = 1.0f;
        }
      }
      std::vector<const float*> keys;
      for (int64_t s = 0; s < n_keys; ++s) keys.push_back(&kmem[size_t(s * dim)]);
      std::vector<float> want(static_cast<size_t>(n_keys));
      index_scores_ref(q.data(), w.data(), heads, dim, keys.data(), n_keys, round, want.data());
      Out got(n_keys, -7.0f);
      e.be.index_scores(q.data(), w.data(), heads, dim, keys.data(), n_keys, round, got.data());
      e.check.compare(got, want, shape("heads dim keys round", {heads, dim, n_keys, round}), round);
    }
}

struct HcInputs {
  std::vector<float> o, Rs, comb, post;
};
HcInputs hc_inputs(Env& e, int64_t hc, int64_t dim) {
  HcInputs in{normal(dim, e.rng), normal(hc * dim, e.rng, 1.0f, true), normal(hc * hc, e.rng), normal(hc, e.rng)};
  for (auto& v : in.comb) v = std::abs(v) * 0.5f;
  for (auto& v : in.post) v = 2.0f * std::abs(v);
  if (dim > 5) {
    in.o[1] = -0.0f;
    for (int64_t i = 0; i < hc; ++i) in.Rs[size_t(i * dim + 1)] = -0.0f;
    if (e.covers(kSpecialNaN)) in.Rs[3] = kNaNf;
  }
  return in;
}

void gen_hc_expand(Env& e) {
  for (int64_t hc : {1, 2, 4})
    for (int64_t dim : {1, 16, 37, 257})
      for (bool round : {false, true}) {
        const HcInputs in = hc_inputs(e, hc, dim);
        for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, dim}, {dim / 3, dim - dim / 5}}) {
          std::vector<float> want(size_t(hc * dim), 9.0f);
          hc_expand_ref(in.o.data(), in.Rs.data(), in.comb.data(), in.post.data(), hc, dim, round, want.data(), j0, j1);
          Out got(hc * dim, 9.0f);
          e.be.hc_expand(in.o.data(), in.Rs.data(), in.comb.data(), in.post.data(), hc, dim, round, got.data(), j0, j1);
          e.check.compare(got, want, shape("hc dim j0 j1 round", {hc, dim, j0, j1, round}), round);
        }
      }
}

void gen_hc_collapse(Env& e) {
  for (int64_t hc : {1, 2, 4})
    for (int64_t dim : {1, 16, 37, 257})
      for (bool round : {false, true}) {
        const HcInputs in = hc_inputs(e, hc, dim);
        std::vector<float> want(static_cast<size_t>(dim));
        hc_collapse_ref(in.Rs.data(), in.post.data(), hc, dim, round, want.data());
        Out got(dim);
        e.be.hc_collapse(in.Rs.data(), in.post.data(), hc, dim, round, got.data());
        e.check.compare(got, want, shape("hc dim round", {hc, dim, round}), round);
      }
}

// SwiGLU: odd lengths, the limit on and off, the routing weight, bf16 rounding, values from
// tiny to past exp's range, and the special values the contract covers.
void gen_swiglu(Env& e) {
  std::vector<float> specials = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 745.5f, -745.5f, 1e30f, -1e30f,
                                 10.0f, -10.0f, 9.999f, 10.001f};
  if (e.covers(kSpecialSubnormal)) specials.insert(specials.end(), {1e-42f, -3e-39f});
  if (e.covers(kSpecialInf)) specials.insert(specials.end(), {kInff, -kInff});
  if (e.covers(kSpecialNaN)) specials.push_back(kNaNf);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_real_distribution<float> wide(-800.0f, 800.0f);
  const float weight = 0.3125f;
  for (int64_t n : {1, 7, 16, 17, 333, 1000})
    for (float limit : {10.0f, 0.0f})
      for (bool use_weight : {false, true})
        for (bool round : {false, true}) {
          std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            g[size_t(i)] = i % 5 == 4 ? wide(e.rng) : nd(e.rng);
            u[size_t(i)] = nd(e.rng);
            if (i % 7 == 3) g[size_t(i)] = specials[size_t(i / 7) % specials.size()];
            if (i % 11 == 5) u[size_t(i)] = specials[size_t(i / 11) % specials.size()];
          }
          const float* w = use_weight ? &weight : nullptr;
          std::vector<float> want(static_cast<size_t>(n));
          swiglu_ref(g.data(), u.data(), n, limit, w, round, want.data());
          Out got(n);
          e.be.swiglu(g.data(), u.data(), n, limit, w, round, got.data());
          e.check.compare(got, want, shape("n limit weight round", {n, int64_t(limit), use_weight, round}), round);
        }
}

// ----------------------------------------------------------------------------- light ops

// The light per-token ops (light_ops.h) have one implementation, their referee, which the model
// calls itself whatever the backend: no ISA has a kernel for them to set against the referee,
// and a case on an ISA claims none. What it checks there: the registry says the referee runs
// (expect_referee_only); the inputs are drawn by the op alone, so every ISA's case sees the same
// ones, and the outputs equal, bit for bit, the test's own evaluation of the header's formula
// (so every ISA's case sees the same bits); a second call into another buffer, now and then on a
// worker of the ISA's pool, has the first call's bits, NaN included (no state, nothing that
// depends on the thread); nothing is written past the outputs.

// Starts a light op's case: the referee only, the inputs seeded by the op (not the ISA).
void light_inputs(Env& e) {
  expect_referee_only(e);
  e.rng.seed(5000u + 17u * unsigned(e.spec.op));
}

// fn(out) writes the op's formula.size() outputs to out: an in-place op copies its input there
// first, integer outputs come as floats (exact below 2^24). The second call runs on a worker
// of the pool for every fourth case (waking it costs more than most calls), else here.
template <class F>
void light_case(Env& e, const std::string& where, const std::vector<float>& formula, F&& fn) {
  const int64_t n = int64_t(formula.size());
  Out first(n, -1.5f), again(n, -2.5f);
  fn(first.data());
  const bool on_worker = e.light_cases++ % 4 == 0;
  if (on_worker) {
    e.pool->run_on_each_thread([&](int64_t t, int64_t, int) {
      if (t == e.pool->size() - 1) fn(again.data());
    });
  } else {
    fn(again.data());
  }
  if (!first.guards_intact()) e.check.fail(where, "wrote past its output");
  e.check.compare(again, std::vector<float>(first.v.begin(), first.v.begin() + n),
                  where + (on_worker ? ", called again on a worker" : ", called again"));
  e.check.matches_formula(first.data(), formula.data(), n, where);
}

// The special values of `which` that the op's contract covers, then zeros of both signs, in
// turn into every stride-th element of v from `at`.
void plant_specials(const Env& e, std::vector<float>& v, int64_t at, int64_t stride, uint8_t which) {
  std::vector<float> vals;
  const uint8_t covered = which & e.spec.contract.specials;
  if (covered & kSpecialNaN) vals.push_back(kNaNf);
  if (covered & kSpecialInf) vals.insert(vals.end(), {kInff, -kInff});
  if (covered & kSpecialSubnormal) vals.insert(vals.end(), {1e-40f, -3e-39f});
  vals.insert(vals.end(), {0.0f, -0.0f});
  size_t t = 0;
  for (int64_t i = at; i < int64_t(v.size()); i += stride) v[size_t(i)] = vals[t++ % vals.size()];
}

// A pass of plain values (0), then one per kind of special value (zeros where not covered).
constexpr uint8_t kPlantPasses[] = {0, kSpecialSubnormal, kSpecialInf, kSpecialNaN};

float bf16_if(bool round, float v) { return round ? round_bf16(v) : v; }

// The double sum of x's fp32 squares (each bf16-rounded with round), in index order.
double sum_squares(const float* x, int64_t n, bool round = false) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(bf16_if(round, x[i] * x[i]));
  return ss;
}
float rsqrt_formula(float v) { return float(1.0 / std::sqrt(double(v))); }
float sigmoid_formula(float z) { return float(1.0 / (1.0 + std::exp(-double(z)))); }
// RMSNorm's r of a row (light_ops.h): the mean rounded to fp32, + eps in fp32, the rsqrt.
float rms_formula(const float* x, int64_t n, float eps) {
  return rsqrt_formula(float(sum_squares(x, n) / double(n)) + eps);
}

// Index outputs as light_case takes them: the k indices, then how many of the guard slots
// (-7) after them the op left alone.
template <class I>
void index_outputs(const std::vector<I>& got, int64_t k, float* out) {
  for (int64_t j = 0; j < k; ++j) out[j] = float(got[size_t(j)]);
  out[k] = float(std::count(got.begin() + k, got.end(), I(-7)));
}

// The indices of v, larger value first and the lower index first among equals (-0 == +0), by a
// stable sort on >: another algorithm than the radix selection and std::partial_sort, the same
// order where v has no NaN (> is then a strict weak order).
std::vector<int64_t> stable_descending(const std::vector<float>& v) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), int64_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[size_t(a)] > v[size_t(b)]; });
  return idx;
}

// The first k of an order in index_outputs' layout, the guards untouched.
std::vector<float> first_k(const std::vector<int64_t>& order, int64_t k) {
  std::vector<float> f;
  for (int64_t j = 0; j < k; ++j) f.push_back(float(order[size_t(j)]));
  f.push_back(float(kGuards));
  return f;
}

void gen_rms_norm(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t n : {1, 2, 7, 16, 33, 1031})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> x = normal(n, e.rng, 3.0f);
      const std::vector<float> w = normal(n, e.rng);
      if (which) plant_specials(e, x, n / 2, 5, which);
      const float r = rms_formula(x.data(), n, eps);
      for (bool weighted : {false, true})
        for (bool round : {false, true}) {
          const bool in_place = weighted == round;  // y aliasing x, half the time
          std::vector<float> want(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            const float t = x[size_t(i)] * r;
            want[size_t(i)] = bf16_if(round, weighted ? w[size_t(i)] * t : t);
          }
          const float* wp = weighted ? w.data() : nullptr;
          light_case(e, shape("n specials weighted round in_place", {n, which, weighted, round, in_place}), want,
                     [&](float* y) {
                       if (in_place) std::copy(x.begin(), x.end(), y);
                       rms_norm_ref(in_place ? y : x.data(), wp, n, eps, round, y);
                     });
        }
    }
}

// A few heads (rows) get the special values, the rest must keep their own bits (heads run side by
// side in kRmsLanes chains: 9 and 17 heads leave a tail).
void gen_head_rms_norm(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t heads : {1, 3, 8, 9, 17})
    for (int64_t n : {1, 7, 64})
      for (uint8_t which : kPlantPasses) {
        std::vector<float> x = normal(heads * n, e.rng, 3.0f, true);
        if (which) plant_specials(e, x, heads / 2 * n + n / 2, 5 * n + 1, which);
        for (bool round : {false, true}) {
          std::vector<float> want = x;
          for (int64_t h = 0; h < heads; ++h) {
            float* row = &want[size_t(h * n)];
            const float mean = bf16_if(round, float(sum_squares(row, n, round) / double(n)));
            const float r = bf16_if(round, rsqrt_formula(bf16_if(round, mean + eps)));
            for (int64_t i = 0; i < n; ++i) row[i] = bf16_if(round, row[i] * r);
          }
          light_case(e, shape("heads n specials round", {heads, n, which, round}), want, [&](float* y) {
            std::copy(x.begin(), x.end(), y);
            head_rms_norm_ref(y, heads, n, eps, round);
          });
        }
      }
}

void gen_rope_angles(Env& e) {
  light_inputs(e);
  std::uniform_real_distribution<float> freq(1e-4f, 1.0f);
  for (int64_t half : {1, 3, 17, 64})
    for (int64_t pos : {int64_t(0), int64_t(1), int64_t(4093), int64_t(1) << 20, (int64_t(1) << 24) + 1}) {
      std::vector<float> f(static_cast<size_t>(half)), want(size_t(2 * half));
      for (int64_t i = 0; i < half; ++i) {
        f[size_t(i)] = i % 2 ? freq(e.rng) : float(std::pow(10000.0, -double(i) / double(half)));
        const float theta = float(pos) * f[size_t(i)];
        want[size_t(i)] = float(std::cos(double(theta)));
        want[size_t(half + i)] = float(std::sin(double(theta)));
      }
      light_case(e, shape("half pos", {half, pos}), want,
                 [&](float* out) { rope_angles_ref(f.data(), half, pos, out, out + half); });
    }
}

void gen_rope_rotate(Env& e) {
  light_inputs(e);
  std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
  for (int64_t half : {1, 5, 32, 67})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        const float t = angle(e.rng);
        c[size_t(i)] = i == 0 ? 0.0f : std::cos(t);  // a quarter turn first
        s[size_t(i)] = i == 0 ? 1.0f : std::sin(t);
      }
      std::vector<float> x = normal(2 * half, e.rng, 2.0f);
      if (which) plant_specials(e, x, 1, 3, which);
      for (bool inverse : {false, true})
        for (bool round : {false, true}) {
          std::vector<float> want(size_t(2 * half));
          for (int64_t i = 0; i < half; ++i) {
            const float u = x[size_t(2 * i)], v = x[size_t(2 * i + 1)], ci = c[size_t(i)];
            const float si = inverse ? -s[size_t(i)] : s[size_t(i)];
            want[size_t(2 * i)] = bf16_if(round, u * ci - v * si);
            want[size_t(2 * i + 1)] = bf16_if(round, u * si + v * ci);
          }
          light_case(e, shape("half specials inverse round", {half, which, inverse, round}), want, [&](float* p) {
            std::copy(x.begin(), x.end(), p);
            rope_rotate_ref(p, half, c.data(), s.data(), inverse, round);
          });
        }
    }
}

// hyper_connections.md §2 with the columns as the rows of the transposed matrix: the row
// softmax, then (transposed) each line divided by float(its double sum) + eps.
std::vector<float> sinkhorn_formula(std::vector<float> c, int64_t n, int64_t iters, float eps) {
  auto line = [&](int64_t i) { return c.begin() + i * n; };
  auto transpose = [&] {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) std::swap(c[size_t(i * n + j)], c[size_t(j * n + i)]);
  };
  auto divide_lines = [&] {
    for (int64_t i = 0; i < n; ++i) {
      const float d = float(std::accumulate(line(i), line(i) + n, 0.0)) + eps;
      std::transform(line(i), line(i) + n, line(i), [d](float v) { return v / d; });
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const double m = *std::max_element(line(i), line(i) + n);
    std::vector<double> ex(static_cast<size_t>(n));
    std::transform(line(i), line(i) + n, ex.begin(), [m](float v) { return std::exp(double(v) - m); });
    const double sum = std::accumulate(ex.begin(), ex.end(), 0.0);
    std::transform(ex.begin(), ex.end(), line(i), [&](double v) { return float(v / sum) + eps; });
  }
  for (int64_t pass = 0; pass < std::max<int64_t>(iters, 1); ++pass) {
    if (pass > 0) divide_lines();  // the rows, from the second iteration
    transpose();
    divide_lines();  // the columns
    transpose();
  }
  return c;
}

void gen_hc_sinkhorn(Env& e) {
  light_inputs(e);
  for (int64_t n : {1, 2, 3, 4, 5, 8})
    for (int64_t iters : {0, 1, 2, 20})
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<float> c0 = normal(n * n, e.rng, pass ? 4.0f : 0.5f);
        if (pass && n > 1) {  // finite extremes (a row's exp underflows to 0), subnormals where covered
          c0[0] = 1e30f;
          c0[size_t(n * n - 1)] = -1e30f;
          if (e.covers(kSpecialSubnormal)) c0[1] = 1e-40f;
        }
        const float eps = pass ? 0.25f : 1e-6f;
        light_case(e, shape("n iters pass", {n, iters, pass}), sinkhorn_formula(c0, n, iters, eps), [&](float* c) {
          std::copy(c0.begin(), c0.end(), c);
          hc_sinkhorn_ref(c, n, iters, eps);
        });
      }
}

// Rows of x with special values among clean ones (kRmsLanes rows' sums run side by side).
void gen_hc_mix_norm(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t rows : {1, 3, 8, 9, 17})
    for (int64_t width : {1, 7, 64})
      for (int64_t n_mix : {1, 24})
        for (uint8_t which : kPlantPasses) {
          std::vector<float> x = normal(rows * width, e.rng, 2.0f), mix = normal(rows * n_mix, e.rng);
          if (which) plant_specials(e, x, rows / 2 * width, 3 * width + 1, which);
          std::vector<float> want = mix;
          for (int64_t t = 0; t < rows; ++t) {
            const float r = rms_formula(&x[size_t(t * width)], width, eps);
            for (int64_t k = 0; k < n_mix; ++k) want[size_t(t * n_mix + k)] *= r;
          }
          light_case(e, shape("rows width n_mix specials", {rows, width, n_mix, which}), want, [&](float* m) {
            std::copy(mix.begin(), mix.end(), m);
            hc_mix_norm_ref(x.data(), rows, width, eps, m, n_mix);
          });
        }
}

// A site's pre, post and comb; pre and post alone; hc_head's pre alone (its mix of hc values).
void gen_hc_coeffs(Env& e) {
  light_inputs(e);
  const float scale[3] = {0.75f, 1.3f, 0.4f}, eps = 1e-6f;
  for (int64_t hc : {1, 2, 4})
    for (int64_t iters : {0, 1, 20})
      for (int kind = 0; kind < 3; ++kind) {
        if (kind != 0 && iters != 0) continue;  // no comb: no Sinkhorn
        const int64_t n_mix = kind == 2 ? hc : (2 + hc) * hc;
        std::vector<float> mix = normal(n_mix, e.rng, 3.0f), base = normal(n_mix, e.rng);
        mix[0] = 200.0f;  // a saturated sigmoid, and the other way, and a tiny mix where covered
        mix[size_t(n_mix - 1)] = -200.0f;
        if (hc > 1 && e.covers(kSpecialSubnormal)) mix[1] = 1e-40f;
        std::vector<float> want;
        for (int64_t i = 0; i < hc; ++i)
          want.push_back(sigmoid_formula(mix[size_t(i)] * scale[0] + base[size_t(i)]) + eps);
        for (int64_t i = hc; i < 2 * hc && kind < 2; ++i)
          want.push_back(2.0f * sigmoid_formula(mix[size_t(i)] * scale[1] + base[size_t(i)]));
        if (kind == 0) {
          std::vector<float> comb;
          for (int64_t k = 2 * hc; k < n_mix; ++k) comb.push_back(mix[size_t(k)] * scale[2] + base[size_t(k)]);
          comb = sinkhorn_formula(comb, hc, iters, eps);
          want.insert(want.end(), comb.begin(), comb.end());
        }
        light_case(e, shape("hc iters kind", {hc, iters, kind}), want, [&](float* out) {
          hc_coeffs_ref(mix.data(), base.data(), scale, hc, eps, iters, out, kind < 2 ? out + hc : nullptr,
                        kind == 0 ? out + 2 * hc : nullptr);
        });
      }
}

void gen_top_k(Env& e) {
  light_inputs(e);
  for (int64_t n : {1, 2, 9, 255, 257, 1001, 65537})
    for (int pass = 0; pass < 3; ++pass) {  // 0 plain, 1 ties and specials but NaN, 2 a NaN (the comparator sort)
      if ((pass == 2 && !e.covers(kSpecialNaN)) || (n > 1001 && pass > 0)) continue;  // 65537: the index bytes
      std::vector<float> s = normal(n, e.rng);
      if (pass == 0) s[0] = s[size_t(n / 2)] = s[size_t(n - 1)] = 9.0f;  // the best three tie (n - 1: 2^16 at most)
      if (pass == 1) {
        for (float& v : s) v = float(int(e.rng() % 5) - 2) * 0.5f;
        plant_specials(e, s, 0, 3, kSpecialInf | kSpecialSubnormal);
      }
      if (pass == 2) {
        plant_specials(e, s, 0, 97, kSpecialInf);
        s[size_t(n / 2)] = kNaNf;
      }
      const bool nan = std::any_of(s.begin(), s.end(), [](float v) { return std::isnan(v); });
      const std::vector<int64_t> sorted = nan ? std::vector<int64_t>{} : stable_descending(s);
      std::vector<int64_t> ks = {1, std::min<int64_t>(n, 31), std::min<int64_t>(n, 257)};
      if (n < 65537) ks.insert(ks.end(), {0, std::min<int64_t>(n, 2), (n + 1) / 2, n});
      for (int64_t k : ks) {
        std::vector<int64_t> idx = sorted;
        if (nan) {  // the header's NaN path: std::nth_element, then std::sort of the first k
          idx.resize(size_t(n));
          std::iota(idx.begin(), idx.end(), int64_t(0));
          auto before = [&](int64_t a, int64_t b) {
            return s[size_t(a)] != s[size_t(b)] ? s[size_t(a)] > s[size_t(b)] : a < b;
          };
          if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
          std::sort(idx.begin(), idx.begin() + k, before);
        }
        const std::vector<float> want = first_k(idx, k);
        light_case(e, shape("n k pass", {n, k, pass}), want, [&](float* out) {
          std::vector<int64_t> order(static_cast<size_t>(n)), spare(static_cast<size_t>(n));
          std::vector<int64_t> got(size_t(k + kGuards), -7);
          top_k_ref(s.data(), n, k, order.data(), spare.data(), got.data());
          index_outputs(got, k, out);
        });
      }
    }
}

void gen_router_scores(Env& e) {
  light_inputs(e);
  // softplus's threshold from both sides (directly and tempered by 2), and its tail below.
  const float edges[] = {20.0f, std::nextafter(20.0f, 21.0f), 40.0f, 40.000004f, 19.99f, -88.0f, -104.0f};
  for (int64_t n : {1, 7, 256, 385})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> logits = normal(n, e.rng, 6.0f);
      for (int64_t i = 2; i < n; i += 4) logits[size_t(i)] = edges[size_t(i / 4) % std::size(edges)];
      if (which) plant_specials(e, logits, 1, 4, which);
      for (float temp : {0.0f, 1.0f, 2.0f, 0.7f}) {  // 0: untempered
        const bool tempered = temp != 0.0f;
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          const float z = tempered ? logits[size_t(i)] / temp : logits[size_t(i)];
          want[size_t(i)] = std::sqrt(z > 20.0f ? z : float(std::log1p(std::exp(double(z)))));
        }
        light_case(e, shape("n specials temp*10", {n, which, int64_t(temp * 10)}), want,
                   [&](float* out) { router_scores_ref(logits.data(), n, tempered, temp, out); });
      }
    }
}

void gen_router_select(Env& e) {
  light_inputs(e);
  for (int64_t n : {1, 3, 16, 257})
    for (int pass = 0; pass < 3; ++pass) {  // 0 no bias, 1 coarse values (ties), 2 +-inf scores, subnormals, -0
      std::vector<float> score(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        score[size_t(i)] = float(e.rng() % 8) * 0.25f;
        bias[size_t(i)] = pass == 0 ? 0.0f : float(int(e.rng() % 5) - 2) * 0.25f;
      }
      if (pass == 2) plant_specials(e, score, 1, 3, kSpecialInf | kSpecialSubnormal);
      std::vector<float> biased(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) biased[size_t(i)] = score[size_t(i)] + bias[size_t(i)];
      const std::vector<int64_t> sorted = stable_descending(biased);
      for (int64_t k : {int64_t(1), std::min<int64_t>(n, 6), n})
        light_case(e, shape("n k pass", {n, k, pass}), first_k(sorted, k), [&](float* out) {
          std::vector<float> scratch(static_cast<size_t>(n));
          std::vector<int32_t> order(static_cast<size_t>(n)), experts(size_t(k + kGuards), -7);
          router_select_ref(score.data(), bias.data(), n, k, scratch.data(), order.data(), experts.data());
          index_outputs(experts, k, out);
        });
    }
}

void gen_router_weights(Env& e) {
  light_inputs(e);
  std::uniform_real_distribution<float> u(0.01f, 3.0f);
  for (int64_t k : {1, 2, 6, 8})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> score(64);
      for (size_t i = 0; i < score.size(); ++i) score[i] = i % 3 == 1 ? 0x1p-24f : u(e.rng);  // lost by an fp32 sum
      std::vector<int32_t> experts(64);
      std::iota(experts.begin(), experts.end(), 0);
      std::shuffle(experts.begin(), experts.end(), e.rng);
      experts.resize(size_t(k));
      if (which) {  // into the chosen scores, from the middle one
        std::vector<float> chosen;
        for (int32_t x : experts) chosen.push_back(score[size_t(x)]);
        plant_specials(e, chosen, k / 2, 2, which);
        for (int64_t j = 0; j < k; ++j) score[size_t(experts[size_t(j)])] = chosen[size_t(j)];
      }
      for (bool renorm : {false, true})
        for (float eps : {0.0f, 1e-20f})
          for (float scale : {1.0f, 2.5f}) {
            double sum = 0.0;
            for (int32_t x : experts) sum += score[size_t(x)];
            const float den = float(sum) + eps;
            std::vector<float> want;
            for (int32_t x : experts) want.push_back((renorm ? score[size_t(x)] / den : score[size_t(x)]) * scale);
            light_case(e, shape("k specials renorm eps>0 scale*2", {k, which, renorm, eps > 0, int64_t(scale * 2)}),
                       want, [&](float* out) {
                         router_weights_ref(score.data(), experts.data(), k, renorm, eps, scale, out);
                       });
          }
    }
}

// attention.md §4.2 for one channel: slot s's score sc[s], value kv[s].
float pool_formula(const std::vector<float>& kv, const std::vector<float>& sc) {
  float m = -kInff;
  for (float v : sc) m = v > m ? v : m;  // a NaN never wins
  std::vector<double> ex;
  for (float v : sc) ex.push_back(v == -kInff ? 0.0 : std::exp(double(v) - double(m)));
  const double den = std::accumulate(ex.begin(), ex.end(), 0.0);
  double z = 0.0;
  for (size_t s = 0; s < kv.size(); ++s) z += double(kv[s] * float(ex[s] / den));
  return float(z);
}

void gen_compressor_pool(Env& e) {
  light_inputs(e);
  for (int64_t slots : {1, 3, 8, 128})
    for (int64_t width : {1, 5, 64})
      for (int pass = 0; pass < 2; ++pass) {  // 1: columns of every score -inf, a NaN score, a +inf score
        const int64_t stride = width + 3;  // rows longer than width, their tails NaN: read width only
        std::vector<float> kv = normal(slots * stride, e.rng, 2.0f), sc = normal(slots * stride, e.rng, 3.0f);
        auto at = [&](std::vector<float>& v, int64_t s, int64_t c) -> float& { return v[size_t(s * stride + c)]; };
        for (int64_t s = 0; s < slots; ++s)
          for (int64_t c = 0; c < stride; ++c) {
            if (c >= width) at(kv, s, c) = at(sc, s, c) = kNaNf;
            else if (slots > 2 && s == 1 && c % 2 == 0) at(sc, s, c) = -kInff;  // an absent slot
            else if (pass && c % 4 == 1) at(sc, s, c) = e.covers(kSpecialInf) ? -kInff : -1e30f;
            if (c < width && pass && e.covers(kSpecialSubnormal) && (s + c) % 7 == 0) at(kv, s, c) = 1e-40f;
          }
        if (pass && width > 2 && e.covers(kSpecialNaN)) at(sc, 0, 2) = kNaNf;
        if (pass && width > 3 && e.covers(kSpecialInf)) at(sc, slots - 1, 3) = kInff;
        std::vector<float> want(static_cast<size_t>(width));
        for (int64_t c = 0; c < width; ++c) {
          std::vector<float> kc, scc;
          for (int64_t s = 0; s < slots; ++s) {
            kc.push_back(at(kv, s, c));
            scc.push_back(at(sc, s, c));
          }
          want[size_t(c)] = pool_formula(kc, scc);
        }
        std::vector<const float*> kv_rows, sc_rows;
        for (int64_t s = 0; s < slots; ++s) {
          kv_rows.push_back(&at(kv, s, 0));
          sc_rows.push_back(&at(sc, s, 0));
        }
        light_case(e, shape("slots width pass", {slots, width, pass}), want, [&](float* z) {
          std::vector<double> scratch(static_cast<size_t>(slots));
          compressor_pool_ref(kv_rows.data(), sc_rows.data(), slots, width, scratch.data(), z);
        });
      }
}

// Outputs: the stream, then the gate. Passes: plain; qk zero (dot 0: the gate at the floor); the
// special values in the stream; a triple product whose left-to-right order (h * qk first)
// overflows where h * (qk * key) would not: the gate 1, not about 0.65.
void gen_engram_update(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t d : {1, 7, 64, 257})
    for (int pass = 0; pass < 6; ++pass) {
      std::vector<float> h = normal(d, e.rng, 1.0f, true), key = normal(d, e.rng), qk = normal(d, e.rng),
                         value = normal(d, e.rng);
      if (pass == 1) std::fill(qk.begin(), qk.end(), 0.0f);
      if (pass >= 2 && pass < 5) plant_specials(e, h, d / 2, 7, kPlantPasses[pass - 1]);
      if (pass == 5) {
        h[0] = 1.5f * 0x1p60f;
        qk[0] = 1.5f * 0x1p68f;
        key[0] = 0x1p-70f;
      }
      const float rho = rms_formula(h.data(), d, eps) * rms_formula(key.data(), d, eps);
      double acc = 0.0;
      for (int64_t j = 0; j < d; ++j) acc += double(h[size_t(j)] * qk[size_t(j)] * key[size_t(j)]);
      const float dot = float(acc) * rho * float(1.0 / std::sqrt(double(d)));
      const float gate =
          sigmoid_formula(std::copysign(float(std::sqrt(double(std::max(std::fabs(dot), 1e-6f)))), dot));
      for (bool round : {false, true}) {
        std::vector<float> want;
        for (int64_t j = 0; j < d; ++j) want.push_back(bf16_if(round, h[size_t(j)] + gate * value[size_t(j)]));
        want.push_back(gate);
        light_case(e, shape("d pass round", {d, pass, round}), want, [&](float* out) {
          std::copy(h.begin(), h.end(), out);
          out[d] = engram_update_ref(out, key.data(), qk.data(), value.data(), d, eps, round);
        });
      }
    }
}

// ----------------------------------------------------------------------------- registry

using Generator = void (*)(Env&);
struct GeneratorEntry {
  Op op;
  Generator gen;
};
const GeneratorEntry kGenerators[] = {
    {Op::linear_f32_w_f32, [](Env& e) { gen_linear(e, WeightFormat::F32); }},
    {Op::linear_f32_w_bf16, [](Env& e) { gen_linear(e, WeightFormat::BF16); }},
    {Op::linear_f32_w_fp8, [](Env& e) { gen_linear(e, WeightFormat::FP8_BLOCK); }},
    {Op::linear_f32_w_fp4, [](Env& e) { gen_linear(e, WeightFormat::FP4_BLOCK); }},
    {Op::linear_f32_exact, gen_linear_exact},
    {Op::linear_act_quant_fp8, [](Env& e) { gen_linear_act_quant(e, WeightFormat::FP8_BLOCK); }},
    {Op::linear_act_quant_fp4, [](Env& e) { gen_linear_act_quant(e, WeightFormat::FP4_BLOCK); }},
    {Op::linear_many, gen_linear_many},
    {Op::act_quant, gen_act_quant},
    {Op::fp4_qdq_pow2, gen_fp4_qdq_pow2},
    {Op::fp4_qdq_e4m3, gen_fp4_qdq_e4m3},
    {Op::hadamard, gen_hadamard},
    {Op::sink_attention, gen_sink_attention},
    {Op::sink_attention_heads, gen_sink_attention_heads},
    {Op::index_scores, gen_index_scores},
    {Op::hc_expand, gen_hc_expand},
    {Op::hc_collapse, gen_hc_collapse},
    {Op::swiglu, gen_swiglu},
    {Op::rms_norm, gen_rms_norm},
    {Op::head_rms_norm, gen_head_rms_norm},
    {Op::rope_angles, gen_rope_angles},
    {Op::rope_rotate, gen_rope_rotate},
    {Op::hc_mix_norm, gen_hc_mix_norm},
    {Op::hc_coeffs, gen_hc_coeffs},
    {Op::hc_sinkhorn, gen_hc_sinkhorn},
    {Op::top_k, gen_top_k},
    {Op::router_scores, gen_router_scores},
    {Op::router_select, gen_router_select},
    {Op::router_weights, gen_router_weights},
    {Op::compressor_pool, gen_compressor_pool},
    {Op::engram_update, gen_engram_update},
};

Generator generator_of(Op op) {
  for (const GeneratorEntry& g : kGenerators)
    if (g.op == op) return g.gen;
  return nullptr;
}

struct Case {
  Op op;
  Isa isa;
};

// Every op of the catalogue on every ISA compiled here that this CPU runs.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const OpSpec& s : op_catalogue())
    for (Isa isa : kAllIsas)
      if (isa_supported(isa)) cases.push_back({s.op, isa});
  return cases;
}

void PrintTo(const Case& c, std::ostream* os) { *os << op_name(c.op) << " on " << isa_name(c.isa); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::string(op_name(info.param.op)) + "_" + isa_name(info.param.isa);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class OpRegistryCase : public ::testing::TestWithParam<Case> {};

}  // namespace

// Every op has a generator above: adding an Op without one fails here.
TEST(OpRegistry, EveryOpHasACaseGenerator) {
  for (const OpSpec& s : op_catalogue()) EXPECT_NE(generator_of(s.op), nullptr) << s.name << " has no case generator";
}

// The catalogue lists every op once, in Op order, each contract complete and self-consistent.
TEST(OpRegistry, CatalogueDescribesEveryOpOnce) {
  const auto cat = op_catalogue();
  ASSERT_EQ(cat.size(), size_t(Op::count));
  for (size_t i = 0; i < cat.size(); ++i) {
    const OpSpec& s = cat[i];
    EXPECT_EQ(s.op, Op(i));
    EXPECT_EQ(&op_spec(s.op), &s);
    ASSERT_NE(s.name, nullptr);
    const std::string name = s.name;
    EXPECT_FALSE(name.empty());
    for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << name;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(name, cat[j].name) << "two ops named " << name;
    for (const char* text : {s.referee, s.call, s.shapes, s.basis, s.isa_entry})
      EXPECT_TRUE(text && *text) << name << ": every field is filled in";
    EXPECT_NE(s.impl, nullptr) << name;
    switch (s.contract.bits) {
      case BitContract::kBits:
        EXPECT_EQ(s.contract.max_differing, 0.0) << name;
        EXPECT_EQ(s.contract.magnitude, Magnitude::kNone) << name;
        break;
      case BitContract::kUlp:
        EXPECT_GE(s.contract.bound, 1.0) << name;
        EXPECT_GT(s.contract.max_differing, 0.0) << name;
        EXPECT_EQ(s.contract.magnitude, Magnitude::kNone) << name;
        EXPECT_FALSE(s.contract.nan_bits) << name << ": a kUlp op's NaN is compared by NaN-ness";
        break;
      case BitContract::kFp32Reassoc:
        EXPECT_GT(s.contract.bound, 0.0) << name;
        EXPECT_GE(s.contract.bound_rounded, s.contract.bound) << name;
        EXPECT_NE(s.contract.magnitude, Magnitude::kNone) << name;
        break;
    }
    EXPECT_EQ(s.contract.specials & ~(kSpecialNaN | kSpecialInf | kSpecialSubnormal), 0) << name;
    EXPECT_EQ(s.contract.weight_specials & ~(kSpecialNaN | kSpecialInf | kSpecialSubnormal), 0) << name;
  }
}

// implementation() reads the tables registered per ISA: unavailable ISAs report so, Scalar has
// no ISA entries, a SIMD ISA implements what its non-null entries say, and every op whose only
// implementation is its referee says so everywhere.
TEST(OpRegistry, ImplementationsComeFromTheRegisteredTables) {
  for (const OpSpec& s : op_catalogue())
    for (Isa isa : kAllIsas) {
      const Impl impl = implementation(s.op, isa);
      const std::string what = std::string(s.name) + " on " + isa_name(isa) + ": " + impl_name(impl);
      EXPECT_EQ(isa_implements(s.op, isa), impl == Impl::kIsa) << what;
      if (!isa_supported(isa)) {
        EXPECT_EQ(impl, Impl::kUnavailable) << what;
        continue;
      }
      EXPECT_NE(impl, Impl::kUnavailable) << what;
      if (isa == Isa::Scalar) {
        EXPECT_NE(impl, Impl::kIsa) << what;
        continue;
      }
      const cpu::IsaKernels* k = isa_kernel_table(isa);
      const cpu::AttentionKernels* a = isa_attention_table(isa);
      ASSERT_NE(k, nullptr) << what;
      ASSERT_NE(a, nullptr) << what << ": every SIMD ISA registers its attention";
      EXPECT_GT(a->dim_align, 0) << what;
      switch (s.op) {
        case Op::sink_attention: EXPECT_EQ(impl == Impl::kIsa, a->sink_attention != nullptr) << what; break;
        case Op::sink_attention_heads: EXPECT_EQ(impl == Impl::kIsa, a->sink_attention_heads != nullptr) << what; break;
        case Op::hc_expand: EXPECT_EQ(impl == Impl::kIsa, k->hc_expand != nullptr) << what; break;
        case Op::hc_collapse: EXPECT_EQ(impl == Impl::kIsa, k->hc_collapse != nullptr) << what; break;
        case Op::swiglu: EXPECT_EQ(impl == Impl::kIsa, k->swiglu != nullptr) << what; break;
        case Op::act_quant: EXPECT_EQ(impl == Impl::kIsa, k->act_quant != nullptr) << what; break;
        case Op::linear_f32_exact: EXPECT_EQ(impl == Impl::kIsa, k->dot_f64 != nullptr) << what; break;
        case Op::index_scores: EXPECT_EQ(impl == Impl::kIsa, k->index_dots != nullptr) << what; break;
        default: break;
      }
    }
}

// One op on one ISA over its awkward shapes, against its referee, as its contract says.
TEST_P(OpRegistryCase, MatchesRefereeAsContracted) {
  const Case c = GetParam();
  const OpSpec& spec = op_spec(c.op);
  const Generator gen = generator_of(c.op);
  ASSERT_NE(gen, nullptr) << spec.name << " has no case generator";
  ASSERT_NE(implementation(c.op, c.isa), Impl::kUnavailable);
  ThreadPool pool(2);
  const auto be = make_cpu_backend_isa(&pool, c.isa);
  Checker check{spec, c.isa};
  Env env{spec, c.isa, *be, check, std::mt19937(1000u + 17u * unsigned(c.op) + unsigned(c.isa)), &pool};
  gen(env);
  EXPECT_GT(check.outputs, 0) << "the generator compared nothing";
  EXPECT_LE(double(check.differing), spec.contract.max_differing * double(check.outputs))
      << spec.name << " on " << isa_name(c.isa) << ": " << check.differing << " of " << check.outputs
      << " outputs differ from the referee's bits, more than " << spec.contract.max_differing << " of them";
  EXPECT_EQ(check.failures, 0) << spec.name << " on " << isa_name(c.isa) << " ("
                               << impl_name(implementation(c.op, c.isa)) << "): " << check.failures
                               << " outputs outside the contract (" << bit_contract_name(spec.contract.bits) << ")";
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, OpRegistryCase, ::testing::ValuesIn(all_cases()), case_name);
