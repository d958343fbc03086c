#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace deepinfer::engine {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Descending value, ties to the lower id: the one total order every choice here uses.
struct ByValueDesc {
  const float* x;
  bool operator()(int32_t a, int32_t b) const { return x[a] > x[b] || (x[a] == x[b] && a < b); }
};
}  // namespace

// A branch-free exponent test over the bits first, so the common all-finite case is one
// vectorised pass.
int64_t first_nonfinite(const float* row, int64_t n) {
  uint32_t any = 0;
  for (int64_t j = 0; j < n; ++j) {
    uint32_t b;
    std::memcpy(&b, row + j, 4);
    any |= uint32_t((b & 0x7f800000u) == 0x7f800000u);
  }
  if (!any) return -1;
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(row[j])) return j;
  return -1;
}

GeneratedToken raw_logprob(const float* logits, int64_t vocab, int32_t token, int32_t n_top,
                           std::vector<int32_t>& scratch) {
  auto val = [&](int64_t i) { return std::isnan(logits[i]) ? kNegInf : logits[i]; };
  float m = kNegInf;
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, val(i));
  double z = 0.0;
  if (m != kNegInf)
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(double(val(i)) - double(m));
  const double lse = m == kNegInf ? 0.0 : double(m) + std::log(z);
  auto lp = [&](int64_t i) { return val(i) == kNegInf ? kNegInf : float(double(val(i)) - lse); };
  GeneratedToken g;
  g.token = token;
  g.logprob = lp(token);
  const int64_t n = std::min<int64_t>(std::max(n_top, 0), vocab);
  if (n == 0) return g;
  scratch.resize(size_t(vocab));
  for (int32_t i = 0; i < vocab; ++i) scratch[size_t(i)] = i;
  auto better = [&](int32_t a, int32_t b) { return val(a) > val(b) || (val(a) == val(b) && a < b); };
  std::partial_sort(scratch.begin(), scratch.begin() + n, scratch.end(), better);
  for (int64_t k = 0; k < n; ++k) g.top.push_back({scratch[size_t(k)], lp(scratch[size_t(k)])});
  return g;
}

double rng_uniform(Rng& rng) { return double(rng() >> 11) * 0x1.0p-53; }

Sampler::Sampler(int64_t vocab_size)
    : vocab_(vocab_size), x_(size_t(vocab_size)), mask_(size_t((vocab_size + 63) / 64)) {
  order_.reserve(size_t(vocab_size));
  values_.reserve(size_t(vocab_size));
}

int32_t Sampler::apply_constraint(const SamplingParams& p) {
  if (!p.constraint) return -1;
  std::fill(mask_.begin(), mask_.end(), 0);
  if (!p.constraint->allowed(mask_.data(), vocab_)) return -1;
  int32_t first = -1;
  for (int64_t w = 0; w < int64_t(mask_.size()); ++w) {
    const uint64_t bits = mask_[size_t(w)];
    if (first < 0 && bits) first = int32_t(w * 64 + __builtin_ctzll(bits));
    if (bits == ~uint64_t(0)) continue;
    const int64_t end = std::min<int64_t>(vocab_, (w + 1) * 64);
    for (int64_t i = w * 64; i < end; ++i)
      if (!((bits >> (i - w * 64)) & 1)) x_[size_t(i)] = kNegInf;
  }
  return first;
}

void Sampler::apply_bias_and_penalties(const SamplingParams& p, const PenaltyState& h) {
  for (const auto& [tok, bias] : p.logit_bias)
    if (tok >= 0 && tok < vocab_) x_[size_t(tok)] += bias;
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      float& v = x_[size_t(t)];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    for (int32_t t : h.prompt_tokens) penalise(t);
    for (const auto& [t, c] : h.output_counts)
      if (!h.prompt_tokens.count(t)) penalise(t);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    for (const auto& [t, c] : h.output_counts) x_[size_t(t)] -= p.frequency_penalty * float(c) + p.presence_penalty;
}

void Sampler::apply_filters(const SamplingParams& p) {
  const float m = *std::max_element(x_.begin(), x_.end());
  if (p.min_p > 0.0f) {
    // p_i / p_max < min_p  <=>  x_i - x_max < log(min_p)
    const float thr = m + std::log(p.min_p);
    for (float& v : x_)
      if (v < thr) v = kNegInf;
  }
  if (p.top_k > 0 && p.top_k < vocab_) {
    values_.clear();
    for (float v : x_)
      if (v != kNegInf) values_.push_back(v);
    if (int64_t(values_.size()) > p.top_k) {
      std::nth_element(values_.begin(), values_.begin() + (p.top_k - 1), values_.end(), std::greater<float>());
      const float kth = values_[size_t(p.top_k - 1)];  // ties with the k-th value are kept
      for (float& v : x_)
        if (v < kth) v = kNegInf;
    }
  }
  if (p.top_p < 1.0f) {
    order_.clear();
    for (int32_t i = 0; i < vocab_; ++i)
      if (x_[size_t(i)] != kNegInf) order_.push_back(i);
    std::sort(order_.begin(), order_.end(), ByValueDesc{x_.data()});
    double z = 0.0;
    for (int32_t i : order_) z += std::exp(double(x_[size_t(i)]) - m);
    // Keep the smallest most-likely prefix whose mass reaches top_p (at least one token).
    double cum = 0.0;
    size_t keep = order_.size();
    for (size_t r = 0; r < order_.size(); ++r) {
      cum += std::exp(double(x_[size_t(order_[r])]) - m);
      if (cum >= double(p.top_p) * z) {
        keep = r + 1;
        break;
      }
    }
    for (size_t r = keep; r < order_.size(); ++r) x_[size_t(order_[r])] = kNegInf;
  }
}

int32_t Sampler::draw(Rng& rng) const {
  const float m = *std::max_element(x_.begin(), x_.end());
  double z = 0.0;
  for (float v : x_)
    if (v != kNegInf) z += std::exp(double(v) - m);
  const double u = rng_uniform(rng) * z;
  double acc = 0.0;
  int32_t last = -1;
  for (int32_t i = 0; i < vocab_; ++i) {
    const float v = x_[size_t(i)];
    if (v == kNegInf) continue;
    acc += std::exp(double(v) - m);
    last = i;
    if (acc > u) return i;
  }
  return last < 0 ? 0 : last;  // rounding at the very top of the range
}

double Sampler::log_normalizer() const {
  const float m = *std::max_element(x_.begin(), x_.end());
  if (m == kNegInf) return 0.0;
  double z = 0.0;
  for (float v : x_)
    if (v != kNegInf) z += std::exp(double(v) - m);
  return double(m) + std::log(z);
}

SampleResult Sampler::sample(const float* logits, const SamplingParams& p, const PenaltyState& h, Rng& rng,
                             int32_t draft, bool* accepted) {
  for (int64_t i = 0; i < vocab_; ++i) {
    const float v = logits[i];
    x_[size_t(i)] = std::isnan(v) ? kNegInf : v;  // a NaN logit can never be chosen
  }
  const int32_t first_allowed = apply_constraint(p);
  apply_bias_and_penalties(p, h);
  SampleResult r;
  if (first_allowed >= 0 && *std::max_element(x_.begin(), x_.end()) == kNegInf) {
    // Every allowed token has a NaN (or -inf) logit: take the lowest allowed id rather than
    // a forbidden one. (A constraint that allows nothing leaves the row unmasked.)
    r.token = first_allowed;
  } else if (p.greedy()) {
    r.token = int32_t(std::max_element(x_.begin(), x_.end()) - x_.begin());  // first maximum = lowest id
  } else {
    const float inv_t = 1.0f / p.temperature;
    for (float& v : x_) v *= inv_t;
    apply_filters(p);
    // A draft is proposed with certainty, so rejection sampling against it accepts it with its
    // probability here and otherwise draws from the rest of the distribution: in law the same
    // as one draw from this distribution, accepted when it is the draft. That draw is the one
    // plain decoding makes, so a seeded request samples the same tokens whatever was drafted
    // (draft lengths follow the engine's history of other requests).
    r.token = draw(rng);
  }
  if (accepted) *accepted = draft >= 0 && r.token == draft;
  if (p.logprobs >= 0) {
    const double lse = log_normalizer();
    r.logprob = float(double(x_[size_t(r.token)]) - lse);
    const int64_t n = std::min<int64_t>(p.logprobs, vocab_);
    order_.resize(size_t(vocab_));
    for (int32_t i = 0; i < vocab_; ++i) order_[size_t(i)] = i;
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), ByValueDesc{x_.data()});
    for (int64_t k = 0; k < n; ++k) {
      const int32_t t = order_[size_t(k)];
      const float v = x_[size_t(t)];
      r.top.push_back({t, v == kNegInf ? kNegInf : float(double(v) - lse)});
    }
  }
  if (p.constraint) p.constraint->accept(r.token);
  return r;
}

std::vector<float> Sampler::last_logprobs() const {
  const double lse = log_normalizer();
  std::vector<float> out(x_.size());
  for (size_t i = 0; i < x_.size(); ++i) out[i] = x_[i] == kNegInf ? kNegInf : float(double(x_[i]) - lse);
  return out;
}

}  // namespace deepinfer::engine
