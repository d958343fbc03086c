// How many tokens a request drafts each step (speculative decoding). Verifying K drafts
// costs about one step plus K times (draft_cost + verify_cost) of a plain decode step, plus
// step_cost once when K > 0 (a drafter that makes all its drafts in one forward), and
// yields 1 + a + a^2 + ... + a^K tokens on average when each draft is accepted with
// probability a. The policy keeps a running estimate of a (decayed counts of accepted and
// rejected drafts) and picks the K with the best tokens per cost; when that is K = 0 it
// stops drafting and probes again with one draft after a cool-down that doubles with every
// probe that still says no (so a useless drafter costs a vanishing fraction of the steps).
// The first cool-down is long enough that a useless probe costs at most ~2% of the steps it
// waited (16 steps, more for a costly drafter: an MTP draft that reads the whole head).
// Deterministic: the same acceptance history gives the same draft lengths.
// A request starts from a prior acceptance: the engine's recent acceptance over all requests
// once it has seen enough drafts (AcceptanceHistory), so under a useless drafter a new request
// does not pay to learn it again.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace deepinfer::engine {

class DraftPolicy {
 public:
  // max_k: the most drafts per step (0: never draft); fixed_k > 0: always draft that many
  // (no adaptation). draft_cost, verify_cost: per draft token, step_cost: per step that
  // drafts, in plain decode steps.
  // prior: the acceptance assumed before any draft of this request was verified.
  DraftPolicy(int64_t max_k, int64_t fixed_k, double draft_cost, double verify_cost, double step_cost = 0.0,
              double prior = kDefaultPrior)
      : max_k_(std::max<int64_t>(0, max_k)),
        fixed_k_(std::min(fixed_k, max_k_)),
        per_token_(std::max(0.0, draft_cost) + std::max(0.0, verify_cost)),
        per_step_(std::max(0.0, step_cost)),
        first_backoff_(std::max(kFirstBackoff, int64_t(std::min(std::ceil((per_step_ + per_token_) / kProbeShare),
                                                                 double(kMaxBackoff))))),
        prior_successes_(std::clamp(prior, 0.0, 1.0) * kPriorTrials),
        backoff_(first_backoff_) {}

  // Before a request has a history of its own: an optimistic guess (drafters are trained to
  // be right most of the time), which a few rejections correct.
  static constexpr double kDefaultPrior = 0.6;

  // Draft length for the next step.
  int64_t next() {
    if (max_k_ == 0) return 0;
    if (fixed_k_ > 0) return fixed_k_;
    if (cooldown_ > 0) {
      --cooldown_;
      return cooldown_ == 0 ? 1 : 0;  // the probe
    }
    const int64_t k = best_k();
    if (k == 0) {
      cooldown_ = backoff_;
      backoff_ = std::min<int64_t>(backoff_ * 2, kMaxBackoff);
    } else {
      backoff_ = first_backoff_;
    }
    return k;
  }

  // The cool-down after the first "no" (then doubled while probes fail).
  int64_t first_backoff() const { return first_backoff_; }

  // The outcome of a verify step: `drafted` drafts, the first `accepted` of them taken.
  void observe(int64_t drafted, int64_t accepted) {
    if (drafted <= 0) return;
    const double trials = double(accepted) + (accepted < drafted ? 1.0 : 0.0);
    successes_ = kDecay * successes_ + double(accepted);
    trials_ = kDecay * trials_ + trials;
  }

  double acceptance() const { return (successes_ + prior_successes_) / (trials_ + kPriorTrials); }

  // Expected tokens per unit of cost with k drafts.
  double value(int64_t k) const {
    const double a = acceptance();
    double tokens = 0.0, ak = 1.0;
    for (int64_t i = 0; i <= k; ++i, ak *= a) tokens += ak;
    return tokens / (1.0 + (k > 0 ? per_step_ : 0.0) + double(k) * per_token_);
  }

 private:
  int64_t best_k() const {
    int64_t best = 0;
    for (int64_t k = 1; k <= max_k_; ++k)
      if (value(k) > value(best) * 1.02) best = k;  // a margin: near-ties go to the cheaper
    return best;
  }

  static constexpr double kDecay = 0.9, kPriorTrials = 2.0;
  static constexpr double kProbeShare = 0.02;  // a probe's cost / the steps before it
  static constexpr int64_t kFirstBackoff = 16, kMaxBackoff = 256;
  int64_t max_k_, fixed_k_;
  double per_token_, per_step_;
  int64_t first_backoff_;
  double prior_successes_;
  double successes_ = 0.0, trials_ = 0.0;
  int64_t cooldown_ = 0, backoff_;
};

// The engine's acceptance over its recent drafts (all requests; decayed counts, so it follows
// a change of workload), the prior of new requests once it rests on enough drafts.
class AcceptanceHistory {
 public:
  void observe(int64_t drafted, int64_t accepted) {
    if (drafted <= 0) return;
    successes_ = kDecay * successes_ + double(accepted);
    trials_ = kDecay * trials_ + double(accepted) + (accepted < drafted ? 1.0 : 0.0);
  }
  double prior() const { return trials_ >= kMinTrials ? successes_ / trials_ : DraftPolicy::kDefaultPrior; }

 private:
  static constexpr double kDecay = 0.98, kMinTrials = 8.0;
  double successes_ = 0.0, trials_ = 0.0;
};

}  // namespace deepinfer::engine
