// Mixture of experts of DeepSeek-V4 (docs/model/moe.md): sqrt-softplus router with selection bias
// or a token-id hash table, clamped SwiGLU experts, a shared expert.
#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/profile.h"
#include "kernels/kernels.h"
#include "kernels/light_ops.h"
#include "model/deepseek_v4/expert_cache.h"
#include "model/deepseek_v4/layer_ops.h"
#include "model/deepseek_v4/release.h"
#include "model/deepseek_v4/routing_trace.h"

namespace deepinfer::v4 {

namespace {

thread_local RoutingTrace* routing_trace = nullptr;

// Counts the experts of `chosen` (ids below n_experts) in the trace's row of layer id.
void record_routing(RoutingTrace& trace, int64_t id, int64_t n_experts, std::span<const int32_t> chosen) {
  if (int64_t(trace.chosen.size()) <= id) trace.chosen.resize(size_t(id) + 1);
  std::vector<uint32_t>& row = trace.chosen[size_t(id)];
  if (int64_t(row.size()) < n_experts) row.resize(size_t(n_experts), 0);
  for (int32_t e : chosen) ++row[size_t(e)];
}

// A token's K experts and their routing weights, into experts[K] and weights[K]; the math is
// the kernel layer's (kernels/light_ops.h: router_scores_ref, router_select_ref,
// router_weights_ref), the release's rules are chosen here.
void route_token(const Config& cfg, const MoeWeights& m, bool hash_routed, const float* logits, int32_t token,
                 int32_t* experts, float* weights) {
  const int64_t E = cfg.n_routed_experts, K = cfg.n_activated_experts;
  const ReleaseRules& rules = release_rules(cfg);
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> score = scratch.take<float>(E);
  // V4.1 divides the router logits by gate_temp (1.0 in the release: exact either way).
  kernels::router_scores_ref(logits, E, rules.router_temperature, float(cfg.gate_temp), score.data());
  if (hash_routed) {
    std::copy_n(m.tid2eid.begin() + int64_t(token) * K, K, experts);
  } else {
    std::span<float> biased = scratch.take<float>(E);
    std::span<int32_t> order = scratch.take<int32_t>(E);
    kernels::router_select_ref(score.data(), m.bias.data(), E, K, biased.data(), order.data(), experts);
  }
  // V4.1 renormalises only more than one expert, with 1e-20 in the denominator (its training
  // value, not rms_norm_eps); V4's reference adds nothing (renorm_epsilon 0: sum + 0 is sum,
  // the sum being >= +0).
  const bool renorm = cfg.norm_topk_prob && (rules.renorm_one_expert || K > 1);
  kernels::router_weights_ref(score.data(), experts, K, renorm, rules.renorm_epsilon, float(cfg.route_scale),
                              weights);
}

// One expert's share of a MoE step: rows x [M, dim] (gathered tokens), routing weights
// (null for the shared expert), and its intermediate and output buffers (set by
// experts_forward; y only where the caller left it null).
struct ExpertWork {
  const ExpertWeights* w = nullptr;
  const float* x = nullptr;
  int64_t M = 0;
  const float* row_weight = nullptr;
  float *g = nullptr, *u = nullptr, *y = nullptr;
};

// Every expert of the step together: out = w2(bf16(weight * silu(min(g, L)) * clamp(u, -L, L)))
// with g = w1 x, u = w3 x. The products of all experts go to the backend as two batches
// (w1 and w3 of every expert, then every w2), so small decode matrices share one parallel
// region each; each product is the same as if run alone. The buffers come from the step
// scratch in the caller's scope (the caller reads y).
void experts_forward(const Config& cfg, const Numerics& num, std::span<ExpertWork> work) {
  ScratchArena& scratch = step_scratch();
  profile::Phase section;
  section.start(DI_PROFILE_SECTION("moe.w1_w3"));
  std::span<LayerProduct> products = scratch.take<LayerProduct>(2 * int64_t(work.size()));
  size_t n = 0;
  for (ExpertWork& e : work) {
    const int64_t I = e.w->w1.rows;
    e.g = scratch.take<float>(e.M * I).data();
    e.u = scratch.take<float>(e.M * I).data();
    products[n++] = {e.x, e.M, &e.w->w1, e.g};
    products[n++] = {e.x, e.M, &e.w->w3, e.u};
  }
  run_products(cfg, num, products.data(), n);
  section.start(DI_PROFILE_SECTION("moe.swiglu"));
  const float lim = float(cfg.swiglu_limit);
  // Split over the intermediate columns, every expert's share in each range.
  int64_t max_i = 0;
  for (const ExpertWork& e : work) max_i = std::max(max_i, e.w->w1.rows);
  // h = bf16(weight * silu(min(g, L)) * clamp(u, -L, L)), in place of g; the routing weight
  // multiplies before w2, in fp32.
  auto swiglu = [&](int64_t i0, int64_t i1, int) {
    for (ExpertWork& e : work) {
      const int64_t I = e.w->w1.rows, i_end = std::min(i1, I);
      if (i_end <= i0) continue;
      for (int64_t m = 0; m < e.M; ++m)
        num.backend->swiglu(&e.g[m * I + i0], &e.u[m * I + i0], i_end - i0, lim,
                            e.row_weight ? &e.row_weight[m] : nullptr, num.reference(), &e.g[m * I + i0]);
    }
  };
  parallel_for(num.backend->pool(), max_i, 64, [&swiglu](int64_t i0, int64_t i1, int t) { swiglu(i0, i1, t); });
  section.start(DI_PROFILE_SECTION("moe.w2"));
  n = 0;
  for (ExpertWork& e : work) {
    if (!e.y) e.y = scratch.take<float>(e.M * e.w->w2.rows).data();
    products[n++] = {e.g, e.M, &e.w->w2, e.y};
  }
  run_products(cfg, num, products.data(), n);
}


// Streaming: asks for the experts the layer after m will choose while m's own are computed.
// A hash-routed next layer's follow from the tokens; a gate-routed one's are predicted by its
// gate applied to m's input x (the next layer's input differs by one sublayer's residual).
// Only this rank's experts; nothing here changes an output.
void read_ahead_next_layer(const Config& cfg, const Numerics& num, ExpertCache& cache, const MoeWeights& m,
                           const ExpertSplit& split, const float* x, const int32_t* tokens, int64_t S) {
  const MoeWeights* next = cache.next_of(&m);
  if (!next) return;
  const int64_t E = cfg.n_routed_experts, K = cfg.n_activated_experts;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<uint8_t> wanted = scratch.take_zeroed<uint8_t>(E);
  if (!next->tid2eid.empty()) {
    for (int64_t t = 0; t < S; ++t)
      for (int64_t k = 0; k < K; ++k) wanted[next->tid2eid[size_t(int64_t(tokens[t]) * K + k)]] = 1;
  } else {
    std::span<float> logits = scratch.take<float>(S * E), weights = scratch.take<float>(K);
    std::span<int32_t> chosen = scratch.take<int32_t>(K);
    num.backend->linear_f32(x, S, next->gate, logits.data());
    for (int64_t t = 0; t < S; ++t) {
      route_token(cfg, *next, false, &logits[t * E], tokens[t], chosen.data(), weights.data());
      for (int32_t e : chosen) wanted[e] = 1;
    }
  }
  std::vector<int32_t> ids;
  for (int64_t e = 0; e < E; ++e)
    if (wanted[e] && split.owns(e)) ids.push_back(int32_t(e));
  // No more than half the cache ahead: the rest holds what runs now.
  if (int64_t(ids.size()) > cache.slots() / 2) ids.resize(size_t(cache.slots() / 2));
  if (next->tid2eid.empty())
    cache.predict(next, ids);
  else
    cache.read_ahead(next, ids);
}

}  // namespace

RoutingTrace* set_routing_trace(RoutingTrace* trace) { return std::exchange(routing_trace, trace); }

ExpertSplit split_experts(dist::Communicator* comm, int64_t n_experts, int64_t vocab) {
  ExpertSplit s;
  s.comm = comm;
  const int64_t n = comm ? comm->size() : 1;
  if (n > n_experts)
    throw std::invalid_argument("expert parallel over " + std::to_string(n) + " ranks needs at least as many routed experts; the checkpoint has " +
                                std::to_string(n_experts));
  for (int64_t r = 0; r <= n; ++r) {
    s.first.push_back(r * (n_experts / n) + std::min(r, n_experts % n));
    s.head_first.push_back(r * (vocab / n) + std::min(r, vocab % n));
  }
  return s;
}

void moe_forward(const Config& cfg, const Numerics& num, const LayerWeights& L, const ExpertSplit& split,
                 const float* x, const int32_t* tokens, int64_t S, float* out, ExpertCache* cache) {
  const MoeWeights& m = L.ffn;
  const int64_t E = cfg.n_routed_experts, K = cfg.n_activated_experts, d = cfg.dim;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  profile::Phase section;
  section.start(DI_PROFILE_SECTION("moe.router"));
  std::span<float> logits = scratch.take<float>(S * E);
  num.backend->linear_f32(x, S, m.gate, logits.data());

  // Each token's choices: choice t * K + k is its k-th expert and routing weight.
  std::span<int32_t> chosen_expert = scratch.take<int32_t>(S * K);
  std::span<float> chosen_weight = scratch.take<float>(S * K);
  for (int64_t t = 0; t < S; ++t)
    route_token(cfg, m, L.hash_routed, &logits[t * E], tokens[t], &chosen_expert[t * K], &chosen_weight[t * K]);
  if (routing_trace) record_routing(*routing_trace, L.id, E, chosen_expert);

  // Group the choices by expert (a stable counting sort): expert e's rows are the slots
  // [first_slot[e], first_slot[e + 1]), its tokens in chunk order. Experts run in increasing
  // id, and each token's fp32 accumulator receives its contributions in that order (the
  // reference's order).
  std::span<int64_t> first_slot = scratch.take_zeroed<int64_t>(E + 1);
  for (int32_t e : chosen_expert) ++first_slot[e + 1];
  for (int64_t e = 0; e < E; ++e) first_slot[e + 1] += first_slot[e];
  std::span<int64_t> slot_token = scratch.take<int64_t>(S * K), next_slot = scratch.take_copy(first_slot.data(), E);
  std::span<float> slot_weight = scratch.take<float>(S * K);
  for (int64_t i = 0; i < S * K; ++i) {
    const int64_t slot = next_slot[chosen_expert[i]]++;
    slot_token[slot] = i / K;
    slot_weight[slot] = chosen_weight[i];
  }

  // This rank's experts [e_lo, e_hi) (all of them in one process) own the slots
  // [first_slot[e_lo], first_slot[e_hi]): one block of the slot array.
  const bool distributed = split.active();
  const int64_t e_lo = distributed ? split.first[size_t(split.comm->rank())] : 0;
  const int64_t e_hi = distributed ? split.first[size_t(split.comm->rank()) + 1] : E;
  // Gathered rows per slot of this rank; one work item per expert with rows (id order), then
  // the shared expert. One token (decode): every expert reads x itself, so the backend
  // prepares (act-quantises) it once for all of them instead of once per gathered copy.
  std::span<float> gathered = scratch.take<float>(S == 1 ? 0 : S * K * d);
  if (S > 1)
    for (int64_t i = first_slot[e_lo]; i < first_slot[e_hi]; ++i) std::copy_n(x + slot_token[i] * d, d, &gathered[i * d]);
  // Every expert writes its rows straight into slot_y [S * K, dim] (slot order), the
  // allgatherv's buffer when distributed.
  std::span<float> slot_y = scratch.take<float>(S * K * d);
  int64_t n_active = 0;
  for (int64_t e = e_lo; e < e_hi; ++e) n_active += first_slot[e + 1] > first_slot[e];
  std::span<ExpertWork> work = scratch.take<ExpertWork>(n_active + (m.has_shared ? 1 : 0));
  size_t k = 0;
  for (int64_t e = e_lo; e < e_hi; ++e) {
    if (first_slot[e + 1] == first_slot[e]) continue;
    ExpertWork& w = work[k++];
    w.w = &m.experts[size_t(e)];
    w.x = S == 1 ? x : &gathered[first_slot[e] * d];
    w.M = first_slot[e + 1] - first_slot[e];
    w.row_weight = &slot_weight[first_slot[e]];
    w.y = &slot_y[first_slot[e] * d];
  }
  ExpertWork* shared = nullptr;
  if (m.has_shared) {
    shared = &work[k];
    shared->w = &m.shared;
    shared->x = x;
    shared->M = S;
  }
  // Streamed experts (a checkpoint larger than its memory budget): this layer's are pinned
  // and read if missing, the next layer's asked for ahead, and the routed experts computed in
  // the order they arrive (each writes only its own slot rows: the same out in any order).
  const bool streamed = cache && cache->streams(&m);
  std::optional<ExpertCache::Step> step;
  if (streamed) {
    std::span<int32_t> ids = scratch.take<int32_t>(int64_t(k));
    for (size_t i = 0; i < k; ++i) ids[i] = int32_t(work[i].w - m.experts.data());
    step.emplace(*cache, &m, ids);
    read_ahead_next_layer(cfg, num, *cache, m, split, x, tokens, S);
  }
  auto run_routed = [&] {
    if (!streamed) return experts_forward(cfg, num, work.first(k));
    std::vector<int32_t> ready;
    std::span<ExpertWork> wave = scratch.take<ExpertWork>(int64_t(k));
    while (step->next(ready)) {
      for (size_t i = 0; i < ready.size(); ++i) {
        wave[i] = work[size_t(ready[i])];
        wave[i].w = &step->weights(ready[i]);
      }
      experts_forward(cfg, num, wave.first(ready.size()));
      for (int32_t i : ready) step->release(i);
      ready.clear();
    }
  };
  section.start(DI_PROFILE_SECTION("moe.experts"));
  if (!distributed && !streamed) {
    experts_forward(cfg, num, work);
  } else if (!distributed) {
    if (shared) experts_forward(cfg, num, std::span<ExpertWork>(shared, 1));  // while the first reads land
    run_routed();
  } else {
    // Routed experts first; their outputs travel while the (replicated) shared expert runs.
    run_routed();
    const int64_t n_ranks = split.comm->size();
    std::span<int64_t> counts = scratch.take<int64_t>(n_ranks), displs = scratch.take<int64_t>(n_ranks);
    for (int64_t r = 0; r < n_ranks; ++r) {
      displs[r] = first_slot[split.first[size_t(r)]] * d;
      counts[r] = first_slot[split.first[size_t(r) + 1]] * d - displs[r];
    }
    split.comm->allgatherv_begin(slot_y.data(), counts, displs);
    if (shared) experts_forward(cfg, num, std::span<ExpertWork>(shared, 1));
    section.start(DI_PROFILE_SECTION("moe.comm"));
    split.comm->allgatherv_end();
  }
  section.start(DI_PROFILE_SECTION("moe.combine"));
  // Each token's fp32 accumulator takes its contributions in increasing expert id (slot
  // order), then the shared expert (the reference's order), on every rank alike.
  std::span<float> acc = scratch.take_zeroed<float>(S * d);
  for (int64_t i = 0; i < S * K; ++i)
    for (int64_t c = 0; c < d; ++c) acc[slot_token[i] * d + c] += slot_y[i * d + c];
  if (shared)
    for (int64_t i = 0; i < S * d; ++i) acc[i] += shared->y[i];
  for (int64_t i = 0; i < S * d; ++i) out[i] = num.bf16(acc[i]);
}

}  // namespace deepinfer::v4
