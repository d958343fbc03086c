#include "spec_decode.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "model_cli.h"

namespace deepinfer::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

engine::DraftPolicy make_policy(const v4::Model& m, const SpecDecodeOptions& o) {
  const v4::Model::DraftCosts cost = m.draft_costs();
  return engine::DraftPolicy(o.max_drafts, o.adaptive ? 0 : o.max_drafts, cost.per_draft, cost.verify_per_token,
                             cost.per_step);
}

}  // namespace

SpecDecoder::SpecDecoder(const v4::Model& m, const v4::Numerics& num, const SpecDecodeOptions& o)
    : m_(m), num_(num), o_(o), st_(m.new_sequence()), policy_(make_policy(m, o)), cost_(m.draft_costs()) {}

void SpecDecoder::feed(const std::vector<int32_t>& ids) {
  if (ids.empty()) throw std::invalid_argument("SpecDecoder::feed: no tokens");
  const v4::Config& c = m_.config();
  const int64_t V = c.vocab_size, n = int64_t(ids.size()), pos0 = st_.n_past;
  tokens_.resize(size_t(pos0));  // drop the pending token
  logits_.resize(size_t(V));
  m_.forward_batch({v4::SequenceChunk{ids.data(), n, &st_, logits_.data(), false}}, num_, drafting() ? &streams_ : nullptr);
  if (drafting()) ds_.keep(streams_.data(), pos0, n, m_.draft_input_width(), c.window);
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  tokens_.push_back(greedy_next(logits_.data(), V, pos0 + n - 1));
}

SpecDecodeResult SpecDecoder::generate(int64_t n, const std::function<bool(int32_t)>& on_token) {
  using Drafts = SpecDecodeOptions::Drafts;
  const v4::Config& c = m_.config();
  const int64_t V = c.vocab_size, width = m_.draft_input_width();
  if (o_.drafts != Drafts::kModel && (!o_.oracle || int64_t(o_.oracle->size()) < n))
    throw std::invalid_argument("spec_decode: oracle and wrong drafts need the greedy continuation");
  if (int64_t(tokens_.size()) != st_.n_past + 1) throw std::logic_error("SpecDecoder::generate before feed");
  SpecDecodeResult res;
  if (n <= 0) return res;
  res.tokens.push_back(tokens_.back());
  if (on_token && !on_token(tokens_.back())) return res;

  std::vector<int32_t> chunk;
  v4::SequenceState::Undo undo;
  const auto t0 = std::chrono::steady_clock::now();
  bool go = true;
  while (go && int64_t(res.tokens.size()) < n) {
    const int64_t done = int64_t(res.tokens.size());
    engine::apply_measured_costs(policy_, meter_, cost_.per_draft, cost_.per_step);
    const int64_t k = std::min(policy_.next(), n - done - 1);
    std::vector<int32_t> drafts;
    if (k > 0) {
      if (o_.drafts == Drafts::kOracle) {
        drafts.assign(o_.oracle->begin() + done, o_.oracle->begin() + done + k);
      } else {
        const auto t_draft = std::chrono::steady_clock::now();
        drafts = m_.draft(st_, ds_, tokens_, k, num_);
        meter_.draft_call(k, seconds_since(t_draft));
        if (o_.drafts == Drafts::kWrong)
          for (size_t i = 0; i < drafts.size(); ++i) drafts[i] = int32_t(((*o_.oracle)[size_t(done) + i] + 1) % V);
      }
    }
    const int64_t S = 1 + int64_t(drafts.size());
    chunk.assign(1, tokens_.back());
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    if (S > 1) st_.save_undo(false, st_.n_past, S, &undo);
    logits_.resize(size_t(S * V));
    const int64_t pos0 = st_.n_past;
    const auto t_forward = std::chrono::steady_clock::now();
    m_.forward_batch({v4::SequenceChunk{chunk.data(), S, &st_, logits_.data(), true}}, num_,
                     drafting() ? &streams_ : nullptr);
    if (S == 1) meter_.plain_step(seconds_since(t_forward));
    ++res.forward_steps;
    int64_t emitted = 0, accepted = 0;
    for (int64_t j = 0; j < S && go; ++j) {
      const int32_t t = greedy_next(logits_.data() + j * V, V, pos0 + j);
      tokens_.push_back(t);
      res.tokens.push_back(t);
      ++emitted;
      const bool wanted = !on_token || on_token(t);  // every token is shown, the n-th too
      go = wanted && int64_t(res.tokens.size()) < n;
      if (j + 1 >= S || t != drafts[size_t(j)]) break;
      ++accepted;
    }
    if (emitted < S) st_.undo(undo, emitted);
    if (drafting()) ds_.keep(streams_.data(), pos0, emitted, width, c.window);
    if (S > 1) {
      ++res.verify_steps;
      res.drafted += S - 1;
      res.accepted += accepted;
      policy_.observe(S - 1, accepted);
    }
  }
  res.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

SpecDecodeResult spec_decode(const v4::Model& m, const v4::Numerics& num, const std::vector<int32_t>& prompt, int64_t n,
                             const SpecDecodeOptions& o, const std::function<bool(int32_t)>& on_token) {
  if (n <= 0) return {};
  SpecDecoder dec(m, num, o);
  dec.feed(prompt);
  return dec.generate(n, on_token);
}

}  // namespace deepinfer::cli
