// Drafting with the MTP module (speculative decoding): which positions the module still has
// to see, and the greedy drafts themselves.
#include <algorithm>
#include <stdexcept>

#include "model/deepseek_v4/layer_ops.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::v4 {

void DrafterState::keep(const float* streams, int64_t pos0, int64_t n, int64_t width, int64_t window) {
  int64_t held = int64_t(rows.size()) / width;
  if (held > 0 && rows_pos0 + held != pos0) {  // a gap (positions nobody kept): start over
    rows.clear();
    held = 0;
  }
  const int64_t skip = std::max<int64_t>(0, n - window);  // beyond any later MTP query's window
  if (skip > 0) {
    rows.clear();
    rows_pos0 = pos0 + skip;
  } else if (held == 0) {
    rows_pos0 = pos0;
  }
  rows.insert(rows.end(), streams + skip * width, streams + n * width);
  held = int64_t(rows.size()) / width;
  if (held > window) {
    rows.erase(rows.begin(), rows.begin() + (held - window) * width);
    rows_pos0 += held - window;
  }
}

void DrafterState::drop_from(int64_t pos, int64_t width) {
  const int64_t held = int64_t(rows.size()) / width;
  if (rows_pos0 + held > pos) rows.resize(size_t(std::max<int64_t>(0, pos - rows_pos0) * width));
}


std::vector<int32_t> Model::draft_mtp(SequenceState& st, DrafterState& ds, std::span<const int32_t> tokens, int64_t k,
                                      const Numerics& num) const {
  std::vector<int32_t> out;
  const Config& c = cfg_;
  if (k < 1 || w_.mtp.empty()) return out;
  if (k > kMinRingRows - 1) throw std::logic_error("draft_mtp: more drafts than an undo can take back");
  const int64_t width = c.hc_mult * c.dim, n = st.n_past, held = int64_t(ds.rows.size()) / width;
  // The module at position p reads the backbone's streams at p and the token at p + 1; it
  // has seen positions < drafter_next, and the rows cover rows_pos0 .. n-1.
  if (int64_t(tokens.size()) != n + 1 || held == 0 || ds.rows_pos0 + held != n) return out;
  // After a pause in drafting (the adaptive length's cool-down) the module sees only the last
  // kMaxCatchUp positions: a probe then costs a few rows, not a window's worth; the older rows
  // of its ring stay stale until drafting goes on (drafts only, never the output, depend on it).
  constexpr int64_t kMaxCatchUp = 32;
  const int64_t start = std::max({ds.drafter_next, ds.rows_pos0, n - kMaxCatchUp});
  if (start >= n) return out;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size)), hidden(static_cast<size_t>(width));
  forward_mtp_draft(0, ds.rows.data() + (start - ds.rows_pos0) * width, tokens.data() + start + 1, n - start, start, st,
                    num, logits.data(), hidden.data());
  ds.drafter_next = n;
  ds.rows.clear();
  out.push_back(greedy_token(logits.data(), c.vocab_size));
  if (k == 1) return out;
  // Further drafts run the module on its own output at positions n, n+1, ...: guesses, so
  // its ring rows for them are undone before return (verified positions come next time).
  SequenceState::Undo u;
  st.save_undo(true, n, k - 1, &u);
  for (int64_t i = 1; i < k; ++i) {
    const int32_t prev = out.back();
    forward_mtp_draft(0, hidden.data(), &prev, 1, n + i - 1, st, num, logits.data(), hidden.data());
    out.push_back(greedy_token(logits.data(), c.vocab_size));
  }
  st.undo(u, 0);
  return out;
}

}  // namespace deepinfer::v4
