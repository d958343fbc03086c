// Microbenchmarks of the cpu kernels' vector operations outside the linear layers (the ones
// bench_kernels does not time): act-quant, swiglu, the hyper-connection mixes, the indexer's
// score combination, its scores (whole, through the backend) and sink attention, on each ISA this machine supports, one thread, on
// inputs that stay in cache. Shapes are the large bench model's (hidden 7168, expert 2048,
// 4 hyper-connection streams, 64 indexer heads, 16 heads of 512 in attention).
//
//   bench_isa_ops [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"

using namespace deepinfer::kernels;
using namespace deepinfer::kernels::cpu;

namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

const IsaKernels& table(Isa isa) { return isa == Isa::Avx512 ? avx512_kernels() : avx2_kernels(); }

void bm_prep_act_quant(benchmark::State& state, Isa isa) {
  const IsaKernels& k = table(isa);
  constexpr int64_t M = 4, K = 7168, block = 128, xs = 7168;
  const auto x = random_floats(M * K, 1);
  std::vector<float> xf(M * xs), smax(M);
  std::vector<uint16_t> xb(M * xs);
  for (auto _ : state) {
    k.prep_act_quant(x.data(), K, block, 0, M, xs, xf.data(), xb.data(), smax.data());
    benchmark::DoNotOptimize(xf.data());
  }
  state.SetItemsProcessed(state.iterations() * M * K);
}

void bm_act_quant(benchmark::State& state, Isa isa) {
  const IsaKernels& k = table(isa);
  constexpr int64_t n = 7168, block = 128;
  const auto x0 = random_floats(n, 2);
  std::vector<float> x = x0, q(n), s(n / block);
  for (auto _ : state) {
    k.act_quant(x.data(), n, block, q.data(), s.data());  // in place: later rounds quantise x_qdq again
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void bm_swiglu(benchmark::State& state, Isa isa) {
  const IsaKernels& k = table(isa);
  constexpr int64_t n = 2048 + 5;  // with a partial vector
  const auto g = random_floats(n, 3, 3.0f), u = random_floats(n, 4);
  std::vector<float> out(n);
  const float w = 0.75f;
  for (auto _ : state) {
    k.swiglu(g.data(), u.data(), n, 7.0f, &w, true, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void bm_hc_expand(benchmark::State& state, Isa isa) {
  const IsaKernels& k = table(isa);
  constexpr int64_t hc = 4, dim = 7168;
  const auto o = random_floats(dim, 5), Rs = random_floats(hc * dim, 6), comb = random_floats(hc * hc, 7),
             post = random_floats(hc, 8);
  std::vector<float> Y(hc * dim);
  for (auto _ : state) {
    k.hc_expand(o.data(), Rs.data(), comb.data(), post.data(), hc, dim, true, Y.data(), 0, dim);
    benchmark::DoNotOptimize(Y.data());
  }
  state.SetItemsProcessed(state.iterations() * hc * dim);
}

void bm_hc_collapse(benchmark::State& state, Isa isa) {
  const IsaKernels& k = table(isa);
  constexpr int64_t hc = 4, dim = 7168;
  const auto X = random_floats(hc * dim, 9), pre = random_floats(hc, 10);
  std::vector<float> out(dim);
  for (auto _ : state) {
    k.hc_collapse(X.data(), pre.data(), hc, dim, true, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * dim);
}

void bm_index_combine(benchmark::State& state, Isa isa) {
  const IsaKernels& k = table(isa);
  constexpr int64_t n_heads = 64, n_keys = 1024;
  const auto w = random_floats(n_heads, 11);
  const auto df = random_floats(n_heads * n_keys, 12);
  std::vector<double> dots(df.begin(), df.end());
  std::vector<float> scores(n_keys);
  for (auto _ : state) {
    k.index_combine(dots.data(), w.data(), n_heads, n_keys, true, scores.data());
    benchmark::DoNotOptimize(scores.data());
  }
  state.SetItemsProcessed(state.iterations() * n_heads * n_keys);
}

// The indexer's scores of one query (n_heads of 128) over 2048 keys, one thread, through the
// backend: FP4-QDQ'd q and keys as in reference numerics (exact bf16 dots where the ISA has
// them), or plain floats (`qdq` false: every dot in double).
void bm_index_scores(benchmark::State& state, Isa isa, int64_t n_heads, bool qdq) {
  constexpr int64_t dim = 128, n_keys = 2048;
  auto q = random_floats(n_heads * dim, 16), kv = random_floats(n_keys * dim, 17);
  const auto w = random_floats(n_heads, 18, 0.1f);
  if (qdq) {
    for (int64_t h = 0; h < n_heads; ++h) fp4_qdq_pow2_ref(q.data() + h * dim, dim, 32);
    for (int64_t j = 0; j < n_keys; ++j) fp4_qdq_pow2_ref(kv.data() + j * dim, dim, 32);
  }
  std::vector<const float*> keys(n_keys);
  for (int64_t j = 0; j < n_keys; ++j) keys[j] = kv.data() + j * dim;
  std::vector<float> scores(n_keys);
  const auto be = make_cpu_backend_isa(nullptr, isa);
  for (auto _ : state) {
    be->index_scores(q.data(), w.data(), n_heads, dim, keys.data(), n_keys, qdq, scores.data());
    benchmark::DoNotOptimize(scores.data());
  }
  state.SetItemsProcessed(state.iterations() * n_heads * n_keys * dim);
}

// The same over 8192 keys laid out as the KV pages hold them (16 keys of 512 bytes at the start
// of each 124 KiB block) and out of cache, as a decode step finds them: 64 MiB are read
// between iterations (not timed).
void bm_index_scores_cold(benchmark::State& state, Isa isa, int64_t n_heads) {
  constexpr int64_t dim = 128, n_keys = 8192, per_block = 16, block_floats = 126976 / 4;
  std::vector<float> pool(size_t(n_keys / per_block * block_floats));
  auto q = random_floats(n_heads * dim, 16);
  const auto kv = random_floats(n_keys * dim, 17), w = random_floats(n_heads, 18, 0.1f);
  for (int64_t h = 0; h < n_heads; ++h) fp4_qdq_pow2_ref(q.data() + h * dim, dim, 32);
  std::vector<const float*> keys(n_keys);
  for (int64_t j = 0; j < n_keys; ++j) {
    float* row = pool.data() + (j / per_block) * block_floats + (j % per_block) * dim;
    std::memcpy(row, kv.data() + j * dim, dim * sizeof(float));
    fp4_qdq_pow2_ref(row, dim, 32);
    keys[j] = row;
  }
  std::vector<float> scores(n_keys), flush(size_t(16) << 20, 1.0f);
  const auto be = make_cpu_backend_isa(nullptr, isa);
  float sink = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < flush.size(); i += 16) sink += flush[i];
    state.ResumeTiming();
    be->index_scores(q.data(), w.data(), n_heads, dim, keys.data(), n_keys, true, scores.data());
    benchmark::DoNotOptimize(scores.data());
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations() * n_heads * n_keys * dim);
}

// Sink attention of n_heads heads of 512 over 512 keys (1 MiB of keys: in L2).
void bm_attention(benchmark::State& state, Isa isa, int64_t n_heads) {
  constexpr int64_t dim = 512, n_keys = 512;
  const auto kv = random_floats(n_keys * dim, 13), q = random_floats(n_heads * dim, 14, 0.1f);
  const auto sinks = random_floats(n_heads, 15);
  std::vector<const float*> keys(n_keys);
  for (int64_t j = 0; j < n_keys; ++j) keys[j] = kv.data() + j * dim;
  std::vector<float> out(n_heads * dim);
  for (auto _ : state) {
    if (n_heads == 1)
      (isa == Isa::Avx512 ? sink_attention_avx512 : sink_attention_avx2)(q.data(), keys.data(), n_keys, dim, 0.04f,
                                                                         sinks[0], true, out.data());
    else
      (isa == Isa::Avx512 ? sink_attention_heads_avx512 : sink_attention_heads_avx2)(
          q.data(), n_heads, keys.data(), n_keys, dim, 0.04f, sinks.data(), true, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n_heads * n_keys);
}

}  // namespace

int main(int argc, char** argv) {
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) continue;
    const std::string s = isa == Isa::Avx512 ? "/avx512" : "/avx2";
    benchmark::RegisterBenchmark(("prep_act_quant/4x7168" + s).c_str(), bm_prep_act_quant, isa);
    benchmark::RegisterBenchmark(("act_quant/7168" + s).c_str(), bm_act_quant, isa);
    benchmark::RegisterBenchmark(("swiglu/2053" + s).c_str(), bm_swiglu, isa);
    benchmark::RegisterBenchmark(("hc_expand/4x7168" + s).c_str(), bm_hc_expand, isa);
    benchmark::RegisterBenchmark(("hc_collapse/4x7168" + s).c_str(), bm_hc_collapse, isa);
    benchmark::RegisterBenchmark(("index_combine/64x1024" + s).c_str(), bm_index_combine, isa);
    for (int64_t heads : {16, 64})
      for (bool qdq : {true, false})
        benchmark::RegisterBenchmark(
            ("index_scores/" + std::to_string(heads) + "x128x2048" + (qdq ? "/fp4" : "/f32") + s).c_str(),
            bm_index_scores, isa, heads, qdq);
    for (int64_t heads : {16, 64})
      benchmark::RegisterBenchmark(("index_scores/" + std::to_string(heads) + "x128x8192/fp4/cold" + s).c_str(),
                                   bm_index_scores_cold, isa, heads);
    benchmark::RegisterBenchmark(("sink_attention/1x512x512" + s).c_str(), bm_attention, isa, int64_t(1));
    benchmark::RegisterBenchmark(("sink_attention_heads/16x512x512" + s).c_str(), bm_attention, isa, int64_t(16));
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
