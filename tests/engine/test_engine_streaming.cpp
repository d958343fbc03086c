// The engine over a model whose routed experts stream from disk (a memory budget below the
// checkpoint): greedy tokens equal the fully mapped model's; a shard truncated while serving
// fails the request that needed the missing expert with an error naming the file, and the
// engine goes on serving: the next request, once the file is whole, gets the mapped model's tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "../model/checkpoint_copy.h"
#include "engine/engine_core.h"
#include "engine/model_runner.h"
#include "harness.h"

using namespace deepinfer;
using namespace deepinfer::engine;
using namespace deepinfer::engine::testing;
namespace fs = std::filesystem;

namespace {

struct Served {
  std::unique_ptr<EngineCore> core;
  ModelRunner* runner = nullptr;  // owned by core
  uint64_t next_id = 1;

  explicit Served(std::unique_ptr<v4::Model> model) {
    auto owned = std::make_unique<ModelRunner>(std::move(model), 1, "reference", "cpu");
    runner = owned.get();
    const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(runner->model().config()), 64);
    EngineCoreOptions o;
    o.max_model_len = 512;
    o.eos_token_id = 1;
    core = std::make_unique<EngineCore>(o, spec, 400, std::move(owned));
  }
  std::shared_ptr<Collector> generate(int32_t salt) {
    std::vector<int32_t> p{0};
    for (int i = 1; i < 14; ++i) p.push_back(int32_t((i * 53 + salt * 97) % 1000 + 3));
    SamplingParams sp;
    sp.max_tokens = 8;
    sp.temperature = 0.0f;
    sp.ignore_eos = true;
    auto sink = std::make_shared<Collector>();
    core->add(next_id++, GenerateRequest{std::move(p), sp, {}}, sink, Clock::now());
    while (core->has_work()) core->step();
    return sink;
  }
};

}  // namespace

TEST(EngineStreaming, TruncatedShardFailsOneRequestAndTheEngineServesOn) {
  const std::string src = std::string(DI_GOLDEN_MODELS_DIR) + "/tiny-0731/model";
  const deepinfer::testing::TruncatableCheckpoint copy(
      src, (fs::temp_directory_path() / ("di_engine_streaming_" + std::to_string(::getpid()))).string());
  const std::string& shard = copy.shard;
  // The dense weights and room for 12 of the 72 experts.
  v4::LoadOptions o;
  o.weight_budget = copy.experts_at + 12 * 64 * 1024;
  Served streamed(v4::Model::load(copy.dir, o));
  ASSERT_NE(streamed.runner->model().expert_cache(), nullptr);
  Served mapped(v4::Model::load(src));

  const auto first = streamed.generate(1);
  ASSERT_TRUE(first->finished());
  EXPECT_EQ(first->reason(), FinishReason::kLength);
  EXPECT_EQ(first->tokens(), mapped.generate(1)->tokens()) << "streamed experts changed the greedy tokens";

  copy.truncate();
  const auto failed = streamed.generate(2);
  ASSERT_TRUE(failed->finished());
  EXPECT_EQ(failed->reason(), FinishReason::kError);
  const std::string msg = failed->events.back().error.message;
  EXPECT_NE(msg.find(shard), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  copy.restore();
  const auto again = streamed.generate(3);
  ASSERT_TRUE(again->finished());
  EXPECT_EQ(again->reason(), FinishReason::kLength);
  EXPECT_EQ(again->tokens(), mapped.generate(3)->tokens());
  streamed.core.reset();
}
