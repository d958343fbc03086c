// The DSpark drafter of V4.1 (docs/model/mtp_dspark.md §2) and of the V4 0731/0813 refreshes (§3): the
// stages' window rings hold keys made from the backbone's taps at every verified position; a
// draft is one forward of a block [pending token, noise, ...] through the stages (every row
// sees the whole block), the LM head plus a Markov bias chained over the drafts, and a
// confidence per row. The releases differ only by their rules (release.h): staggered mHC or a
// final hc_head, where the taps are taken (forward.cpp), the Markov tables' names (weights.cpp).
#include <algorithm>
#include <stdexcept>

#include "core/profile.h"
#include "model/deepseek_v4/hyper_connections.h"
#include "model/deepseek_v4/layer_ops.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

Model::Drafter Model::drafter() const {
  if (cfg_.has_dspark() && !w_.dspark.stages.empty()) return Drafter::kDspark;
  if (release_rules(cfg_).drafting == Drafting::kMtpModule && !w_.mtp.empty()) return Drafter::kMtp;
  return Drafter::kNone;
}

Model::DraftCosts Model::draft_costs() const {
  DraftCosts d;
  if (drafter() == Drafter::kMtp) d.per_draft = mtp_draft_cost(cfg_, w_);
  if (drafter() == Drafter::kDspark) d.per_step = dspark_draft_cost(cfg_, w_);
  d.verify_per_token = verify_token_cost(cfg_, w_);
  return d;
}

int64_t Model::draft_input_width() const {
  if (drafter() == Drafter::kDspark) return int64_t(cfg_.dspark_target_layers.size()) * cfg_.dim;
  return cfg_.hc_mult * cfg_.dim;
}

std::vector<int32_t> Model::draft(SequenceState& st, DrafterState& ds, std::span<const int32_t> tokens, int64_t k,
                                  const Numerics& num) const {
  switch (drafter()) {
    case Drafter::kMtp:
      return draft_mtp(st, ds, tokens, k, num);
    case Drafter::kDspark:
      return draft_dspark(st, ds, tokens, k, num);
    case Drafter::kNone:
      break;
  }
  return {};
}

void Model::dspark_fill_rings(const float* taps, int64_t n, int64_t pos0, SequenceState& st, const Numerics& num) const {
  const Config& c = cfg_;
  const DsparkWeights& w = w_.dspark;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> main_x = scratch.take<float>(n * c.dim);
  linear_quantized(c, num, taps, n, w.main_proj, main_x.data());
  for (int64_t t = 0; t < n; ++t)
    rms_norm(&main_x[t * c.dim], w.main_norm.data(), c.dim, float(c.norm_eps), num, &main_x[t * c.dim]);
  for (size_t s = 0; s < w.stages.size(); ++s)
    write_window_keys(c, num, w.stages[s], ropes_[size_t(c.n_layers) + s], main_x.data(), n, pos0,
                      st.mtp_layers[s]);
}


std::vector<int32_t> Model::draft_dspark(SequenceState& st, DrafterState& ds, std::span<const int32_t> tokens,
                                         int64_t k, const Numerics& num, DsparkTrace* trace) const {
  DI_PROFILE("dspark.draft");
  std::vector<int32_t> out;
  const Config& c = cfg_;
  const DsparkWeights& w = w_.dspark;
  if (drafter() != Drafter::kDspark || (k < 1 && !trace)) return out;
  const int64_t width = draft_input_width(), n = st.n_past, held = int64_t(ds.rows.size()) / width;
  if (int64_t(tokens.size()) != n + 1) return out;
  // The rings must reach position n - 1 (the last one the backbone processed).
  if (ds.drafter_next < n) {
    if (held == 0 || ds.rows_pos0 + held != n) return out;
    const int64_t start = std::max({ds.drafter_next, ds.rows_pos0, n - c.window});
    dspark_fill_rings(ds.rows.data() + (start - ds.rows_pos0) * width, n - start, start, st, num);
    ds.drafter_next = n;
    ds.rows.clear();
  }

  const int64_t B = c.dspark_block_size, hc = c.hc_mult, d = c.dim, V = c.vocab_size, R = c.dspark_markov_rank;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<int32_t> block = scratch.take<int32_t>(B);
  block[0] = tokens[size_t(n)];
  for (int64_t i = 1; i < B; ++i) block[i] = int32_t(c.dspark_noise_token_id);
  std::span<float> X = scratch.take<float>(B * hc * d), Xn = scratch.take<float>(B * hc * d);
  std::span<float> row = scratch.take<float>(d);
  for (int64_t i = 0; i < B; ++i) {
    weight_decode_row(w_.embed, block[i], row.data());
    for (int64_t h = 0; h < hc; ++h) std::copy_n(row.data(), d, &X[(i * hc + h) * d]);
  }
  // Staggered mHC (V4.1) carries each row's pre from site to site (one-hot at the start: the
  // streams are equal) and collapses with the last one; V4 stages are ordinary blocks and the
  // last stage's hc_head collapses (docs/model/mtp_dspark.md §3.4).
  const bool staggered = release_rules(c).staggered_mhc;
  std::span<float> pre = scratch.take_zeroed<float>(B * hc);
  for (int64_t i = 0; i < B; ++i) pre[i * hc] = 1.0f;
  float* carry_pre = staggered ? pre.data() : nullptr;
  for (size_t s = 0; s < w.stages.size(); ++s) {
    Segment seg{0, B, n, &st.mtp_layers[s]};
    seg.dspark_block = true;
    block_forward(w.stages[s], ropes_[size_t(c.n_layers) + s], X.data(), block.data(), B, {&seg, 1}, num, Xn.data(),
                  carry_pre, true);
    std::swap(X, Xn);
  }
  // The LM head and the Markov head chain only the rows that become drafts (the block's rows
  // are independent from here on; a trace wants them all).
  const int64_t rows = trace ? B : std::min(k, B);
  if (!staggered && trace) hc_head_pre(X.data(), rows, w.hc_head, hc, d, c, num, pre.data());
  std::span<float> logits = scratch.take<float>(rows * V);
  head_forward(X.data(), rows, w.hc_head, w.norm, num, logits.data(), carry_pre);

  // The Markov head chains the drafts: row i's bias comes from the token drafted before it.
  std::span<float> m = scratch.take<float>(R), bias = scratch.take<float>(V);
  std::span<float> hm = trace ? scratch.take<float>(d + R) : std::span<float>();
  int32_t prev = block[0];
  for (int64_t i = 0; i < rows; ++i) {
    weight_decode_row(w.markov_embed, prev, m.data());
    num.backend->linear_f32(m.data(), 1, w.markov_head, bias.data());
    float* li = &logits[i * V];
    for (int64_t v = 0; v < V; ++v) li[v] += bias[v];
    prev = greedy_token(li, V);
    if (i < k) out.push_back(prev);
    if (trace) {  // confidence of row i: the un-normed collapsed stream and the Markov row
      hc_collapse(&X[i * hc * d], &pre[i * hc], hc, d, num, hm.data());
      std::copy(m.begin(), m.end(), hm.begin() + d);
      float conf = 0.0f;
      num.backend->linear_f32(hm.data(), 1, w.confidence, &conf);
      trace->confidence.push_back(conf);
    }
  }
  if (trace) trace->logits.assign(logits.begin(), logits.begin() + rows * V);
  return out;
}

}  // namespace deepinfer::v4
