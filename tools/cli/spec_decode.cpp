#include "spec_decode.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "engine/draft_policy.h"
#include "model_cli.h"

namespace deepinfer::cli {

SpecDecodeResult spec_decode(const v4::Model& m, const v4::Numerics& num, const std::vector<int32_t>& prompt, int64_t n,
                             const SpecDecodeOptions& o, const std::function<bool(int32_t)>& on_token) {
  using Drafts = SpecDecodeOptions::Drafts;
  const v4::Config& c = m.config();
  const int64_t V = c.vocab_size, width = m.draft_input_width(), P = int64_t(prompt.size());
  if (o.drafts != Drafts::kModel && (!o.oracle || int64_t(o.oracle->size()) < n))
    throw std::invalid_argument("spec_decode: oracle and wrong drafts need the greedy continuation");
  SpecDecodeResult res;
  if (n <= 0) return res;
  v4::SequenceState st = m.new_sequence();
  v4::DrafterState ds;
  std::vector<float> logits(static_cast<size_t>(V)), streams;
  m.forward_batch({v4::SequenceChunk{prompt.data(), P, &st, logits.data(), false}}, num, &streams);
  ds.keep(streams.data(), 0, P, width, c.window);
  std::vector<int32_t> tokens = prompt;
  tokens.push_back(greedy_next(logits.data(), V, P - 1));
  res.tokens.push_back(tokens.back());
  if (on_token && !on_token(tokens.back())) return res;

  const bool dspark = m.drafter() == v4::Model::Drafter::kDspark;
  engine::DraftPolicy policy(o.max_drafts, o.adaptive ? 0 : o.max_drafts, dspark ? 0.0 : v4::mtp_draft_cost(c, m.weights()),
                             v4::verify_token_cost(c, m.weights()), dspark ? v4::dspark_draft_cost(c, m.weights()) : 0.0);
  std::vector<int32_t> chunk;
  v4::SequenceState::Undo undo;
  const auto t0 = std::chrono::steady_clock::now();
  bool go = true;
  while (go && int64_t(res.tokens.size()) < n) {
    const int64_t done = int64_t(res.tokens.size());
    const int64_t k = std::min(policy.next(), n - done - 1);
    std::vector<int32_t> drafts;
    if (k > 0) {
      if (o.drafts == Drafts::kOracle) {
        drafts.assign(o.oracle->begin() + done, o.oracle->begin() + done + k);
      } else {
        drafts = m.draft(st, ds, tokens, k, num);
        if (o.drafts == Drafts::kWrong)
          for (size_t i = 0; i < drafts.size(); ++i) drafts[i] = int32_t(((*o.oracle)[size_t(done) + i] + 1) % V);
      }
    }
    const int64_t S = 1 + int64_t(drafts.size());
    chunk.assign(1, tokens.back());
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    if (S > 1) st.save_undo(false, st.n_past, S, &undo);
    logits.resize(size_t(S * V));
    const int64_t pos0 = st.n_past;
    m.forward_batch({v4::SequenceChunk{chunk.data(), S, &st, logits.data(), true}}, num, &streams);
    ++res.forward_steps;
    int64_t emitted = 0, accepted = 0;
    for (int64_t j = 0; j < S && go; ++j) {
      const int32_t t = greedy_next(logits.data() + j * V, V, pos0 + j);
      tokens.push_back(t);
      res.tokens.push_back(t);
      ++emitted;
      const bool wanted = !on_token || on_token(t);  // every token is shown, the n-th too
      go = wanted && int64_t(res.tokens.size()) < n;
      if (j + 1 >= S || t != drafts[size_t(j)]) break;
      ++accepted;
    }
    if (emitted < S) st.undo(undo, emitted);
    ds.keep(streams.data(), pos0, emitted, width, c.window);
    if (S > 1) {
      ++res.verify_steps;
      res.drafted += S - 1;
      res.accepted += accepted;
      policy.observe(S - 1, accepted);
    }
  }
  res.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace deepinfer::cli
