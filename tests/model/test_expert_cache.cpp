// Routed experts streamed from disk (LoadOptions::weight_budget below the checkpoint): the
// logits equal those of the fully mapped model byte for byte in every mode (prefill, decode,
// chunks, a batch with every row's logits as a speculative verify asks, drafting), with a
// budget that holds a quarter of the experts; the streamed experts' mapped pages are made
// inaccessible, so any read through the mapping crashes the test. A budget too small for the
// dense weights is refused with the numbers; a shard truncated mid-run fails the forward with
// the file named, and the model serves again once the file is whole.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "model/deepseek_v4/expert_cache.h"
#include "model/deepseek_v4/model.h"
#include "checkpoint_copy.h"

using namespace deepinfer;
using namespace deepinfer::v4;
namespace fs = std::filesystem;

namespace {

std::string golden_dir(const std::string& set) { return std::string(DI_GOLDEN_MODELS_DIR) + "/" + set + "/model"; }

std::vector<int32_t> prompt(int64_t vocab, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = tok(rng);
  return t;
}

// Logits [S, vocab] of tokens fed `chunk` at a time (0: all at once).
std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& tokens, int64_t chunk, const Numerics& num) {
  const int64_t S = int64_t(tokens.size()), V = m.config().vocab_size;
  if (chunk <= 0) chunk = S;
  std::vector<float> out(size_t(S * V));
  auto st = m.new_sequence();
  for (int64_t i = 0; i < S; i += chunk) m.forward(&tokens[size_t(i)], std::min(chunk, S - i), st, num, &out[size_t(i * V)]);
  return out;
}

// Two sequences in one step after their prompts, every row's logits (a verify chunk's shape).
std::vector<float> batch_logits(const Model& m, const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                                const Numerics& num) {
  const int64_t V = m.config().vocab_size;
  auto sa = m.new_sequence(), sb = m.new_sequence();
  m.forward(a.data(), int64_t(a.size()) - 3, sa, num, nullptr);
  m.forward(b.data(), int64_t(b.size()) - 2, sb, num, nullptr);
  std::vector<float> out(size_t(5 * V));
  m.forward_batch({SequenceChunk{a.data() + a.size() - 3, 3, &sa, out.data(), true},
                   SequenceChunk{b.data() + b.size() - 2, 2, &sb, out.data() + 3 * V, true}},
                  num);
  return out;
}

// Greedy drafts after a prompt with the checkpoint's drafter.
std::vector<int32_t> drafts_of(const Model& m, const std::vector<int32_t>& tokens, const Numerics& num) {
  auto st = m.new_sequence();
  DrafterState ds;
  std::vector<float> inputs;
  const int64_t S = int64_t(tokens.size()) - 1;
  m.forward_batch({SequenceChunk{tokens.data(), S, &st, nullptr, false}}, num, &inputs);
  ds.keep(inputs.data(), 0, S, m.draft_input_width(), S);
  return m.draft(st, ds, tokens, 3, num);
}

// Bytes of the routed experts and of everything else in a checkpoint's shards.
struct Sizes {
  int64_t experts = 0, total = 0, n_experts = 0;
};
Sizes sizes_of(const Model& m) {
  Sizes s;
  auto add = [&](const MoeWeights& moe) {
    for (const ExpertWeights& e : moe.experts) {
      for (const WeightMatrix* w : {&e.w1, &e.w2, &e.w3}) s.experts += weight_data_bytes(*w) + weight_scale_bytes(*w);
      ++s.n_experts;
    }
  };
  for (const LayerWeights& L : m.weights().layers) add(L.ffn);
  for (const MtpWeights& t : m.weights().mtp) add(t.block.ffn);
  for (const LayerWeights& L : m.weights().dspark.stages) add(L.ffn);
  return s;
}

// Makes the pages that lie wholly inside the streamed experts' mapped bytes inaccessible:
// from here on, a read of a routed expert through the mapping is a crash.
void forbid_mapped_experts(const Model& m) {
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  auto forbid = [&](const uint8_t* p, int64_t n) {
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + uintptr_t(page) - 1) / uintptr_t(page) * uintptr_t(page);
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + uintptr_t(n)) / uintptr_t(page) * uintptr_t(page);
    if (e > b) {
      ASSERT_EQ(0, ::mprotect(reinterpret_cast<void*>(b), e - b, PROT_NONE));
    }
  };
  auto each = [&](const MoeWeights& moe) {
    for (const ExpertWeights& e : moe.experts)
      for (const WeightMatrix* w : {&e.w1, &e.w2, &e.w3}) {
        forbid(w->data, weight_data_bytes(*w));
        if (w->scale) forbid(w->scale, weight_scale_bytes(*w));
      }
  };
  for (const LayerWeights& L : m.weights().layers) each(L.ffn);
  for (const MtpWeights& t : m.weights().mtp) each(t.block.ffn);
  for (const LayerWeights& L : m.weights().dspark.stages) each(L.ffn);
}

// A budget that holds the dense weights and a quarter of the routed experts: the dense bytes
// counted from the shards, the slot size asked of a cache made with a rough budget first.
int64_t quarter_budget(const std::string& dir) {
  const TensorStore store(dir);
  // V4.1's Engram tables stay mapped outside the budget, as the routed experts stream.
  const int64_t dense = int64_t(store.total_bytes([](const std::string& name) {
    return name.find(".ffn.experts.") != std::string::npos || name.find(".engram.embed.") != std::string::npos;
  }));
  const Sizes s = sizes_of(*Model::load(dir));
  LoadOptions rough;
  rough.weight_budget = dense + s.experts / 2;
  const int64_t slot = Model::load(dir, rough)->expert_cache()->slot_bytes();
  return dense + (s.n_experts / 4) * slot;
}

void expect_same_bytes(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what << ": streamed experts changed the logits";
}

void check_streaming_is_exact(const std::string& set) {
  SCOPED_TRACE(set);
  const std::string dir = golden_dir(set);
  ASSERT_TRUE(fs::exists(dir + "/config.json")) << dir << " missing: run ./setup.sh";
  auto mapped = Model::load(dir);
  LoadOptions o;
  o.weight_budget = quarter_budget(dir);
  o.expert_readers = 2;
  auto streamed = Model::load(dir, o);
  ASSERT_NE(streamed->expert_cache(), nullptr) << "the budget should have made the experts stream";
  const ExpertCache& cache = *streamed->expert_cache();
  const Sizes s = sizes_of(*mapped);
  EXPECT_EQ(cache.slots(), s.n_experts / 4) << "the cache should hold a quarter of the experts";
  EXPECT_GE(cache.slots(), 4);
  forbid_mapped_experts(*streamed);

  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  Numerics fast;
  fast.backend = cpu.get();
  const int64_t V = mapped->config().vocab_size;
  const auto tokens = prompt(V, 20, 5), other = prompt(V, 11, 6);
  for (const Numerics& num : {Numerics{}, fast}) {
    SCOPED_TRACE(num.backend->name());
    expect_same_bytes(logits_of(*streamed, tokens, 0, num), logits_of(*mapped, tokens, 0, num), "prefill");
    expect_same_bytes(logits_of(*streamed, tokens, 1, num), logits_of(*mapped, tokens, 1, num), "decode");
    expect_same_bytes(logits_of(*streamed, tokens, 7, num), logits_of(*mapped, tokens, 7, num), "chunks of 7");
    expect_same_bytes(batch_logits(*streamed, tokens, other, num), batch_logits(*mapped, tokens, other, num),
                      "a batch of two with every row's logits");
    if (mapped->drafter() != Model::Drafter::kNone) {
      EXPECT_EQ(drafts_of(*streamed, tokens, num), drafts_of(*mapped, tokens, num)) << "drafts";
    }
  }
  const ExpertCacheStats st = cache.stats();
  EXPECT_GT(st.lookups, 0u);
  EXPECT_LT(st.hits, st.lookups) << "a quarter of the experts cannot hold every step's";
  EXPECT_GT(st.reads, uint64_t(cache.slots())) << "the cache never evicted";
  EXPECT_GT(st.bytes_read, 0u);
  EXPECT_GT(st.read_ahead, 0u) << "nothing was read ahead of need";
  bool gate_layers = false;
  for (size_t l = 1; l < mapped->weights().layers.size(); ++l) gate_layers |= mapped->weights().layers[l].ffn.tid2eid.empty();
  if (gate_layers) {
    EXPECT_GT(st.predicted, 0u) << "no gate-routed layer was predicted";
    EXPECT_GT(st.chosen_predicted_layers, 0u);
    EXPECT_LE(st.predicted_chosen, st.chosen_predicted_layers);
  }
}

}  // namespace

TEST(ExpertCache, StreamedExpertsGiveTheSameLogitsV4) { check_streaming_is_exact("tiny-0731"); }
TEST(ExpertCache, StreamedExpertsGiveTheSameLogitsV41) { check_streaming_is_exact("np-v41-mix"); }
TEST(ExpertCache, StreamedExpertsGiveTheSameLogitsWide) { check_streaming_is_exact("hf-v4-wide"); }

TEST(ExpertCache, AllFitsMeansNothingStreams) {
  LoadOptions o;
  o.weight_budget = int64_t(1) << 40;
  EXPECT_EQ(Model::load(golden_dir("tiny-0731"), o)->expert_cache(), nullptr);
  EXPECT_EQ(Model::load(golden_dir("tiny-0731"))->expert_cache(), nullptr);
}

TEST(ExpertCache, BudgetBelowTheDenseWeightsIsRefusedWithTheNumbers) {
  LoadOptions o;
  o.weight_budget = 1 << 20;  // 1 MiB: less than the dense weights
  try {
    Model::load(golden_dir("tiny-0731"), o);
    FAIL() << "a budget below the dense weights loaded";
  } catch (const LoadError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1048576 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--memory-limit"), std::string::npos) << msg;
  }
  // A default budget (not --memory-limit) that small maps everything, as before budgets.
  o.weight_budget_strict = false;
  EXPECT_EQ(Model::load(golden_dir("tiny-0731"), o)->expert_cache(), nullptr);
}

TEST(ExpertCache, TruncatedShardFailsTheForwardThenServesAgain) {
  const std::string src = golden_dir("tiny-0731");
  const deepinfer::testing::TruncatableCheckpoint copy(
      src, (fs::temp_directory_path() / ("di_expert_cache_" + std::to_string(::getpid()))).string());
  const std::string& shard = copy.shard;
  auto mapped = Model::load(src);
  LoadOptions o;
  o.weight_budget = quarter_budget(src);
  auto m = Model::load(copy.dir, o);
  ASSERT_NE(m->expert_cache(), nullptr);
  const auto tokens = prompt(m->config().vocab_size, 9, 8);

  copy.truncate();
  try {
    logits_of(*m, tokens, 0, Numerics{});
    FAIL() << "a forward over a truncated shard succeeded";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(shard), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("routed expert"), std::string::npos) << msg;
  }
  copy.restore();
  // The same model serves again, with the fully mapped model's logits.
  expect_same_bytes(logits_of(*m, tokens, 0, Numerics{}), logits_of(*mapped, tokens, 0, Numerics{}),
                    "after the shard was made whole");
  // Nothing was written into the checkpoint directory but what this test wrote.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(copy.dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors"}));
  m.reset();
}
