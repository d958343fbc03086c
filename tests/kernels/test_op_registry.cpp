// The op registry's test (kernels/ops.h): every op of op_catalogue() on every ISA this machine
// runs (Scalar included), each over its list of awkward shapes (one row, tails that are not a
// multiple of the vector widths, odd sizes, short and long K), against its referee, as its bit
// contract says: bits (NaN by bits or by NaN-ness, as the contract says), units in the last
// place (with a cap on how many outputs may differ), or fp32 reassociation's bound. NaN / inf /
// subnormal inputs are generated exactly where the contract covers them, and every output
// buffer carries guard values after its end (the ops write their outputs only). A case is one
// op on one ISA; each op has one generator (the kernels' ops below, the light ops' in
// test_op_registry_light.cpp), and OpRegistry.EveryOpHasACaseGenerator fails for an op that
// has none. The light per-token ops (light_ops.h) have no implementation but their referee, the
// same on every backend: their cases check it against the test's own evaluation of its formula,
// and for the same bits from a worker thread (light_case). The comparison, the inputs and the
// Env a generator runs in: op_registry_cases.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"
#include "op_registry_cases.h"
#include "random_weight.h"

namespace deepinfer::kernels::op_registry_test {
namespace {

using kernel_test::OwnedWeight;
using kernel_test::random_weight;

// ----------------------------------------------------------------------------- inputs

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

      // index_scores_many: 13 queries (enough for the fast backend to give each its own thread)
      // over prefixes of one key list, then each over its own list (the keys rotated by its
      // index), 0 to all of the keys, rows ld = n_keys + 3 apart; what lies past a query's
      // prefix stays untouched.
      const int64_t n_q = 13, ld = n_keys + 3;
      std::vector<float> qs = normal(n_q * heads * dim, e.rng), ws = normal(n_q * heads, e.rng, 0.1f, true);
      if (round)
        for (int64_t r = 0; r < n_q * heads; ++r) fp4_qdq_pow2_ref(&qs[size_t(r * dim)], dim, dim % 32 == 0 ? 32 : dim);
      std::vector<int64_t> n_vis(static_cast<size_t>(n_q));
      std::vector<const float*> lists(static_cast<size_t>(n_q * n_keys));
      for (int64_t i = 0; i < n_q; ++i) {
        n_vis[size_t(i)] = i * n_keys / (n_q - 1);
        for (int64_t s = 0; s < n_keys; ++s) lists[size_t(i * n_keys + s)] = keys[size_t((s + i) % n_keys)];
      }
      for (bool own_lists : {false, true}) {
        const int64_t keys_ld = own_lists ? n_keys : 0;
        const float* const* key_base = own_lists ? lists.data() : keys.data();
        std::vector<float> want_many(static_cast<size_t>(n_q * ld), -7.0f);
        for (int64_t i = 0; i < n_q; ++i)
          index_scores_ref(&qs[size_t(i * heads * dim)], &ws[size_t(i * heads)], heads, dim, key_base + i * keys_ld,
                           n_vis[size_t(i)], round, &want_many[size_t(i * ld)]);
        Out got_many(n_q * ld, -7.0f);
        e.be.index_scores_many(qs.data(), ws.data(), n_q, heads, dim, key_base, keys_ld, n_vis.data(), round,
                               got_many.data(), ld);
        e.check.compare(got_many, want_many,
                        shape("many: queries heads dim keys round own_lists", {n_q, heads, dim, n_keys, round, own_lists}),
                        round);
      }
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

// ----------------------------------------------------------------------------- registry

// The generators of the kernels' ops; light_generators() has the light ops'.
const GeneratorEntry kKernelGenerators[] = {
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
};

// Every generator, of both tables.
std::vector<GeneratorEntry> all_generators() {
  std::vector<GeneratorEntry> all(std::begin(kKernelGenerators), std::end(kKernelGenerators));
  const std::span<const GeneratorEntry> light = light_generators();
  all.insert(all.end(), light.begin(), light.end());
  return all;
}

Generator generator_of(Op op) {
  for (const GeneratorEntry& g : all_generators())
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
}  // namespace deepinfer::kernels::op_registry_test

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::kernels::op_registry_test;

// Every op has a generator in one of the tables, and one only: adding an Op without one fails
// here.
TEST(OpRegistry, EveryOpHasACaseGenerator) {
  const std::vector<GeneratorEntry> all = all_generators();
  for (const OpSpec& s : op_catalogue()) {
    EXPECT_NE(generator_of(s.op), nullptr) << s.name << " has no case generator";
    EXPECT_LE(std::count_if(all.begin(), all.end(), [&](const GeneratorEntry& g) { return g.op == s.op; }), 1)
        << s.name << " has two case generators";
  }
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
