// Batch invariance: a sequence's logits do not depend on which other sequences share the step.
#include <gtest/gtest.h>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

// exact: bit-identical logits (row-independent kernels); otherwise within max_rel of each
// row's logit std (fp32 summation order differs between GEMV and GEMM kernels).
void check_batch_invariance(const Model& m, const Numerics& num, bool exact, double max_rel) {
  const int64_t V = m.config().vocab_size;
  auto toks = golden::sequence("tiny-v4-c", "seq300");
  // Three sequences at different points: a decode step at 57, a fresh 37-token prefill,
  // and a 23-token chunk starting at 130 (window wrapped, compressed entries present).
  struct Case {
    int64_t history, n;
    int32_t offset;
  } cases[] = {{57, 1, 0}, {0, 37, 5}, {130, 23, 11}};
  std::vector<SequenceState> alone, batched;
  std::vector<std::vector<int32_t>> chunk_tokens;
  for (const Case& c : cases) {
    std::vector<int32_t> hist(toks.begin() + c.offset, toks.begin() + c.offset + c.history);
    chunk_tokens.emplace_back(toks.begin() + c.offset + c.history, toks.begin() + c.offset + c.history + c.n);
    for (auto* states : {&alone, &batched}) {
      states->push_back(m.new_sequence());
      if (!hist.empty()) m.forward(hist.data(), int64_t(hist.size()), states->back(), num, nullptr);
    }
  }
  std::vector<std::vector<float>> want(3), got(3);
  for (int i = 0; i < 3; ++i) {
    want[i].resize(cases[i].n * V);
    m.forward(chunk_tokens[i].data(), cases[i].n, alone[i], num, want[i].data());
  }
  std::vector<SequenceChunk> chunks;
  for (int i = 0; i < 3; ++i) {
    got[i].resize(cases[i].n * V);
    chunks.push_back({chunk_tokens[i].data(), cases[i].n, &batched[i], got[i].data(), true});
  }
  m.forward_batch(chunks, num);
  for (int i = 0; i < 3; ++i) {
    if (exact) {
      EXPECT_EQ(got[i], want[i]) << "sequence " << i;
    } else {
      auto s = golden::compare(got[i], want[i], V);
      for (size_t r = 0; r < s.rel.size(); ++r) {
        EXPECT_LE(s.rel[r], max_rel) << "sequence " << i << " row " << r;
        EXPECT_TRUE(s.argmax_equal[r]) << "sequence " << i << " row " << r;
      }
    }
    EXPECT_EQ(batched[i].n_past, alone[i].n_past);
  }
  // Last-row-only logits equal the last row of the full output.
  auto st = m.new_sequence();
  std::vector<float> last(V);
  m.forward_batch({SequenceChunk{chunk_tokens[1].data(), cases[1].n, &st, last.data(), false}}, num);
  if (exact) {
    EXPECT_TRUE(std::equal(last.begin(), last.end(), want[1].end() - V));
  }
}

}  // namespace

TEST(BatchInvariance, RefAndCpuKernels) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  for (auto mode : {NumericsMode::Reference, NumericsMode::Float})
    for (const kernels::Backend* be : {&kernels::ref_backend(), static_cast<const kernels::Backend*>(cpu.get())}) {
      Numerics num;
      num.mode = mode;
      num.backend = be;
      SCOPED_TRACE(std::string(be->name()) + " " + numerics_name(mode));
      // Both kernel sets compute each output row with a summation order that does not
      // depend on how many rows share the call (GEMV and GEMM paths alike), so a sequence's
      // logits are bit-identical alone and in a batch: a seeded request samples the same.
      check_batch_invariance(*m, num, true, 0.0);
    }
}
