// The routing trace (deepinfer bench's count of the distinct experts a batch reads) and the
// bytes a batched decode step reads, against counts made here from the hash routing table and
// from one token's top-k, and with the trace installed or not the logits are the same.
#include <gtest/gtest.h>

#include <set>

#include "golden.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/routing_trace.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

std::set<int32_t> chosen_set(const RoutingTrace& t, int64_t layer) {
  std::set<int32_t> s;
  if (layer < int64_t(t.chosen.size()))
    for (size_t e = 0; e < t.chosen[size_t(layer)].size(); ++e)
      if (t.chosen[size_t(layer)][e]) s.insert(int32_t(e));
  return s;
}

}  // namespace

TEST(RoutingTrace, CountsTheExpertsTheTokensChose) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  const Config& c = m->config();
  const Weights& w = m->weights();
  const int64_t V = c.vocab_size, K = c.n_activated_experts;
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  Numerics num;
  num.mode = NumericsMode::Float;
  num.backend = cpu.get();
  const auto toks = golden::sequence("tiny-v4-c", "seq300");
  const std::vector<int32_t> history(toks.begin(), toks.begin() + 40);
  const int64_t B = 4;

  // B sequences with distinct histories decode one token each in one forward, traced.
  std::vector<SequenceState> states;
  std::vector<int32_t> next;
  for (int64_t b = 0; b < B; ++b) {
    states.push_back(m->new_sequence());
    m->forward(toks.data() + b * 50, 40, states.back(), num, nullptr);
    next.push_back(toks[size_t(b * 50 + 40)]);
  }
  std::vector<float> traced(B * V), plain(B * V);
  std::vector<SequenceState> copies;
  for (int64_t b = 0; b < B; ++b) {
    copies.push_back(m->new_sequence());
    m->forward(toks.data() + b * 50, 40, copies.back(), num, nullptr);
  }
  std::vector<SequenceChunk> chunks, plain_chunks;
  for (int64_t b = 0; b < B; ++b) {
    chunks.push_back({&next[size_t(b)], 1, &states[size_t(b)], &traced[size_t(b * V)], false});
    plain_chunks.push_back({&next[size_t(b)], 1, &copies[size_t(b)], &plain[size_t(b * V)], false});
  }
  RoutingTrace trace;
  ASSERT_EQ(set_routing_trace(&trace), nullptr);
  m->forward_batch(chunks, num);
  EXPECT_EQ(set_routing_trace(nullptr), &trace);
  m->forward_batch(plain_chunks, num);
  EXPECT_EQ(traced, plain);  // the hook changes no output bit

  std::vector<double> distinct;
  int n_hash = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::set<int32_t> got = chosen_set(trace, l);
    EXPECT_EQ(int64_t(got.size()), trace.distinct(l)) << "layer " << l;
    // Rows per expert: every token's K choices counted once each.
    uint32_t rows = 0;
    for (uint32_t n : trace.chosen[size_t(l)]) rows += n;
    EXPECT_EQ(int64_t(rows), B * K) << "layer " << l;
    distinct.push_back(double(got.size()));
    if (w.layers[size_t(l)].hash_routed) {
      // Hash layers: the union of the tokens' rows of the routing table.
      std::set<int32_t> want;
      for (int32_t t : next)
        for (int64_t k = 0; k < K; ++k) want.insert(w.layers[size_t(l)].ffn.tid2eid[size_t(int64_t(t) * K + k)]);
      EXPECT_EQ(got, want) << "layer " << l;
      // ... each expert as many rows as the table lists it for these tokens.
      std::vector<uint32_t> want_rows(size_t(c.n_routed_experts), 0);
      for (int32_t t : next)
        for (int64_t k = 0; k < K; ++k) ++want_rows[size_t(w.layers[size_t(l)].ffn.tid2eid[size_t(int64_t(t) * K + k)])];
      EXPECT_EQ(trace.chosen[size_t(l)], want_rows) << "layer " << l;
      ++n_hash;
    } else {
      EXPECT_GE(int64_t(got.size()), K) << "layer " << l;
      EXPECT_LE(int64_t(got.size()), std::min(B * K, c.n_routed_experts)) << "layer " << l;
    }
  }
  EXPECT_GT(n_hash, 0);
  EXPECT_EQ(trace.distinct(c.n_layers + 5), 0);
  // Experts by their row count, per layer (for the step's bound below).
  std::vector<std::vector<double>> expert_rows(size_t(c.n_layers), std::vector<double>(size_t(B * K + 1), 0.0));
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (uint32_t n : trace.chosen[size_t(l)]) expert_rows[size_t(l)][n] += 1.0;

  // One token alone chooses K distinct experts in every layer.
  trace.clear();
  set_routing_trace(&trace);
  auto one = m->new_sequence();
  m->forward(&next[0], 1, one, num, nullptr);
  set_routing_trace(nullptr);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::set<int32_t> want;
    if (w.layers[size_t(l)].hash_routed)
      for (int64_t k = 0; k < K; ++k) want.insert(w.layers[size_t(l)].ffn.tid2eid[size_t(int64_t(next[0]) * K + k)]);
    EXPECT_EQ(trace.distinct(l), w.layers[size_t(l)].hash_routed ? int64_t(want.size()) : K) << "layer " << l;
  }

  // Bytes: with K experts per layer and one token, what a decode token reads; each further
  // token adds its embedding row, each further distinct expert its w1, w2 and w3.
  const std::vector<double> k_each(size_t(c.n_layers), double(K));
  EXPECT_NEAR(batch_weight_bytes_per_step(c, w, k_each, 1), double(active_weight_bytes_per_token(c, w)), 1.0);
  double want = batch_weight_bytes_per_step(c, w, k_each, 1) + double(B - 1) * double(matrix_bytes(w.embed)) / double(V);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const ExpertWeights& e = w.layers[size_t(l)].ffn.experts[0];
    want += (distinct[size_t(l)] - double(K)) * double(matrix_bytes(e.w1) + matrix_bytes(e.w2) + matrix_bytes(e.w3));
  }
  EXPECT_NEAR(batch_weight_bytes_per_step(c, w, distinct, B), want, 1e-6 * want);
  EXPECT_THROW(batch_weight_bytes_per_step(c, w, {1.0}, 1), std::invalid_argument);

  // The step's bound: its reads are the bytes above, its multiply-adds B tokens' worth, and
  // each matrix costs the larger of the two, so the bound lies between their max and sum.
  const double bw = 1e10, peak = 4e10;  // about where a 4-row FP8 product balances
  const StepBound sb = batch_step_bound(c, w, expert_rows, B, bw, peak);
  const double bytes = batch_weight_bytes_per_step(c, w, distinct, B);
  const double macs = double(B) * double(active_weight_macs_per_token(c, w));
  EXPECT_NEAR(sb.memory_s * bw, bytes, 1e-6 * bytes);
  EXPECT_NEAR(sb.compute_s * peak, macs, 1e-6 * macs + double(B));
  EXPECT_GE(sb.bound_s, std::max(sb.memory_s, sb.compute_s));
  EXPECT_LE(sb.bound_s, sb.memory_s + sb.compute_s);
  // Neither side binds every matrix at these rates: the bound exceeds the larger side.
  EXPECT_GT(sb.bound_s, 1.0001 * std::max(sb.memory_s, sb.compute_s));
  // Without a compute rate the bound is the reads.
  const StepBound reads = batch_step_bound(c, w, expert_rows, B, bw, 0.0);
  EXPECT_EQ(reads.compute_s, 0.0);
  EXPECT_DOUBLE_EQ(reads.bound_s, reads.memory_s);
  EXPECT_DOUBLE_EQ(reads.memory_s, sb.memory_s);
  EXPECT_THROW(batch_step_bound(c, w, {}, B, bw, peak), std::invalid_argument);
  // FP8 / FP4 / BF16 products at twice the rate: only they get faster (the fp32 mHC mixers do
  // not), so compute time falls, by less than half; the reads stay. The same rate changes nothing.
  const StepBound fast = batch_step_bound(c, w, expert_rows, B, bw, peak, 2 * peak);
  EXPECT_LT(fast.compute_s, sb.compute_s);
  EXPECT_GT(fast.compute_s, 0.5 * sb.compute_s);
  EXPECT_DOUBLE_EQ(fast.memory_s, sb.memory_s);
  // The BF16 head is among them (its rows are the bf16 hc_head output): with that rate
  // unbounded, its time goes, which an fp32 head would keep.
  ASSERT_EQ(w.head.format, WeightFormat::BF16);
  const double head_s = double(B) * double(w.head.rows * w.head.cols) / peak;
  const double bf16_head = batch_step_bound(c, w, expert_rows, B, bw, peak, 1e30).compute_s;
  const_cast<WeightMatrix&>(w.head).format = WeightFormat::F32;  // this test's own model
  const double f32_head = batch_step_bound(c, w, expert_rows, B, bw, peak, 1e30).compute_s;
  const_cast<WeightMatrix&>(w.head).format = WeightFormat::BF16;
  EXPECT_NEAR(f32_head - bf16_head, head_s, 1e-6 * head_s);
  EXPECT_DOUBLE_EQ(batch_step_bound(c, w, expert_rows, B, bw, peak, peak).bound_s, sb.bound_s);
}
