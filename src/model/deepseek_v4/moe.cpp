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

// One expert on rows x [M, dim]: out[M, dim] = w2(bf16(weight * silu(min(g, L)) * clamp(u, -L, L))).
void expert_forward(const Config& cfg, const Numerics& num, const ExpertWeights& ew, const float* x, int64_t M,
                    const float* row_weight, float* out) {
  const int64_t I = ew.w1.rows;
  std::vector<float> g(M * I), u(M * I);
  linear_quantized(cfg, num, x, M, ew.w1, g.data());
  linear_quantized(cfg, num, x, M, ew.w3, u.data());
  const float lim = float(cfg.swiglu_limit);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < I; ++i) {
      float gv = g[m * I + i], uv = u[m * I + i];
      if (lim > 0.0f) {
        uv = std::clamp(uv, -lim, lim);
        gv = std::min(gv, lim);
      }
      float h = silu_f(gv) * uv;
      if (row_weight) h = row_weight[m] * h;  // routing weight before w2, in fp32
      g[m * I + i] = num.bf16(h);
    }
  linear_quantized(cfg, num, g.data(), M, ew.w2, out);
}

}  // namespace

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
  std::vector<float> acc(S * d, 0.0f), xs, ws, ys;
  for (auto& [e, rows] : by_expert) {
    const int64_t M = int64_t(rows.size());
    xs.resize(M * d);
    ws.resize(M);
    ys.resize(M * d);
    for (int64_t i = 0; i < M; ++i) {
      std::copy(x + rows[i].first * d, x + (rows[i].first + 1) * d, xs.begin() + i * d);
      ws[i] = rows[i].second;
    }
    expert_forward(cfg, num, m.experts[e], xs.data(), M, ws.data(), ys.data());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < d; ++c) acc[rows[i].first * d + c] += ys[i * d + c];
  }
  if (m.has_shared) {
    ys.resize(S * d);
    expert_forward(cfg, num, m.shared, x, S, nullptr, ys.data());
    for (int64_t i = 0; i < S * d; ++i) acc[i] += ys[i];
  }
  for (int64_t i = 0; i < S * d; ++i) out[i] = num.bf16(acc[i]);
}

}  // namespace deepinfer::v4
