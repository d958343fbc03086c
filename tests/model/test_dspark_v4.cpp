// The DSpark drafter of DeepSeek-V4-Flash-0731 / V4-Pro-0813 (docs/model/mtp_dspark.md §3):
//   - loading: the stages are recognised from the dspark_* keys (never an MTP module from
//     num_nextn_predict_layers), and every inconsistency is one error naming the key or tensor;
//   - drafting against the independent float64 numpy drafter (tools/golden/v4_dspark_numpy.py,
//     set np-tiny-0731): draft logits, drafts and confidences, and a check that the set tells
//     the right tap convention (layer outputs) from V4.1's (layer inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/thread_pool.h"
#include "dspark_steps.h"
#include "golden.h"
#include "kernels/backend.h"
#include "model/deepseek_v4/model.h"

#include <unistd.h>

using namespace deepinfer;
using namespace deepinfer::v4;
namespace fs = std::filesystem;

namespace {

std::string generated(const std::string& set) { return std::string(DI_GOLDEN_MODELS_DIR) + "/" + set + "/model"; }
std::string data_dir(const std::string& set) { return std::string(DI_TEST_DATA_DIR) + "/golden/" + set; }

std::unique_ptr<Model> load_generated(const std::string& set) {
  const std::string dir = generated(set);
  if (!fs::exists(dir + "/model.safetensors"))
    throw std::runtime_error(dir + " is missing: run ./setup.sh (tools/golden/goldens.py regen --out models/golden)");
  return Model::load(dir);
}

// A copy of a checkpoint whose config.json and safetensors header pass through edit functions.
// The header is rewritten in place, padded with spaces to its old length (the data stays put).
struct EditedCopy {
  fs::path dir;
  EditedCopy(const std::string& from, const std::string& name,
             const std::function<void(nlohmann::json&)>& edit_config,
             const std::function<void(nlohmann::json&)>& edit_header) {
    dir = fs::temp_directory_path() / ("di_dspark_v4_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), dir / e.path().filename());
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    if (edit_config) edit_config(cfg);
    std::ofstream(dir / "config.json", std::ios::trunc) << cfg.dump(1);
    if (!edit_header) return;
    const fs::path shard = dir / "model.safetensors";
    std::string blob;
    {
      std::ifstream in(shard, std::ios::binary);
      blob.assign(std::istreambuf_iterator<char>(in), {});
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(blob.at(size_t(i)));
    nlohmann::json header = nlohmann::json::parse(blob.substr(8, n));
    edit_header(header);
    std::string text = header.dump();
    if (text.size() > n) throw std::runtime_error("edited header grew");
    text.resize(n, ' ');
    blob.replace(8, n, text);
    fs::permissions(shard, fs::perms::owner_write, fs::perm_options::add);
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << blob;
  }
  ~EditedCopy() { fs::remove_all(dir); }
};

void rename_tensor(nlohmann::json& h, const std::string& from, const std::string& to) {
  ASSERT_TRUE(h.contains(from)) << from;
  h[to] = h[from];
  h.erase(from);
}

// The load error of an edited copy of tiny-0731 (empty if it loaded).
std::string load_error(const std::string& name, const std::function<void(nlohmann::json&)>& edit_config,
                       const std::function<void(nlohmann::json&)>& edit_header = nullptr) {
  EditedCopy copy(generated("tiny-0731"), name, edit_config, edit_header);
  try {
    Model::load(copy.dir.string());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DsparkV4, RefreshedCheckpointsLoadWithTheirStages) {
  for (const char* set : {"tiny-0731", "tiny-0813"}) {
    SCOPED_TRACE(set);
    const auto m = load_generated(set);
    const Config& c = m->config();
    EXPECT_FALSE(c.v41());
    EXPECT_TRUE(c.has_dspark());
    EXPECT_TRUE(c.dspark_taps_layer_output());
    EXPECT_EQ(c.n_mtp_layers, 3);  // although config.json says num_nextn_predict_layers: 1
    EXPECT_EQ(m->drafter(), Model::Drafter::kDspark);
    EXPECT_TRUE(m->weights().mtp.empty());
    ASSERT_EQ(m->weights().dspark.stages.size(), 3u);
    // The stages run the backbone's MoE (no dspark expert keys in these configs).
    EXPECT_EQ(c.dspark_n_routed_experts, c.n_routed_experts);
    EXPECT_EQ(c.dspark_n_activated_experts, c.n_activated_experts);
    EXPECT_EQ(int64_t(m->weights().dspark.stages[2].ffn.experts.size()), c.n_routed_experts);
    EXPECT_EQ(c.dspark_block_size, 5);
    EXPECT_EQ(m->draft_input_width(), 3 * c.dim);
    EXPECT_EQ(c.dspark_target_layers.back(), c.n_layers - 1);  // the last tap is the last layer's output
  }
}

TEST(DsparkV4, InconsistentCheckpointsAreOneClearError) {
  auto expect_error = [](const std::string& err, const std::vector<std::string>& parts) {
    ASSERT_FALSE(err.empty()) << "loaded";
    for (const std::string& p : parts) EXPECT_NE(err.find(p), std::string::npos) << err << "\n  lacks: " << p;
  };
  // One compress_ratios entry more than the shard index has stages.
  expect_error(load_error("count", [](nlohmann::json& c) { c["compress_ratios"].push_back(0); }),
               {"4 entries", "holds 3 DSpark stages"});
  // A stage the index has but compress_ratios does not.
  expect_error(load_error("extra_stage", nullptr,
                          [](nlohmann::json& h) { rename_tensor(h, "mtp.2.attn_norm.weight", "mtp.3.attn_norm.weight"); }),
               {"holds 4 DSpark stages", "lists 3"});
  // No entry after the backbone at all.
  expect_error(load_error("no_stage_entries",
                          [](nlohmann::json& c) {
                            c["compress_ratios"] = nlohmann::json::array({0, 4, 128, 4, 128, 0});
                          }),
               {"compress_ratios", "one more entry per stage"});
  expect_error(load_error("stage_ratio", [](nlohmann::json& c) { c["compress_ratios"][7] = 4; }),
               {"compress_ratios", "DSpark stage 1", "must be 0"});
  expect_error(load_error("tap", [](nlohmann::json& c) { c["dspark_target_layer_ids"] = {3, 4, 6}; }),
               {"dspark_target_layer_ids", "layer 6"});
  expect_error(load_error("no_block", [](nlohmann::json& c) { c.erase("dspark_block_size"); }),
               {"dspark_block_size", "missing"});
  // A missing stage tensor and a wrong shape name the tensor.
  expect_error(load_error("missing", nullptr,
                          [](nlohmann::json& h) {
                            rename_tensor(h, "mtp.2.markov_head.markov_w1.weight", "mtp.2.markov_head.markov_q1.weight");
                          }),
               {"mtp.2.markov_head.markov_w1.weight"});
  expect_error(load_error("hc_head", nullptr,
                          [](nlohmann::json& h) { rename_tensor(h, "mtp.2.hc_head_base", "mtp.2.hc_head_bask"); }),
               {"mtp.2.hc_head_base"});
  expect_error(load_error("shape", nullptr,
                          [](nlohmann::json& h) {
                            h["mtp.2.confidence_head.proj.weight"]["shape"] = {2, 144};  // same bytes as [1, 288]
                          }),
               {"mtp.2.confidence_head.proj.weight"});
  // An untouched copy loads (the edits above are what fails).
  EXPECT_EQ(load_error("untouched", nullptr), "");
}

namespace {

struct NumpyStep {
  std::vector<int32_t> tokens, draft_ids, draft_ids_input_taps;
  int32_t y = -1;
  std::vector<double> confidence;
  std::vector<float> logits, logits_input_taps;
};

NumpyStep numpy_step(const std::string& seq) {
  const std::string d = data_dir("np-tiny-0731");
  const auto seqs = nlohmann::json::parse(std::ifstream(d + "/sequences.json"));
  const auto man = nlohmann::json::parse(std::ifstream(d + "/manifest.json")).at("dspark").at(seq);
  NumpyStep s;
  s.tokens = seqs.at(seq).get<std::vector<int32_t>>();
  s.y = man.at("y");
  s.draft_ids = man.at("draft_ids").get<std::vector<int32_t>>();
  s.draft_ids_input_taps = man.at("draft_ids_input_taps").get<std::vector<int32_t>>();
  s.confidence = man.at("confidence").get<std::vector<double>>();
  s.logits = golden::raw<float>(d + "/logits/numpy/" + seq + ".dspark.f32");
  s.logits_input_taps = golden::raw<float>(d + "/logits/numpy/" + seq + ".dspark_input_taps.f32");
  return s;
}

}  // namespace

// Float numerics against the float64 numpy drafter: every block row's logits (Markov bias
// included) within 1e-4 of the row's logit std, the same drafts, the confidences to 1e-4. The
// numpy drafts with the taps at the layers' inputs differ from the right ones by far more
// (> 0.1 std on some row of every sequence), so a wrong tap convention fails this test.
TEST(DsparkV4, FloatDraftsMatchTheNumpyDrafter) {
  const auto m = load_generated("np-tiny-0731");
  const int64_t V = m->config().vocab_size;
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  for (const kernels::Backend* backend : {static_cast<const kernels::Backend*>(cpu.get()), &kernels::ref_backend()}) {
    Numerics num;
    num.mode = NumericsMode::Float;
    num.backend = backend;
    for (const std::string seq : {"seq1", "seq7", "seq12", "seq40"}) {
      SCOPED_TRACE(seq + (backend == cpu.get() ? " cpu" : " ref"));
      const NumpyStep want = numpy_step(seq);
      ASSERT_EQ(want.logits.size(), size_t(5 * V));
      for (int64_t chunk : {int64_t(want.tokens.size()), int64_t(3)}) {
        const deepinfer::testing::Drafted got = deepinfer::testing::draft_after(*m, want.tokens, num, chunk);
        EXPECT_EQ(got.y, want.y);
        std::vector<int32_t> ids{got.y};
        ids.insert(ids.end(), got.drafts.begin(), got.drafts.end());
        EXPECT_EQ(ids, want.draft_ids) << "chunk " << chunk;
        const auto s = golden::compare(got.trace.logits, want.logits, V);
        const auto wrong = golden::compare(got.trace.logits, want.logits_input_taps, V);
        const auto gap = golden::compare(want.logits_input_taps, want.logits, V);
        double worst_gap = 0;
        for (size_t i = 0; i < s.rel.size(); ++i) {
          EXPECT_LE(s.rel[i], 1e-4) << "row " << i << " chunk " << chunk;
          EXPECT_TRUE(s.argmax_equal[i]) << "row " << i;
          EXPECT_NEAR(got.trace.confidence[i], want.confidence[i], 1e-4 * std::max(1.0, std::abs(want.confidence[i])));
          worst_gap = std::max({worst_gap, gap.rel[i], wrong.rel[i]});
        }
        EXPECT_GT(worst_gap, 0.1) << "the set does not tell the tap conventions apart";
        if (chunk == int64_t(want.tokens.size()) && backend == cpu.get())
          std::printf("%s: draft rows vs numpy max|d|/std %.2g .. %.2g; vs input taps up to %.2g\n", seq.c_str(),
                      *std::min_element(s.rel.begin(), s.rel.end()), *std::max_element(s.rel.begin(), s.rel.end()),
                      worst_gap);
      }
    }
  }
}
