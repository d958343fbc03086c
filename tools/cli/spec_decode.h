// Greedy decoding of one sequence with speculative decoding over the model API, for
// `generate` and `bench` (the server's path is the engine's: EngineCore with ModelRunner;
// both draft with Model::draft and pick draft lengths with engine::DraftPolicy).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

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
  int64_t max_drafts = 3;  // per step
  bool adaptive = true;    // DraftPolicy picks 0..max_drafts; else always max_drafts
  const std::vector<int32_t>* oracle = nullptr;  // the greedy continuation, for kOracle / kWrong
};

struct SpecDecodeResult {
  std::vector<int32_t> tokens;  // the continuation
  int64_t verify_steps = 0, drafted = 0, accepted = 0;
  int64_t forward_steps = 0;    // backbone forward calls while decoding
  double decode_seconds = 0.0;  // from the first generated token to the last
};

// Prefills `prompt` into a fresh sequence and generates n greedy tokens (fewer when on_token
// returns false). Throws std::runtime_error for non-finite logits.
SpecDecodeResult spec_decode(const v4::Model& m, const v4::Numerics& num, const std::vector<int32_t>& prompt, int64_t n,
                             const SpecDecodeOptions& o, const std::function<bool(int32_t)>& on_token = {});

}  // namespace deepinfer::cli
