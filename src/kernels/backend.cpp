#include "kernels/backend.h"

#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels {

namespace {

class RefBackend final : public Backend {
 public:
  const char* name() const override { return "ref"; }
  ThreadPool* pool() const override { return nullptr; }
  void linear_f32(const float* x, int64_t M, const WeightMatrix& W, float* y) const override {
    linear_f32_ref(x, M, W, y);
  }
  void linear_act_quant(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y,
                        BlockSum sum = BlockSum::kExact) const override {
    linear_act_quant_ref(x, M, W, act_block, y, sum);
  }
  void sink_attention(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale, float sink,
                      bool round_probs, float* out) const override {
    sink_attention_ref(q, keys, n_keys, dim, scale, sink, round_probs, out);
  }
};

}  // namespace

void Backend::linear_many(const LinearJob* jobs, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    const LinearJob& j = jobs[i];
    if (j.act_block > 0)
      linear_act_quant(j.x, j.M, *j.W, j.act_block, j.y, j.block_sum);
    else
      linear_f32(j.x, j.M, *j.W, j.y);
  }
}

void Backend::linear_f32_exact(const float* x, int64_t M, const WeightMatrix& W, float* y) const {
  // linear_f32_ref's arithmetic (in-order double sums), its output columns split over the pool.
  struct Job {
    const float* x;
    int64_t M;
    const WeightMatrix* W;
    float* y;
  } job{x, M, &W, y};
  parallel_for(pool(), W.rows, 4, [&job](int64_t n0, int64_t n1, int) {
    const int64_t N = job.W->rows, K = job.W->cols;
    std::vector<float> row{};
    row.resize(size_t(K));
    for (int64_t n = n0; n < n1; ++n) {
      weight_decode_row(*job.W, n, row.data());
      for (int64_t m = 0; m < job.M; ++m) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) acc += double(job.x[m * K + k]) * double(row[size_t(k)]);
        job.y[m * N + n] = float(acc);
      }
    }
  });
}

void Backend::sink_attention_heads(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                   int64_t dim, float scale, const float* sinks, bool round_probs, float* out) const {
  for (int64_t h = 0; h < n_heads; ++h)
    sink_attention(q + h * dim, keys, n_keys, dim, scale, sinks[h], round_probs, out + h * dim);
}

void Backend::index_scores_many(const float* q, const float* w, int64_t n_q, int64_t n_heads, int64_t dim,
                                const float* const* keys, int64_t keys_ld, const int64_t* n_vis, bool round_bf16,
                                float* scores, int64_t ld) const {
  for (int64_t i = 0; i < n_q; ++i)
    index_scores(q + i * n_heads * dim, w + i * n_heads, n_heads, dim, keys + i * keys_ld, n_vis[i], round_bf16,
                 scores + i * ld);
}

void Backend::index_scores(const float* q, const float* w, int64_t n_heads, int64_t dim, const float* const* keys,
                           int64_t n_keys, bool round_bf16, float* scores) const {
  // Each score is one key's own computation, so splitting the keys changes nothing. The
  // lambda captures one reference: std::function then stores it without allocating.
  struct Job {
    const float *q, *w;
    int64_t n_heads, dim;
    const float* const* keys;
    bool round;
    float* scores;
  } job{q, w, n_heads, dim, keys, round_bf16, scores};
  parallel_for(pool(), n_keys, 64, [&job](int64_t s0, int64_t s1, int) {
    index_scores_ref(job.q, job.w, job.n_heads, job.dim, job.keys + s0, s1 - s0, job.round, job.scores + s0);
  });
}

const Backend& ref_backend() {
  static const RefBackend backend;
  return backend;
}

std::unique_ptr<Backend> make_backend(const std::string& name, ThreadPool* pool) {
  if (name == "ref") return std::make_unique<RefBackend>();  // stateless: a fresh one is the same
  if (name == "cpu") return make_cpu_backend(pool);
  // A forced ISA, for measuring another tier's kernels on a machine that has both (an
  // AVX-512 machine running its AVX2 kernels as an AVX2-only CPU would).
  for (Isa isa : kAllIsas)
    if (name == std::string("cpu-") + isa_name(isa)) return make_cpu_backend_isa(pool, isa);
  throw std::invalid_argument("unknown kernel backend '" + name +
                              "' (expected ref or cpu, or cpu-avx2 / cpu-avx512 / cpu-neon / cpu-neon-bf16 / "
                              "cpu-scalar to force an ISA)");
}

void Backend::prefetch_hint(const WeightMatrix* const*, int) const {}

double Backend::fma_peak_macs_per_s() const { return 0.0; }

double Backend::bf16_dot_peak_macs_per_s() const { return 0.0; }

void Backend::hc_expand(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc,
                        int64_t dim, bool round_bf16, float* Y, int64_t j0, int64_t j1) const {
  hc_expand_ref(o, Rs, comb, post, hc, dim, round_bf16, Y, j0, j1);
}

void Backend::hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, bool round_bf16,
                          float* out) const {
  hc_collapse_ref(X, pre, hc, dim, round_bf16, out);
}

void Backend::swiglu(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
                     float* out) const {
  swiglu_ref(g, u, n, limit, weight, round_bf16, out);
}

void pool_prefetch_hint(ThreadPool* pool, const WeightMatrix* const* weights, int n) {
  if (!pool || pool->size() <= 1) return;
  ThreadPool::MemRange ranges[ThreadPool::kMaxHintRanges];
  int k = 0;
  for (int i = 0; i < n && k + 2 <= ThreadPool::kMaxHintRanges; ++i) {
    const WeightMatrix* w = weights[i];
    if (!w || !w->valid()) continue;
    ranges[k++] = {w->data, size_t(weight_data_bytes(*w))};
    if (w->scale) ranges[k++] = {w->scale, size_t(weight_scale_bytes(*w))};
  }
  pool->prefetch_hint(ranges, k);
}

}  // namespace deepinfer::kernels
