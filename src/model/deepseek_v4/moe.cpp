// Mixture of experts of DeepSeek-V4 (MODEL.md 8): sqrt-softplus router with selection bias
// or a token-id hash table, clamped SwiGLU experts, a shared expert.
#include <algorithm>
#include <map>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/kernels.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::v4 {

namespace {

struct Route {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Route route_token(const Config& cfg, const MoeWeights& m, bool hash_routed, const float* logits, int32_t token) {
  const int64_t E = cfg.n_routed_experts, K = cfg.n_activated_experts;
  std::vector<float> score(E);
  for (int64_t e = 0; e < E; ++e) score[e] = std::sqrt(softplus_f(logits[e]));
  Route r;
  if (hash_routed) {
    r.experts.assign(m.tid2eid.begin() + int64_t(token) * K, m.tid2eid.begin() + (int64_t(token) + 1) * K);
  } else {
    std::vector<float> biased(E);
    for (int64_t e = 0; e < E; ++e) biased[e] = score[e] + m.bias[e];
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    // Ties: the larger value first, then the lower expert id.
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
      return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
    });
    r.experts.assign(order.begin(), order.begin() + K);
  }
  double sum = 0.0;
  for (int32_t e : r.experts) {
    r.weights.push_back(score[e]);
    sum += score[e];
  }
  const float route_scale = float(cfg.route_scale);
  for (float& w : r.weights) {
    if (cfg.norm_topk_prob) w = w / float(sum);
    w = w * route_scale;
  }
  return r;
}

// One expert's share of a MoE step: rows x [M, dim] (gathered tokens), routing weights
// (null for the shared expert), and its intermediate and output buffers.
struct ExpertWork {
  const ExpertWeights* w = nullptr;
  const float* x = nullptr;
  int64_t M = 0;
  const float* row_weight = nullptr;
  std::vector<float> g, u, y;
};

// Every expert of the step together: out = w2(bf16(weight * silu(min(g, L)) * clamp(u, -L, L)))
// with g = w1 x, u = w3 x. The products of all experts go to the backend as two batches
// (w1 and w3 of every expert, then every w2), so small decode matrices share one parallel
// region each; each product is the same as if run alone.
void experts_forward(const Config& cfg, const Numerics& num, std::vector<ExpertWork>& work) {
  std::vector<QuantizedProduct> products;
  for (ExpertWork& e : work) {
    const int64_t I = e.w->w1.rows;
    e.g.resize(e.M * I);
    e.u.resize(e.M * I);
    products.push_back({e.x, e.M, &e.w->w1, e.g.data()});
    products.push_back({e.x, e.M, &e.w->w3, e.u.data()});
  }
  linear_quantized_many(cfg, num, products.data(), products.size());
  const float lim = float(cfg.swiglu_limit);
  products.clear();
  for (ExpertWork& e : work) {
    const int64_t I = e.w->w1.rows;
    for (int64_t m = 0; m < e.M; ++m)
      for (int64_t i = 0; i < I; ++i) {
        float gv = e.g[m * I + i], uv = e.u[m * I + i];
        if (lim > 0.0f) {
          uv = std::clamp(uv, -lim, lim);
          gv = std::min(gv, lim);
        }
        float h = silu_f(gv) * uv;
        if (e.row_weight) h = e.row_weight[m] * h;  // routing weight before w2, in fp32
        e.g[m * I + i] = num.bf16(h);
      }
    e.y.resize(e.M * e.w->w2.rows);
    products.push_back({e.g.data(), e.M, &e.w->w2, e.y.data()});
  }
  linear_quantized_many(cfg, num, products.data(), products.size());
}

}  // namespace

void linear_quantized_many(const Config& cfg, const Numerics& num, const QuantizedProduct* products, size_t n) {
  std::vector<kernels::LinearJob> jobs(n);
  for (size_t i = 0; i < n; ++i) {
    const QuantizedProduct& p = products[i];
    const bool act_quant = num.reference() && p.W->is_quantized();
    jobs[i] = kernels::LinearJob{p.x, p.M, p.W, act_quant ? cfg.act_block() : 0, p.y};
  }
  num.backend->linear_many(jobs.data(), n);
  for (size_t i = 0; i < n; ++i) num.bf16(products[i].y, products[i].M * products[i].W->rows);
}

void moe_forward(const Config& cfg, const Numerics& num, const LayerWeights& L, const float* x,
                 const int32_t* tokens, int64_t S, float* out) {
  const MoeWeights& m = L.ffn;
  const int64_t E = cfg.n_routed_experts, d = cfg.dim;
  std::vector<float> logits(S * E);
  num.backend->linear_f32(x, S, m.gate, logits.data());

  // Group the chunk's tokens by expert; experts run in increasing id, and each token's
  // fp32 accumulator receives its contributions in that order (the reference's order).
  std::map<int32_t, std::vector<std::pair<int64_t, float>>> by_expert;
  for (int64_t t = 0; t < S; ++t) {
    Route r = route_token(cfg, m, L.hash_routed, &logits[t * E], tokens[t]);
    for (size_t k = 0; k < r.experts.size(); ++k) by_expert[r.experts[k]].push_back({t, r.weights[k]});
  }
  // Gathered rows and routing weights per expert (expert id order), then the shared expert.
  std::vector<std::vector<float>> xs, ws;
  std::vector<ExpertWork> work;
  xs.reserve(by_expert.size());
  ws.reserve(by_expert.size());
  for (auto& [e, rows] : by_expert) {
    const int64_t M = int64_t(rows.size());
    std::vector<float>& xe = xs.emplace_back(M * d);
    std::vector<float>& we = ws.emplace_back(M);
    for (int64_t i = 0; i < M; ++i) {
      std::copy(x + rows[i].first * d, x + (rows[i].first + 1) * d, xe.begin() + i * d);
      we[i] = rows[i].second;
    }
    ExpertWork& w = work.emplace_back();
    w.w = &m.experts[e];
    w.x = xe.data();
    w.M = M;
    w.row_weight = we.data();
  }
  if (m.has_shared) {
    ExpertWork& w = work.emplace_back();
    w.w = &m.shared;
    w.x = x;
    w.M = S;
  }
  experts_forward(cfg, num, work);
  // Each token's fp32 accumulator takes its contributions in increasing expert id, then
  // the shared expert (the reference's order).
  std::vector<float> acc(S * d, 0.0f);
  size_t k = 0;
  for (auto& [e, rows] : by_expert) {
    const std::vector<float>& ys = work[k++].y;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < d; ++c) acc[rows[i].first * d + c] += ys[i * d + c];
  }
  if (m.has_shared)
    for (int64_t i = 0; i < S * d; ++i) acc[i] += work[k].y[i];
  for (int64_t i = 0; i < S * d; ++i) out[i] = num.bf16(acc[i]);
}

}  // namespace deepinfer::v4
