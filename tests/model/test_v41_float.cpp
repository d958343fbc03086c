// DeepSeek-V4.1 float numerics against an independent float64 numpy model of V4.1
// (tools/golden/v41_numpy.py, goldens in tests/data/golden/np-*):
//   np-tiny-v41-a  the shared tiny-v41-a checkpoint and sequences;
//   np-v41-mix     a regenerated checkpoint with the V4.1 roles elsewhere (ratio-2 source at
//                  layer 0, candidates fewer than the top-k, 4-gram Engram, gate_temp 0.75).
// And float vs the official reference numerics: apart only by what the QDQ steps explain.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

std::string data_dir(const std::string& set) { return std::string(DI_TEST_DATA_DIR) + "/golden/" + set; }

std::vector<int32_t> sequence_of(const std::string& path, const std::string& seq) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).at(seq).get<std::vector<int32_t>>();
}

std::vector<float> float_logits(const Model& m, const std::vector<int32_t>& tokens, const kernels::Backend* be,
                                int64_t chunk = 0) {
  Numerics num;
  num.mode = NumericsMode::Float;
  num.backend = be;
  auto st = m.new_sequence();
  const int64_t S = int64_t(tokens.size()), V = m.config().vocab_size;
  if (chunk <= 0) chunk = S;
  std::vector<float> out(S * V);
  for (int64_t i = 0; i < S; i += chunk) m.forward(tokens.data() + i, std::min(chunk, S - i), st, num, out.data() + i * V);
  return out;
}

// Every row within 1e-4 of the logit std of the numpy model (fp32 against float64 sums), and
// the same argmax.
void expect_rows_match(const std::vector<float>& got, const std::vector<float>& want, int64_t V, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  auto s = golden::compare(got, want, V);
  for (size_t r = 0; r < s.rel.size(); ++r) {
    EXPECT_LE(s.rel[r], 1e-4) << what << " row " << r;
    EXPECT_TRUE(s.argmax_equal[r]) << what << " row " << r;
  }
}

}  // namespace

TEST(V41Float, SharedCheckpointMatchesNumpyModel) {
  const std::string shared = golden::dir("tiny-v41-a");
  auto m = Model::load(shared + "/model");
  const int64_t V = m->config().vocab_size;
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  for (std::string seq : {"seq1", "seq7", "seq40", "seq300"}) {
    auto tokens = golden::sequence("tiny-v41-a", seq);
    auto want = golden::raw<float>(data_dir("np-tiny-v41-a") + "/logits/numpy/" + seq + ".prefill.f32");
    expect_rows_match(float_logits(*m, tokens, cpu.get()), want, V, "cpu " + seq);
    if (seq == "seq40") expect_rows_match(float_logits(*m, tokens, &kernels::ref_backend()), want, V, "ref " + seq);
    // Float vs the official reference numerics (FP8 / FP4 QDQ, bf16 points): close, not equal.
    auto ref = golden::raw<float>(shared + "/reference/" + seq + ".prefill.f32");
    auto s = golden::compare(want, ref, V);
    std::vector<double> rel = s.rel;
    std::sort(rel.begin(), rel.end());
    EXPECT_GT(rel[rel.size() / 2], 1e-3) << seq << ": QDQ should move the logits";
    EXPECT_LT(rel.back(), 0.1) << seq;
  }
}

TEST(V41Float, OtherRolesMatchNumpyModelInPrefillDecodeAndChunks) {
  const std::string dir = std::string(DI_GOLDEN_MODELS_DIR) + "/np-v41-mix/model";
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors"))
      << dir << " is missing: run ./setup.sh (tools/golden/goldens.py regen --out models/golden)";
  auto m = Model::load(dir);
  const Config& c = m->config();
  EXPECT_EQ(c.kv_source_of, (std::vector<int64_t>{0, 0, -1, 3, 3, 3}));
  EXPECT_DOUBLE_EQ(c.gate_temp, 0.75);
  const int64_t V = c.vocab_size;
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  const std::string seqs = data_dir("np-v41-mix") + "/sequences.json";
  for (std::string seq : {"seq1", "seq7", "seq40", "seq200"}) {
    auto tokens = sequence_of(seqs, seq);
    auto want = golden::raw<float>(data_dir("np-v41-mix") + "/logits/numpy/" + seq + ".prefill.f32");
    expect_rows_match(float_logits(*m, tokens, cpu.get()), want, V, seq);
    expect_rows_match(float_logits(*m, tokens, cpu.get(), 3), want, V, seq + " in chunks of 3");
    // Greedy through the decode path against the numpy model's re-prefilled continuation.
    auto gen = golden::raw<int32_t>(data_dir("np-v41-mix") + "/logits/numpy/" + seq + ".gen.i32");
    Numerics num;
    num.mode = NumericsMode::Float;
    num.backend = cpu.get();
    auto st = m->new_sequence();
    std::vector<float> logits(tokens.size() * V), row(V);
    m->forward(tokens.data(), int64_t(tokens.size()), st, num, logits.data());
    row.assign(logits.end() - V, logits.end());
    std::vector<int32_t> got;
    for (size_t g = 0; g < gen.size(); ++g) {
      got.push_back(int32_t(std::max_element(row.begin(), row.end()) - row.begin()));
      m->forward(&got.back(), 1, st, num, row.data());
    }
    EXPECT_EQ(got, gen) << seq;
  }
}
