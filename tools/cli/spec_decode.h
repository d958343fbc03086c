// Greedy decoding of one sequence with speculative decoding over the model API, for `bench`'s
// speculative variants, which replace the drafts (every one accepted / rejected) to measure
// the verify path's bounds. `generate` and `chat` run the Engine as `serve` does (EngineCore
// with ModelRunner); both paths draft with Model::draft and pick lengths with engine::DraftPolicy.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/draft_policy.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::cli {

struct SpecDecodeOptions {
  enum class Drafts {
    kModel,   // the checkpoint's drafter (MTP module or DSpark stages)
    kOracle,  // the true greedy continuation (`oracle`): every draft is accepted
    kWrong,   // the drafter is run (and paid for) but its drafts are replaced by tokens that
              // differ from `oracle`: every draft is rejected
  };
  Drafts drafts = Drafts::kModel;
  int64_t max_drafts = 3;  // per step (0: plain decoding, the drafter never runs)
  bool adaptive = true;    // DraftPolicy picks 0..max_drafts; else always max_drafts
  const std::vector<int32_t>* oracle = nullptr;  // the greedy continuation, for kOracle / kWrong
};

struct SpecDecodeResult {
  std::vector<int32_t> tokens;  // the continuation
  int64_t verify_steps = 0, drafted = 0, accepted = 0;
  int64_t forward_steps = 0;    // backbone forward calls while decoding
  double decode_seconds = 0.0;  // from the first generated token to the last
};

// One sequence decoded with drafts, resumable: feed() appends tokens (a prompt, a later chat
// turn) and generate() continues greedily from them. The sequence state always holds every
// token of history() but the last one, which is the pending token the next step feeds.
class SpecDecoder {
 public:
  SpecDecoder(const v4::Model& m, const v4::Numerics& num, const SpecDecodeOptions& o);

  // Appends ids (at least one) after the tokens in the sequence state and makes the greedy
  // token after them the pending one; the pending token left by generate() is dropped (a
  // caller that keeps it passes it as ids[0]).
  void feed(const std::vector<int32_t>& ids);
  // Tokens in the sequence state.
  int64_t n_fed() const { return st_.n_past; }
  // Emits up to n greedy tokens, the pending one first; stops early when on_token returns false
  // (the token it was shown is still emitted). The oracle of kOracle / kWrong drafts is the
  // continuation of this call. Throws std::runtime_error for non-finite logits.
  SpecDecodeResult generate(int64_t n, const std::function<bool(int32_t)>& on_token = {});

  // The tokens in the sequence state, then the pending token.
  const std::vector<int32_t>& history() const { return tokens_; }

 private:
  bool drafting() const { return o_.max_drafts > 0; }

  const v4::Model& m_;
  const v4::Numerics& num_;
  SpecDecodeOptions o_;
  v4::SequenceState st_;
  v4::DrafterState ds_;
  engine::DraftPolicy policy_;
  v4::Model::DraftCosts cost_;    // the byte-count estimates, until the meter has measured
  engine::DraftCostMeter meter_;  // this machine's cost of a draft, in plain steps
  std::vector<int32_t> tokens_;
  std::vector<float> logits_, streams_;
};

// Prefills `prompt` into a fresh sequence and generates n greedy tokens (fewer when on_token
// returns false).
SpecDecodeResult spec_decode(const v4::Model& m, const v4::Numerics& num, const std::vector<int32_t>& prompt, int64_t n,
                             const SpecDecodeOptions& o, const std::function<bool(int32_t)>& on_token = {});

}  // namespace deepinfer::cli
