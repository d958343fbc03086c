// One DSpark drafting step as the tests take it: the backbone over tokens[0..p] in chunks
// (drafting now and then on the way, so the stages' rings catch up in pieces), the greedy
// next token y, then a whole block drafted after it with its trace.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/model.h"

namespace deepinfer::testing {

struct Drafted {
  int32_t y = -1;
  std::vector<int32_t> drafts;
  v4::DsparkTrace trace;
};

inline Drafted draft_after(const v4::Model& m, std::vector<int32_t> tokens, const v4::Numerics& num, int64_t chunk) {
  const v4::Config& c = m.config();
  const int64_t V = c.vocab_size, n = int64_t(tokens.size()), width = m.draft_input_width();
  auto st = m.new_sequence();
  v4::DrafterState ds;
  std::vector<float> logits(size_t(chunk * V)), taps;
  Drafted out;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t S = std::min(chunk, n - i);
    m.forward(tokens.data() + i, S, st, num, logits.data(), &taps);
    ds.keep(taps.data(), i, S, width, c.window);
    if (i + S < n) {
      std::vector<int32_t> seen(tokens.begin(), tokens.begin() + i + S + 1);
      m.draft_dspark(st, ds, seen, 1, num);
    } else {
      const float* last = logits.data() + (S - 1) * V;
      out.y = int32_t(std::max_element(last, last + V) - last);
    }
  }
  tokens.push_back(out.y);
  out.drafts = m.draft_dspark(st, ds, tokens, c.dspark_block_size, num, &out.trace);
  return out;
}

}  // namespace deepinfer::testing
