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
// A request's draft length starts at 1 and doubles with every verify step that took all its
// drafts (slow start), so a drafter that does not match the text is found out by one cheap
// draft, not by a full block of them.
// The costs start as estimates from bytes read (Model::draft_costs) and are replaced by what
// DraftCostMeter measures on the machine (on AVX2 the drafter's products are compute-bound
// and cost more than their bytes say).
// Deterministic: the same acceptance history and costs give the same draft lengths.
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
        verify_cost_(std::max(0.0, verify_cost)),
        prior_successes_(std::clamp(prior, 0.0, 1.0) * kPriorTrials) {
    set_costs(draft_cost, step_cost);
    backoff_ = first_backoff_;
  }

  // New cost figures (in plain decode steps), e.g. measured ones: per draft token and per
  // drafting step. The verify cost per token stays.
  void set_costs(double draft_cost, double step_cost) {
    per_token_ = std::max(0.0, draft_cost) + verify_cost_;
    per_step_ = std::max(0.0, step_cost);
    first_backoff_ = std::max(kFirstBackoff, int64_t(std::min(std::ceil((per_step_ + per_token_) / kProbeShare),
                                                              double(kMaxBackoff))));
    backoff_ = std::max(backoff_, first_backoff_);
  }

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
    const int64_t k = std::min(best_k(), cap_);
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
    if (accepted >= drafted && drafted >= cap_) cap_ = std::min(max_k_, cap_ * 2);
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
  double verify_cost_;
  double per_token_ = 0.0, per_step_ = 0.0;
  int64_t first_backoff_ = kFirstBackoff;
  double prior_successes_;
  double successes_ = 0.0, trials_ = 0.0;
  int64_t cooldown_ = 0, backoff_ = 0;
  int64_t cap_ = 1;  // slow start: the most drafts the next step may take
};

// What drafting costs on this machine, in plain decode steps: decayed means of the seconds of
// plain steps (one token per sequence, nothing drafted) and of drafter calls, per call and
// per drafted token. Until both have been seen the byte-count estimates stand.
class DraftCostMeter {
 public:
  void plain_step(double seconds) { add(plain_, plain_n_, seconds); }
  // One drafter call that drafted k tokens in `seconds`.
  void draft_call(int64_t k, double seconds) {
    if (k <= 0) return;
    add(call_, call_n_, seconds);
    add(per_draft_, per_draft_n_, seconds / double(k));
  }
  bool measured() const { return plain_n_ >= kMinPlain && call_n_ >= 1; }
  // A drafter whose drafts come from one forward (DSpark): its cost per drafting step; one
  // that runs a forward per draft (MTP): its cost per draft. Else the given estimate.
  double step_cost(double estimate) const { return measured() ? call_ / plain_ : estimate; }
  double draft_cost(double estimate) const { return measured() ? per_draft_ / plain_ : estimate; }

 private:
  static void add(double& mean, int64_t& n, double x) {
    mean = n == 0 ? x : kKeep * mean + (1.0 - kKeep) * x;
    ++n;
  }
  static constexpr double kKeep = 0.8;
  static constexpr int64_t kMinPlain = 3;
  double plain_ = 0.0, call_ = 0.0, per_draft_ = 0.0;
  int64_t plain_n_ = 0, call_n_ = 0, per_draft_n_ = 0;
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

// The policy's costs from what the meter measured, where it has: a drafter whose drafts come
// from one forward per step (DSpark: a step cost) or from one forward per draft (MTP).
inline void apply_measured_costs(DraftPolicy& policy, const DraftCostMeter& meter, double draft_estimate,
                                 double step_estimate) {
  if (!meter.measured()) return;
  if (step_estimate > 0.0) policy.set_costs(draft_estimate, meter.step_cost(step_estimate));
  else policy.set_costs(meter.draft_cost(draft_estimate), step_estimate);
}

}  // namespace deepinfer::engine
