// Kernel microbenchmarks: the linear layers of the large bench model on every cpu backend
// variant this machine supports (Scalar = the original portable kernels, AVX2, AVX-512),
// in one run, with GB/s (weight bytes read: codes + scales) and GFLOP/s (2 M N K), and a
// summary of the speed-ups over Scalar at the end.
//
// Decode (M = 1) cycles through enough copies of each weight to overflow the last-level
// cache, so it measures weight streaming from memory; batched decode (M = 16, 32) and prefill
// (M = 128, 512) use one copy.
// Every benchmark first checks its variant against the ref kernel on a slice of the weight
// (all M rows, the first 64 output rows) and reports an error instead of a time if wrong.
//
//   bench_kernels [--benchmark_filter=...]   threads: DEEPINFER_BENCH_THREADS (default 2);
//   DEEPINFER_BENCH_HOT=1 keeps decode on one cached copy (kernel speed without memory);
//   DEEPINFER_BENCH_COLD_MB sets the size of the cold set of copies (default 256);
//   DEEPINFER_BENCH_COLD=1 streams every M up to 32 from memory (not only M <= 8);
//   DEEPINFER_BENCH_AVX512_TILES=dp|fma forces the AVX-512 bf16 prefill tiles' instruction.
//   act_quant rows: linear_act_quant on bf16 activations (reference numerics of FP8 / FP4
//   layers); f32 rows: linear_f32 on fp32 activations (float numerics, fp32 FMA kernels).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

// ------------------------------------------------------------------------------ weights

uint64_t rng_state = 0x9e3779b97f4a7c15ull;
uint64_t next_rand() {  // xorshift64*
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

// The e4m3 code nearest to v (ties to even mantissa), saturating at +-448; never a NaN code.
uint8_t e4m3_code(float v) {
  const uint8_t sign = v < 0 ? 0x80 : 0;
  const double a = std::fabs(double(v));
  if (a >= 448.0) return sign | 0x7e;
  int ex;
  const double f = std::frexp(a, &ex);  // a = f * 2^ex, f in [0.5, 1)
  const int e = std::max(ex - 1, -6);    // e4m3 exponent; -6 also covers the subnormals
  const double steps = a * std::ldexp(1.0, 3 - e);  // a in units of 2^(e - 3)
  int q = int(std::nearbyint(steps));
  if (f == 0.0) q = 0;
  if (ex - 1 < -6) return sign | uint8_t(q);  // subnormal: 0.mmm * 2^-6 (q = 8 is 2^-6, code 8)
  int biased = e + 7, m = q - 8;
  if (m == 8) ++biased, m = 0;
  if (biased > 15 || (biased == 15 && m > 6)) return sign | 0x7e;
  return sign | uint8_t(biased << 3 | m);
}

struct Weight {
  std::vector<uint8_t> data, scale;
  WeightMatrix w;
  size_t bytes() const { return data.size() + scale.size(); }
};

std::unique_ptr<Weight> make_weight(WeightFormat f, int64_t rows, int64_t cols) {
  auto o = std::make_unique<Weight>();
  o->w.format = f;
  o->w.rows = rows;
  o->w.cols = cols;
  if (f == WeightFormat::FP8_BLOCK) {
    // As a checkpoint's codes: roughly normal values (sum of four uniforms) block-quantised
    // with about 4 sigma at the top code, so ~1 in 10^4 codes is an e4m3 subnormal, as in
    // large-bench. Uniform random bytes make 1 in 16 subnormal, which no checkpoint has and
    // which costs the AVX2 decoder (its subnormal codes are fp32 subnormals).
    o->data.resize(rows * cols);
    for (auto& b : o->data) {
      double g = -2.0;
      for (int i = 0; i < 4; ++i) g += double(next_rand() >> 11) * 0x1p-53;  // mean 0, sigma 0.577
      b = e4m3_code(float(g * (448.0 / (4 * 0.577))));
    }
    o->w.block = 128;
    o->w.scale_cols = (cols + 127) / 128;
    o->scale.resize(((rows + 127) / 128) * o->w.scale_cols);
  } else if (f == WeightFormat::FP4_BLOCK) {
    o->data.resize(rows * cols / 2);
    for (auto& b : o->data) b = uint8_t(next_rand() >> 56);
    o->w.block = 32;
    o->w.scale_cols = cols / 32;
    o->scale.resize(rows * o->w.scale_cols);
  } else if (f == WeightFormat::F32) {  // the mHC mixers: values around +-0.01
    o->data.resize(rows * cols * 4);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = float(int64_t(next_rand() >> 44) - (int64_t(1) << 19)) * 2e-8f;
      std::memcpy(&o->data[4 * i], &v, 4);
    }
  } else {  // BF16: sign, exponent 2^-12 .. 2^-5, random mantissa
    o->data.resize(rows * cols * 2);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint64_t r = next_rand();
      const uint16_t h = uint16_t(((r >> 63) << 15) | ((115 + (r >> 40) % 8) << 7) | ((r >> 20) & 0x7f));
      std::memcpy(&o->data[2 * i], &h, 2);
    }
  }
  for (auto& s : o->scale) s = uint8_t(118 + next_rand() % 8);
  o->w.data = o->data.data();
  o->w.scale = o->scale.empty() ? nullptr : o->scale.data();
  return o;
}

struct Shape {
  const char* name;
  WeightFormat format;
  int64_t rows, cols;
  bool prefill;  // also M = 128 / 512
};

const Shape kShapes[] = {
    {"FP8_2048x2048", WeightFormat::FP8_BLOCK, 2048, 2048, true},
    {"FP8_512x2048", WeightFormat::FP8_BLOCK, 512, 2048, true},
    {"FP8_8192x512", WeightFormat::FP8_BLOCK, 8192, 512, false},
    {"FP4_1024x2048", WeightFormat::FP4_BLOCK, 1024, 2048, true},
    {"FP4_2048x1024", WeightFormat::FP4_BLOCK, 2048, 1024, true},
    {"BF16_129280x2048", WeightFormat::BF16, 129280, 2048, false},
    {"BF16_129280x4096", WeightFormat::BF16, 129280, 4096, false},  // the release's output head
    {"F32_24x8192", WeightFormat::F32, 24, 8192, false},  // an mHC mixer (hc_attn_fn)
};

// The routed experts of V4-Flash (FP4 w1 / w3: 2048 rows of K 4096; w2: 4096 rows of K 2048)
// at the row counts a decode batch or a prefill gives one expert (act_quant only: reference
// numerics), and the rows between.
const Shape kExpertShapes[] = {
    {"FP4_2048x4096", WeightFormat::FP4_BLOCK, 2048, 4096, false},
    {"FP4_4096x2048", WeightFormat::FP4_BLOCK, 4096, 2048, false},
};
constexpr int64_t kExpertRows[] = {1, 2, 3, 4, 6, 8, 12, 16};

// Decode cycles through at least this many bytes of copies: well beyond the last-level cache
// (a 96 MiB set still hit the 32 MiB L3 often enough to read FP8 at 83 GB/s instead of 59).
const size_t kColdBytes = size_t(std::getenv("DEEPINFER_BENCH_COLD_MB") ? std::atoi(std::getenv("DEEPINFER_BENCH_COLD_MB")) : 256)
                          << 20;

// Copies of each shape's weight, made once and shared by all variants.
std::vector<std::unique_ptr<Weight>>& copies(const Shape& s, bool cold) {
  static std::map<std::string, std::vector<std::unique_ptr<Weight>>> cache;
  auto& v = cache[s.name];
  if (v.empty()) v.push_back(make_weight(s.format, s.rows, s.cols));
  if (cold)
    while (v.size() * v[0]->bytes() < kColdBytes) v.push_back(make_weight(s.format, s.rows, s.cols));
  return v;
}

ThreadPool& pool();

// DEEPINFER_BENCH_AVX512_TILES=dp|fma forces AVX-512 bf16 mode's prefill tiles onto vdpbf16ps
// or onto FMAs (by default the CPU's faster one), to compare the two in alternated runs.
std::unique_ptr<Backend> make_backend_for(Isa isa) {
  const char* tiles = std::getenv("DEEPINFER_BENCH_AVX512_TILES");
  if (isa == Isa::Avx512 && tiles) return make_cpu_backend_avx512_tiles(&pool(), std::string(tiles) == "dp");
  return make_cpu_backend_isa(&pool(), isa);
}

ThreadPool& pool() {
  static ThreadPool p([] {
    const char* env = std::getenv("DEEPINFER_BENCH_THREADS");
    return env ? std::atoi(env) : 2;
  }());
  return p;
}

// Values around 1 as the model's normalised activations: bf16 values for the act-quant
// path (the reference numerics), full fp32 values for the float path (so the fp32 kernels
// run, not the bf16 ones that bf16-valued inputs would select).
std::vector<float> activations(int64_t M, int64_t K, bool bf16) {
  std::vector<float> x(M * K);
  for (auto& v : x) {
    const double u = double(next_rand() >> 11) / double(1ull << 53);
    v = float((u - 0.5) * 4.0);
    if (bf16) v = round_bf16(v);
  }
  return x;
}

// ------------------------------------------------------------------------------ check

// The variant against the referee on the first 64 output rows; empty string if within the
// tests' tolerances (1e-5 / 2e-5 of the sum of |terms|), else what went wrong.
std::string check(const Backend& be, const WeightMatrix& W, const std::vector<float>& x, int64_t M, bool act_quant) {
  WeightMatrix s = W;
  s.rows = std::min<int64_t>(64, W.rows);
  const int64_t N = s.rows, K = s.cols;
  std::vector<float> want(M * N), got(M * N + 1, 777.0f), xq = x;
  if (act_quant) {
    linear_act_quant_ref(x.data(), M, s, 128, want.data());
    be.linear_act_quant(x.data(), M, s, 128, got.data());
    for (int64_t m = 0; m < M; ++m) act_quant_ref(xq.data() + m * K, K, 128);
  } else {
    linear_f32_ref(x.data(), M, s, want.data());
    be.linear_f32(x.data(), M, s, got.data());
  }
  if (got[M * N] != 777.0f) return "output guard overwritten";
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    weight_decode_row(s, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::abs(double(xq[m * K + k]) * row[k]);
      const double err = std::abs(double(got[m * N + n]) - want[m * N + n]);
      if (!std::isfinite(got[m * N + n]) || err > (act_quant ? 2e-5 : 1e-5) * mag + 1e-30) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "wrong output m=%lld n=%lld: got %g want %g", (long long)m, (long long)n,
                      got[m * N + n], want[m * N + n]);
        return buf;
      }
    }
  }
  return "";
}

// ------------------------------------------------------------------------------ benchmark

void bench_linear(benchmark::State& state, const Shape* shape, int64_t M, Isa isa, bool act_quant) {
  auto be = make_backend_for(isa);
  // Decode and speculative verify chunks (M <= 8) stream their weights from memory
  // (DEEPINFER_BENCH_COLD=1: every M up to 32 does).
  const bool cold = (M <= 8 || (M <= 32 && std::getenv("DEEPINFER_BENCH_COLD"))) && !std::getenv("DEEPINFER_BENCH_HOT");
  auto& ws = copies(*shape, cold);
  const int64_t N = shape->rows, K = shape->cols;
  const std::vector<float> x = activations(M, K, act_quant);
  const std::string err = check(*be, ws[0]->w, x, M, act_quant);
  if (!err.empty()) {
    state.SkipWithError(err.c_str());
    return;
  }
  std::vector<float> y(M * N);
  size_t i = 0;
  for (auto _ : state) {
    const WeightMatrix& W = ws[i++ % ws.size()]->w;
    if (act_quant)
      be->linear_act_quant(x.data(), M, W, 128, y.data());
    else
      be->linear_f32(x.data(), M, W, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = double(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * double(ws[0]->bytes()) * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * double(M * N * K) * 1e-9, benchmark::Counter::kIsRate);
}

// Console output plus a table of speed-ups over Scalar at the end (best of repetitions).
class Reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      const std::string name = r.run_name.function_name;  // without the /real_time suffix
      const size_t slash = name.rfind('/');
      Row& row = rows_[name.substr(0, slash)];
      const std::string isa = name.substr(slash + 1);
      // With --benchmark_repetitions the best run counts: on a shared machine the slow ones
      // are other processes taking the pool's threads.
      if (row.seconds.count(isa) && row.seconds[isa] <= r.GetAdjustedRealTime()) continue;
      row.seconds[isa] = r.GetAdjustedRealTime();
      row.gbs[isa] = r.counters.count("GB/s") ? double(r.counters.at("GB/s")) : 0.0;
      row.gflops[isa] = r.counters.count("GFLOP/s") ? double(r.counters.at("GFLOP/s")) : 0.0;
      if (std::find(order_.begin(), order_.end(), name.substr(0, slash)) == order_.end())
        order_.push_back(name.substr(0, slash));
    }
  }
  void summary() const {
    std::printf("\n%-36s %26s %26s %26s %9s %9s\n", "case (GB/s | GFLOP/s)", "scalar", "avx2", "avx512", "avx2/sc",
                "avx512/sc");
    for (const std::string& key : order_) {
      const Row& r = rows_.at(key);
      std::printf("%-36s", key.c_str());
      for (const char* isa : {"scalar", "avx2", "avx512"}) {
        if (r.seconds.count(isa))
          std::printf(" %11.2f | %8.1f   ", r.gbs.at(isa), r.gflops.at(isa));
        else
          std::printf(" %26s", "-");
      }
      for (const char* isa : {"avx2", "avx512"}) {
        if (r.seconds.count(isa) && r.seconds.count("scalar"))
          std::printf(" %8.1fx", r.seconds.at("scalar") / r.seconds.at(isa));
        else
          std::printf(" %9s", "-");
      }
      std::printf("\n");
    }
  }

 private:
  struct Row {
    std::map<std::string, double> seconds, gbs, gflops;
  };
  std::map<std::string, Row> rows_;
  std::vector<std::string> order_;
};

}  // namespace

int main(int argc, char** argv) {
  std::printf("cpu features: %s\ndispatch: %s, threads: %d\n", cpu_features_description().c_str(),
              isa_name(cpu_dispatch_isa()), pool().size());
  // The compute roofline of the M >= 16 rows (their GFLOP/s against it).
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa))
      std::printf("fp32 FMA peak (%s, %d threads): %.1f GFLOP/s\n", isa_name(isa), pool().size(),
                  2.0 * make_cpu_backend_isa(&pool(), isa)->fma_peak_macs_per_s() / 1e9);
  for (const Shape& s : kShapes)
    for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 128, 512}) {
      // 16 and 32 rows: batched decode (every shape; the products bench --decode-batches runs).
      if (M > 32 && !s.prefill) continue;
      for (bool aq : {true, false}) {
        if (aq && (s.format == WeightFormat::BF16 || s.format == WeightFormat::F32)) continue;
        for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
          if (!isa_supported(isa)) continue;
          const std::string name = std::string("linear/") + s.name + (aq ? "/act_quant" : "/f32") +
                                   "/M=" + std::to_string(M) + "/" + isa_name(isa);
          benchmark::RegisterBenchmark(name.c_str(), bench_linear, &s, M, isa, aq)->UseRealTime()->Unit(
              benchmark::kMillisecond);
        }
      }
    }
  for (const Shape& s : kExpertShapes)
    for (int64_t M : kExpertRows)
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        const std::string name = std::string("linear/") + s.name + "/act_quant/M=" + std::to_string(M) + "/" + isa_name(isa);
        benchmark::RegisterBenchmark(name.c_str(), bench_linear, &s, M, isa, true)->UseRealTime()->Unit(
            benchmark::kMillisecond);
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.summary();
  benchmark::Shutdown();
  return 0;
}
