// Our own goldens (tests/data/golden, made by tools/golden/hf_golden.py with Hugging Face
// transformers' deepseek_v4 in fp32) against float numerics. The checkpoints are regenerated
// bit for bit by ./setup.sh into build/golden (sha256 in each manifest).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

class HfGolden : public ::testing::TestWithParam<std::string> {};

std::vector<int32_t> read_sequence(const std::string& set, const std::string& seq) {
  std::ifstream in(std::string(DI_TEST_DATA_DIR) + "/golden/" + set + "/sequences.json");
  return nlohmann::json::parse(in).at(seq).get<std::vector<int32_t>>();
}

}  // namespace

TEST_P(HfGolden, FloatNumericsMatchHuggingFace) {
  const std::string set = GetParam();
  const std::string dir = std::string(DI_GOLDEN_MODELS_DIR) + "/" + set + "/model";
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors"))
      << dir << " is missing: run ./setup.sh (tools/golden/goldens.py regen --out models/golden)";
  auto m = Model::load(dir);
  const int64_t V = m->config().vocab_size;
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  Numerics num;
  num.mode = NumericsMode::Float;
  num.backend = cpu.get();
  const std::string logits_dir = std::string(DI_TEST_DATA_DIR) + "/golden/" + set + "/logits/hf/";
  for (std::string seq : {"seq1", "seq7", "seq40", "seq300"}) {
    auto tokens = read_sequence(set, seq);
    auto st = m->new_sequence();
    std::vector<float> got(tokens.size() * V);
    m->forward(tokens.data(), int64_t(tokens.size()), st, num, got.data());
    auto want = golden::raw<float>(logits_dir + seq + ".prefill.f32");
    ASSERT_EQ(got.size(), want.size()) << seq;
    auto s = golden::compare(got, want, V);
    for (size_t r = 0; r < s.max_abs.size(); ++r) {
      EXPECT_LE(s.max_abs[r], 1e-3) << set << " " << seq << " row " << r;
      EXPECT_TRUE(s.argmax_equal[r]) << set << " " << seq << " row " << r;
    }
    // Greedy continuation through the decode path, row by row against gen.f32.
    auto gen = golden::raw<int32_t>(logits_dir + seq + ".gen.i32");
    auto gen_logits = golden::raw<float>(logits_dir + seq + ".gen.f32");
    ASSERT_EQ(int64_t(gen_logits.size()), int64_t(gen.size()) * V);
    std::vector<float> row(got.end() - V, got.end());
    for (size_t g = 0; g < gen.size(); ++g) {
      if (g > 0) m->forward(&gen[g - 1], 1, st, num, row.data());
      std::vector<float> want_row(gen_logits.begin() + g * V, gen_logits.begin() + (g + 1) * V);
      auto rs = golden::compare(row, want_row, V);
      EXPECT_LE(rs.max_abs[0], 1e-3) << set << " " << seq << " gen row " << g;
      EXPECT_EQ(int32_t(std::max_element(row.begin(), row.end()) - row.begin()), gen[g]) << seq << " gen " << g;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, HfGolden, ::testing::Values("hf-v4-wide", "hf-v4-csa-first"));
