// The engine over the real tiny models (tiny-v4-c, and tiny-v41-a for DeepSeek-V4.1 with its
// shared caches and Engram history): a prompt alone and inside a busy mixed batch gives the
// same greedy tokens and logits; recompute after preemption and reuse of a prefix-cache
// snapshot change nothing; the threaded public Engine streams and cancels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "engine/engine_core.h"
#include "engine/model_runner.h"
#include "harness.h"

#include <unistd.h>

using namespace deepinfer;
using namespace deepinfer::engine;
using namespace deepinfer::engine::testing;

namespace {

std::string model_dir(const char* set = "tiny-v4-c") { return std::string(DI_SHARED_DIR) + "/golden/" + set + "/model"; }
const char* const kV41 = "tiny-v41-a";

std::vector<int32_t> prompt(int64_t n, int32_t salt) {
  std::vector<int32_t> v{0};  // BOS
  for (int64_t i = 1; i < n; ++i) v.push_back(int32_t((i * 37 + salt * 101) % 1000 + 3));
  return v;
}

struct ModelCore {
  std::unique_ptr<EngineCore> core;
  ModelRunner* runner = nullptr;  // owned by core
  kv::KvSpec spec;
  std::map<uint64_t, std::shared_ptr<Collector>> sinks;
  std::map<uint64_t, std::vector<std::vector<float>>> rows;  // logits rows seen per request
  uint64_t next_id = 1;

  ModelCore(int64_t budget, int64_t max_running, int64_t n_blocks = 4000, int64_t cache = 0,
            const char* numerics = "reference", const char* kernels = "cpu", const char* set = "tiny-v4-c",
            int64_t granularity = 512, std::shared_ptr<kv::DiskCache> disk = nullptr) {
    auto owned = std::make_unique<ModelRunner>(v4::Model::load(model_dir(set)), 1, numerics, kernels);
    runner = owned.get();
    spec = kv::KvSpec::make(kv_layout_of(runner->model().config()), 64);
    EngineCoreOptions o;
    o.max_model_len = 1024;
    o.eos_token_id = 1;
    o.scheduler.max_batch_tokens = budget;
    o.scheduler.max_running = max_running;
    o.scheduler.prefix_cache_entries = cache;
    o.scheduler.prefix_cache_granularity = granularity;
    o.disk_cache = std::move(disk);
    core = std::make_unique<EngineCore>(o, spec, n_blocks, std::move(owned));
    core->on_logits = [this](uint64_t id, int64_t, const float* row) { rows[id].emplace_back(row, row + 1024); };
  }
  uint64_t submit(std::vector<int32_t> p, SamplingParams sp, std::vector<int64_t> cache_points = {}) {
    const uint64_t id = next_id++;
    sinks[id] = std::make_shared<Collector>();
    core->add(id, GenerateRequest{std::move(p), sp, std::move(cache_points)}, sinks[id], Clock::now());
    return id;
  }
  void run() {
    while (core->has_work()) {
      core->step();
      std::string why;
      ASSERT_TRUE(core->scheduler().check_integrity(&why)) << why;
    }
  }
};


}  // namespace

// The engine's claim is that batching, chunking, preemption and prefix reuse do not change
// what a request computes. Checked for the serving default (reference numerics, cpu
// kernels: batch-invariant since the kernels use one operation sequence per output whatever
// the row count), for float numerics, and for the ref kernels (bit-exact). Before the cpu
// kernels became batch-invariant, reference/cpu differed by 1e-3..2e-2 after a recompute:
// fp32 reassociation turned into a different FP8 activation rounding - this test is what
// would notice a regression.
struct Compute {
  const char* numerics;
  const char* kernels;
};
const Compute kInvariantComputes[] = {{"reference", "cpu"}, {"float", "cpu"}, {"reference", "ref"}};

void alone_and_busy(const char* nm, const char* kn, const char* set = "tiny-v4-c") {
  const auto p = prompt(70, 1);
  ModelCore alone(512, 8, 4000, 0, nm, kn, set);
  const uint64_t a = alone.submit(p, greedy(12));
  alone.run();
  // A seeded sampled request draws the same tokens alone and in the batch too.
  SamplingParams seeded;
  seeded.temperature = 1.0f;
  seeded.top_k = 50;
  seeded.seed = 2024;
  seeded.max_tokens = 12;
  seeded.ignore_eos = true;
  const auto q = prompt(33, 6);
  ModelCore alone_q(512, 8, 4000, 0, nm, kn, set);
  const uint64_t aq = alone_q.submit(q, seeded);
  alone_q.run();

  // Budget 24: the prompt is prefilled in chunks next to decoders and other prefills.
  ModelCore busy(24, 6, 4000, 0, nm, kn, set);
  SamplingParams noisy;
  noisy.temperature = 0.9f;
  noisy.top_p = 0.9f;
  noisy.seed = 7;
  noisy.max_tokens = 20;
  noisy.ignore_eos = true;
  busy.submit(prompt(9, 2), greedy(30));
  busy.submit(prompt(40, 3), noisy);
  busy.core->step();
  busy.core->step();
  const uint64_t b = busy.submit(p, greedy(12));
  busy.submit(prompt(55, 4), noisy);
  const uint64_t bq = busy.submit(q, seeded);
  busy.submit(prompt(3, 5), greedy(25));
  busy.run();

  EXPECT_EQ(alone.sinks[a]->tokens(), busy.sinks[b]->tokens());
  EXPECT_EQ(alone.sinks[a]->tokens().size(), 12u);
  EXPECT_LE(max_abs_diff(alone.rows[a], busy.rows[b]), 1e-5f);
  EXPECT_EQ(alone_q.sinks[aq]->tokens(), busy.sinks[bq]->tokens());
  EXPECT_LE(max_abs_diff(alone_q.rows[aq], busy.rows[bq]), 1e-5f);
}

TEST(EngineModel, AloneAndInABusyMixedBatchAgree) {
  for (const Compute& c : kInvariantComputes) {
    SCOPED_TRACE(std::string(c.numerics) + "/" + c.kernels);
    alone_and_busy(c.numerics, c.kernels);
  }
}

// DeepSeek-V4.1: the shared top-k runtime, Engram history and ratio-2 groups per sequence
// in a mixed batch of prefill chunks and decodes.
TEST(EngineModel, V41AloneAndInABusyMixedBatchAgree) {
  for (const Compute& c : {Compute{"reference", "cpu"}, Compute{"reference", "ref"}}) {
    SCOPED_TRACE(std::string(c.numerics) + "/" + c.kernels);
    alone_and_busy(c.numerics, c.kernels, kV41);
  }
}

void preemption_and_reuse(const char* nm, const char* kn, const char* set = "tiny-v4-c") {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(prompt(50 + 4 * i, i + 10));
  ModelCore roomy(256, 8, 4000, 0, nm, kn, set);
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) ids.push_back(roomy.submit(p, greedy(24)));
  roomy.run();

  const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(v4::Model::load(model_dir(set))->config()), 64);
  ModelCore tight(256, 8, 2 * spec.fixed_blocks + 2, 2, nm, kn, set);  // two admitted, not both grown past 64
  std::vector<uint64_t> tids;
  for (const auto& p : prompts) tids.push_back(tight.submit(p, greedy(24)));
  tight.run();
  EXPECT_GT(tight.core->stats().preemptions_total, 0u);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(roomy.sinks[ids[i]]->tokens(), tight.sinks[tids[i]]->tokens()) << i;
    EXPECT_LE(max_abs_diff(roomy.rows[ids[i]], tight.rows[tids[i]]), 1e-5f) << i;
  }

  // Follow-up turn: old prompt + output + new tokens. Served from the snapshot vs. cold.
  std::vector<int32_t> turn2 = prompts[3];
  for (int32_t t : tight.sinks[tids[3]]->tokens()) turn2.push_back(t);
  for (int32_t t : {7, 8, 9}) turn2.push_back(t);
  const uint64_t warm = tight.submit(turn2, greedy(10));
  tight.run();
  EXPECT_EQ(tight.core->stats().prefix_cache_hits, 1u);
  EXPECT_EQ(tight.sinks[warm]->events.back().usage.cached_tokens, int64_t(prompts[3].size() + 23));
  ModelCore cold(256, 8, 4000, 0, nm, kn, set);
  const uint64_t c = cold.submit(turn2, greedy(10));
  cold.run();
  EXPECT_EQ(tight.sinks[warm]->tokens(), cold.sinks[c]->tokens());
  EXPECT_LE(max_abs_diff(tight.rows[warm], cold.rows[c]), 1e-5f);
}

TEST(EngineModel, PreemptionAndPrefixReuseChangeNothing) {
  for (const Compute& c : kInvariantComputes) {
    SCOPED_TRACE(std::string(c.numerics) + "/" + c.kernels);
    preemption_and_reuse(c.numerics, c.kernels);
  }
}

TEST(EngineModel, V41PreemptionAndPrefixReuseChangeNothing) { preemption_and_reuse("reference", "cpu", kV41); }

// Paged KV: requests extending one snapshot fork it concurrently (shared full pages, copied
// last page) and each gets exactly the logits it gets alone and cold; the snapshot stays
// cached; dropping the cache returns every block; the arena never grows.
void forks_and_cold(const char* nm, const char* kn, float tol, const char* set = "tiny-v4-c") {
  const int64_t n_blocks = 400;
  ModelCore warm(256, 8, n_blocks, 4, nm, kn, set);
  const int64_t arena = warm.runner->arena_bytes();
  EXPECT_EQ(arena, n_blocks * warm.spec.block_bytes);
  const uint64_t a = warm.submit(prompt(70, 21), greedy(10));  // snapshot: 79 tokens, 1 full page + 15
  warm.run();
  std::vector<int32_t> prefix = prompt(70, 21);
  for (int32_t t : warm.sinks[a]->tokens()) prefix.push_back(t);
  prefix.pop_back();  // the last sampled token was never fed
  std::vector<std::vector<int32_t>> turns;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    turns.push_back(prefix);
    for (int k = 0; k < 2 + 3 * i; ++k) turns.back().push_back(int32_t(100 + 37 * i + k));
    ids.push_back(warm.submit(turns.back(), greedy(8)));
  }
  warm.core->step();  // all three admitted in one step, each a fork
  EXPECT_EQ(warm.runner->live_sequences(), 3u);
  EXPECT_EQ(warm.runner->live_snapshots(), 1u);
  const auto& kv = warm.core->scheduler().kv();
  EXPECT_EQ(kv.ref_count(kv.pages(ids[0])[0]), 4);
  warm.run();
  EXPECT_EQ(warm.core->stats().prefix_cache_hits, 3u);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(warm.sinks[ids[i]]->events.back().usage.cached_tokens, int64_t(prefix.size()));
    ModelCore cold(256, 8, n_blocks, 0, nm, kn, set);
    const uint64_t c = cold.submit(turns[i], greedy(8));
    cold.run();
    EXPECT_EQ(warm.sinks[ids[i]]->tokens(), cold.sinks[c]->tokens()) << i;
    EXPECT_LE(max_abs_diff(warm.rows[ids[i]], cold.rows[c]), tol) << i;
  }
  EXPECT_EQ(warm.runner->live_snapshots(), 4u);  // the first one plus the three finished
  warm.core->drop_prefix_cache();
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_EQ(warm.runner->live_snapshots(), 0u);
  EXPECT_EQ(warm.runner->live_sequences(), 0u);
  EXPECT_EQ(warm.runner->arena_bytes(), arena);
}

TEST(EngineModel, ForkedSnapshotServesConcurrentRequests) {
  {
    SCOPED_TRACE("reference/cpu");
    forks_and_cold("reference", "cpu", 1e-5f);
  }
  {
    SCOPED_TRACE("reference/ref");  // the referee kernels: chunking changes no bit
    forks_and_cold("reference", "ref", 0.0f);
  }
}

// Prompts sharing 150 and 97 tokens with `first` (then other tokens) on `warm`: they hit at
// 128 (a granularity checkpoint) and 97 (the cache point) and get the cold tokens and logits.
void diverging_prompts_match_cold(ModelCore& warm, const std::vector<int32_t>& first, const char* nm, const char* kn,
                                  float tol, const char* set) {
  for (const int64_t shared : {150, 97}) {
    std::vector<int32_t> p(first.begin(), first.begin() + shared);
    for (int k = 0; k < 21; ++k) p.push_back(int32_t(300 + 11 * k));
    const uint64_t w = warm.submit(p, greedy(5));
    warm.run();
    EXPECT_EQ(warm.sinks[w]->events.back().usage.cached_tokens, shared == 150 ? 128 : 97);
    ModelCore cold(256, 8, 400, 0, nm, kn, set);
    const uint64_t c = cold.submit(p, greedy(5));
    cold.run();
    EXPECT_EQ(warm.sinks[w]->tokens(), cold.sinks[c]->tokens()) << shared;
    EXPECT_LE(max_abs_diff(warm.rows[w], cold.rows[c]), tol) << shared;
  }
}

// Prompt checkpoints on the real model: a prompt that shares only the first 150 tokens of an
// earlier one resumes from its checkpoint at 128 (a block edge: pages shared, fixed part
// copied), and one that shares 97 tokens from the cache point there (a partly filled page
// copied too). Each gets the tokens and logits it gets cold (bit for bit with the referee
// kernels, whose results do not depend on chunking).
void checkpoints_and_cold(const char* nm, const char* kn, float tol, const char* set = "tiny-v4-c") {
  ModelCore warm(256, 8, 400, 16, nm, kn, set, 64);
  const std::vector<int32_t> first = prompt(200, 21);
  warm.submit(first, greedy(3), {97});
  warm.run();
  EXPECT_EQ(warm.core->stats().prefix_cache_checkpoints, 4u);  // 64, 97, 128, 192
  diverging_prompts_match_cold(warm, first, nm, kn, tol, set);
}

TEST(EngineModel, PromptCheckpointsServeDivergingPrompts) {
  {
    SCOPED_TRACE("reference/cpu");
    checkpoints_and_cold("reference", "cpu", 1e-5f);
  }
  {
    SCOPED_TRACE("reference/ref");
    checkpoints_and_cold("reference", "ref", 0.0f);
  }
}

// The disk cache across a restart: a server that prefilled a long prompt saves its
// checkpoints (64 and 128: 1 and 2 times the granularity; the cache point at 97; the finished
// sequence); a new one over the same directory serves a prompt sharing 150 tokens from the
// file at 128 and one sharing 97 from the cache point, with exactly the cold logits.
void disk_restart_and_cold(const char* nm, const char* kn, float tol, const char* set = "tiny-v4-c") {
  const auto dir = std::filesystem::temp_directory_path() / ("di-engine-disk-" + std::to_string(getpid()) + nm + kn + set);
  std::filesystem::remove_all(dir);
  const std::vector<int32_t> first = prompt(200, 21);
  {
    auto disk = std::make_shared<kv::DiskCache>(dir.string(), int64_t(1) << 30, 99);
    ModelCore before(256, 8, 400, 16, nm, kn, set, 64, disk);
    before.submit(first, greedy(3), {97});
    before.run();
    disk->flush();
    EXPECT_EQ(disk->stats().writes, 4u);
  }
  auto disk = std::make_shared<kv::DiskCache>(dir.string(), int64_t(1) << 30, 99);
  ModelCore after(256, 8, 400, 16, nm, kn, set, 64, disk);
  diverging_prompts_match_cold(after, first, nm, kn, tol, set);
  EXPECT_EQ(after.core->stats().prefix_cache_disk_hits, 2u);
  std::filesystem::remove_all(dir);
}

TEST(EngineModel, DiskCacheServesPrefixesAfterARestart) {
  {
    SCOPED_TRACE("reference/cpu");
    disk_restart_and_cold("reference", "cpu", 1e-5f);
  }
  {
    SCOPED_TRACE("reference/ref");
    disk_restart_and_cold("reference", "ref", 0.0f);
  }
}

TEST(EngineModel, V41ForkedSnapshotServesConcurrentRequests) { forks_and_cold("reference", "ref", 0.0f, kV41); }

// Checkpoints and the disk cache hold V4.1's state too (shared-source entries and index
// keys, the Engram history).
TEST(EngineModel, V41PromptCheckpointsAndDiskCache) {
  checkpoints_and_cold("reference", "ref", 0.0f, kV41);
  disk_restart_and_cold("reference", "ref", 0.0f, kV41);
}

// Fills a disk cache in `dir` from a server that prefilled `first` (checkpoints at 64 and 128,
// the cache point at 97, the finished sequence), then starts one over the same directory.
std::shared_ptr<kv::DiskCache> filled_disk_cache(const std::filesystem::path& dir, const std::vector<int32_t>& first) {
  std::filesystem::remove_all(dir);
  {
    auto disk = std::make_shared<kv::DiskCache>(dir.string(), int64_t(1) << 30, 99);
    ModelCore before(256, 8, 400, 16, "reference", "ref", "tiny-v4-c", 64, disk);
    before.submit(first, greedy(3), {97});
    before.run();
    disk->flush();
    EXPECT_EQ(disk->stats().writes, 4u);
  }
  return std::make_shared<kv::DiskCache>(dir.string(), int64_t(1) << 30, 99);
}

// `first`'s first 150 tokens, then others.
std::vector<int32_t> sharing_150(const std::vector<int32_t>& first) {
  std::vector<int32_t> p(first.begin(), first.begin() + 150);
  for (int k = 0; k < 21; ++k) p.push_back(int32_t(300 + 11 * k));
  return p;
}

// Four streams decoding on `core`: admitted and prefilled in one step.
std::vector<uint64_t> start_four_streams(ModelCore& core) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(core.submit(prompt(20, 40 + i), greedy(30)));
  EXPECT_EQ(core.core->step(), 80);
  return ids;
}

void expect_cold_result(ModelCore& warm, uint64_t w, const std::vector<int32_t>& p, int64_t max_tokens) {
  ModelCore cold(256, 8, 400, 0, "reference", "ref");
  const uint64_t c = cold.submit(p, greedy(max_tokens));
  cold.run();
  EXPECT_EQ(warm.sinks[w]->tokens(), cold.sinks[c]->tokens());
  EXPECT_EQ(warm.rows[w].size(), cold.rows[c].size());
  EXPECT_EQ(max_abs_diff(warm.rows[w], cold.rows[c]), 0.0f);  // referee kernels: bit for bit
}

// A disk hit is read off the scheduler thread. With the disk cache's reader held, the prompt
// with the hit waits in the queue while four decoding streams get one token per step, and
// no file is read (with the read on the scheduler thread it would have been read, and the
// prompt prefilled, in the first of these steps); released, the snapshot loads and the
// prompt gets exactly its cold tokens and logits.
TEST(EngineModel, DiskLoadDoesNotStallRunningStreams) {
  const auto dir = std::filesystem::temp_directory_path() / ("di-engine-disk-async-" + std::to_string(getpid()));
  const std::vector<int32_t> first = prompt(200, 21);
  auto disk = filled_disk_cache(dir, first);
  ModelCore after(256, 8, 400, 16, "reference", "ref", "tiny-v4-c", 64, disk);
  const std::vector<uint64_t> streams = start_four_streams(after);
  disk->hold_reads(true);
  const std::vector<int32_t> p = sharing_150(first);
  const uint64_t w = after.submit(p, greedy(5));
  for (size_t step = 1; step <= 8; ++step) {
    EXPECT_EQ(after.core->step(), 4) << step;  // the four decode tokens only
    for (uint64_t id : streams) EXPECT_EQ(after.sinks[id]->tokens().size(), 1 + step) << step;
    std::string why;
    ASSERT_TRUE(after.core->scheduler().check_integrity(&why)) << why;
  }
  EXPECT_TRUE(after.core->scheduler().waiting_for_disk());
  EXPECT_TRUE(after.sinks[w]->events.empty());
  EXPECT_EQ(disk->stats().reads + disk->stats().read_errors, 0u);
  EXPECT_EQ(after.core->scheduler().counters().disk_reads_started, 1u);
  disk->hold_reads(false);
  after.run();
  EXPECT_EQ(after.core->stats().prefix_cache_disk_hits, 1u);
  EXPECT_EQ(disk->stats().reads, 1u);
  EXPECT_EQ(disk->stats().background_reads, 1u);  // the only read, on the reader thread
  EXPECT_EQ(after.sinks[w]->events.back().usage.cached_tokens, 128);
  expect_cold_result(after, w, p, 5);
  std::filesystem::remove_all(dir);
}

// A disk read that fails (the files deleted while it waits) falls back to a prefill from the
// start, with the cold result; a request cancelled while its read is in flight leaves
// nothing behind.
TEST(EngineModel, FailedOrCancelledDiskLoadFallsBack) {
  const auto dir = std::filesystem::temp_directory_path() / ("di-engine-disk-fail-" + std::to_string(getpid()));
  const std::vector<int32_t> first = prompt(200, 21);
  auto disk = filled_disk_cache(dir, first);
  ModelCore after(256, 8, 400, 16, "reference", "ref", "tiny-v4-c", 64, disk);
  const std::vector<uint64_t> streams = start_four_streams(after);
  disk->hold_reads(true);
  const uint64_t cancelled = after.submit(sharing_150(first), greedy(5));
  EXPECT_EQ(after.core->step(), 4);
  after.core->abort(cancelled);
  EXPECT_EQ(after.sinks[cancelled]->reason(), FinishReason::kAbort);
  std::vector<int32_t> p = sharing_150(first);
  p.back() = 999;
  const uint64_t w = after.submit(p, greedy(5));
  EXPECT_EQ(after.core->step(), 4);
  for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e.path());
  disk->hold_reads(false);
  after.run();
  for (uint64_t id : streams) EXPECT_EQ(after.sinks[id]->tokens().size(), 30u);
  EXPECT_EQ(after.core->stats().prefix_cache_disk_hits, 0u);
  EXPECT_EQ(after.core->scheduler().counters().disk_reads_failed, 1u);
  EXPECT_GE(disk->stats().read_errors, 1u);
  EXPECT_EQ(after.sinks[w]->events.back().usage.cached_tokens, 0);
  expect_cold_result(after, w, p, 5);
  std::filesystem::remove_all(dir);
}

// A pool too small for every fork to grow: later forks wait or take the snapshot by move,
// growth preempts the newest; integrity is checked after every step and every request
// still gets the tokens and logits of a roomy cold run. Memory never exceeds the arena.
TEST(EngineModel, TightPoolWithForksQueuesAndPreempts) {
  const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(v4::Model::load(model_dir())->config()), 64);
  const int64_t F = spec.fixed_blocks;
  // Snapshot of 67 tokens (F + 2 blocks); two forks fit (F + 1 fresh each, growing into
  // their second page), the third takes the snapshot; one page left for growth past 128.
  const int64_t n_blocks = (F + 2) + 2 * (F + 1) + 1;
  ModelCore tight(256, 8, n_blocks, 2);
  const uint64_t a = tight.submit(prompt(60, 31), greedy(8));
  tight.run();
  std::vector<int32_t> prefix = prompt(60, 31);
  for (int32_t t : tight.sinks[a]->tokens()) prefix.push_back(t);
  prefix.pop_back();
  std::vector<std::vector<int32_t>> turns;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    turns.push_back(prefix);
    for (int k = 0; k < 40; ++k) turns.back().push_back(int32_t(200 + 13 * i + k));
    ids.push_back(tight.submit(turns.back(), greedy(30)));
  }
  tight.run();
  const EngineStats st = tight.core->stats();
  EXPECT_GT(st.preemptions_total, 0u);
  EXPECT_GE(st.prefix_cache_hits, 2u);
  EXPECT_LE(tight.runner->arena_bytes(), n_blocks * spec.block_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(tight.sinks[ids[i]]->reason(), FinishReason::kLength) << i;
    ModelCore cold(256, 8, 4000, 0);
    const uint64_t c = cold.submit(turns[i], greedy(30));
    cold.run();
    EXPECT_EQ(tight.sinks[ids[i]]->tokens(), cold.sinks[c]->tokens()) << i;
    EXPECT_LE(max_abs_diff(tight.rows[ids[i]], cold.rows[c]), 1e-5f) << i;
  }
  tight.core->drop_prefix_cache();
  EXPECT_EQ(tight.core->scheduler().kv().used_blocks(), 0);
}

// All KV memory is the arena. With many sequences and snapshots live (forks among them,
// eviction under a tight budget), after every step: the runner holds no KV byte outside the
// arena, the arena is the budget, the arena pages the states use are exactly the blocks the
// scheduler has handed out (fixed blocks included), and each state holds exactly its blocks.
TEST(EngineModel, KvMemoryIsTheArenaWhileManySequencesAndSnapshotsLive) {
  const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(v4::Model::load(model_dir())->config()), 64);
  const int64_t budget = 6'000'000;
  const int64_t n_blocks = budget / spec.block_bytes;
  ModelCore m(256, 6, n_blocks, 8);
  const int64_t arena = m.runner->arena_bytes();
  EXPECT_EQ(arena, n_blocks * spec.block_bytes);
  EXPECT_LE(arena, budget);
  EXPECT_GT(arena + spec.block_bytes, budget);
  const auto& kv = m.core->scheduler().kv();
  size_t most_live = 0, most_snapshots = 0;
  auto drive = [&] {
    while (m.core->has_work()) {
      m.core->step();
      std::string why;
      ASSERT_TRUE(m.core->scheduler().check_integrity(&why)) << why;
      ASSERT_EQ(m.runner->arena_bytes() + m.runner->outside_arena_bytes(), arena);
      std::vector<int32_t> handed_out;
      int64_t held = 0;
      for (kv::OwnerId o : kv.owners()) {
        for (const auto* part : {&kv.fixed(o), &kv.pages(o)}) handed_out.insert(handed_out.end(), part->begin(), part->end());
        held += kv.held(o);
      }
      std::sort(handed_out.begin(), handed_out.end());
      handed_out.erase(std::unique(handed_out.begin(), handed_out.end()), handed_out.end());
      ASSERT_EQ(m.runner->arena_pages_in_use(), handed_out);
      ASSERT_EQ(int64_t(handed_out.size()), kv.used_blocks());
      ASSERT_EQ(m.runner->state_bytes(), held * spec.block_bytes);
      most_live = std::max(most_live, m.runner->live_sequences() + m.runner->live_snapshots());
      most_snapshots = std::max(most_snapshots, m.runner->live_snapshots());
    }
  };
  std::vector<std::vector<int32_t>> firsts;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; ++i) {
    firsts.push_back(prompt(40 + 17 * i, 40 + i));
    ids.push_back(m.submit(firsts.back(), greedy(6)));
  }
  drive();
  // Follow-up turns: two per conversation (forks of its snapshot), and fresh prompts.
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> turn = firsts[size_t(i)];
    for (int32_t t : m.sinks[ids[size_t(i)]]->tokens()) turn.push_back(t);
    turn.pop_back();
    for (int k = 0; k < 2; ++k) {
      std::vector<int32_t> t2 = turn;
      for (int j = 0; j < 3 + 5 * k; ++j) t2.push_back(int32_t(300 + 11 * i + 7 * k + j));
      m.submit(t2, greedy(5));
    }
    m.submit(prompt(30 + 9 * i, 60 + i), greedy(4));
  }
  drive();
  EXPECT_GE(most_live, 9u);
  EXPECT_GE(most_snapshots, 5u);
  EXPECT_GT(m.core->stats().prefix_cache_hits, 0u);
  m.core->drop_prefix_cache();
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_TRUE(m.runner->arena_pages_in_use().empty());
  EXPECT_EQ(m.runner->arena_bytes(), arena);
}

// The public, threaded Engine on the tiny model: one compute thread, 2000 KV blocks.
std::unique_ptr<Engine> threaded_tiny_engine() {
  EngineOptions o;
  o.model_dir = model_dir();
  o.threads = 1;
  o.num_kv_blocks = 2000;
  return Engine::create(o);
}

TEST(EngineModel, ThreadedEngineStreamsAndCancels) {
  auto eng = threaded_tiny_engine();
  EXPECT_EQ(eng->info().vocab_size, 1024);
  EXPECT_EQ(eng->info().max_model_len, (2000 - eng->info().kv_fixed_blocks_per_seq) * 64);
  auto s = eng->submit(GenerateRequest{prompt(20, 1), greedy(16)});
  std::vector<int32_t> got;
  for (;;) {
    auto ev = s->next(std::chrono::seconds(30));
    ASSERT_TRUE(ev);
    for (const auto& t : ev->tokens) got.push_back(t.token);
    if (ev->finished) {
      EXPECT_EQ(ev->finish_reason, FinishReason::kLength);
      EXPECT_EQ(ev->usage.completion_tokens, 16);
      EXPECT_EQ(ev->usage.prompt_tokens, 20);
      break;
    }
  }
  EXPECT_EQ(got.size(), 16u);
  auto long_one = eng->submit(GenerateRequest{prompt(20, 2), greedy(900)});
  auto first = long_one->next(std::chrono::seconds(30));
  ASSERT_TRUE(first);
  long_one->cancel();
  for (;;) {
    auto ev = long_one->next(std::chrono::seconds(30));
    ASSERT_TRUE(ev);
    if (ev->finished) {
      EXPECT_EQ(ev->finish_reason, FinishReason::kAbort);
      EXPECT_LT(ev->usage.completion_tokens, 900);
      break;
    }
  }
  auto bad = eng->submit(GenerateRequest{{5000}, greedy(1)});
  auto ev = bad->next(std::chrono::seconds(30));
  ASSERT_TRUE(ev && ev->finished);
  EXPECT_EQ(ev->error.code, ErrorCode::kInvalidRequest);
  const EngineStats st = eng->stats();
  EXPECT_EQ(st.requests_finished_abort, 1u);
  EXPECT_GE(st.generation_tokens_total, 17u);
}

// Requests handed over together are scheduled together: one step prefills all four prompts
// (132 tokens) and gives each its first token, then they decode side by side - 8 steps for 8
// tokens each, whatever the timing of the engine thread. Submitted one at a time, the first
// could start alone and the others join a step or more later.
TEST(EngineModel, ThreadedEngineSchedulesASubmitAllTogether) {
  auto eng = threaded_tiny_engine();
  const std::vector<int> lengths = {1, 7, 40, 84};
  for (int round = 0; round < 3; ++round) {
    const uint64_t steps0 = eng->stats().steps_total;
    std::vector<GenerateRequest> reqs;
    for (size_t i = 0; i < lengths.size(); ++i) reqs.push_back(GenerateRequest{prompt(lengths[i], 70 + i), greedy(8)});
    auto streams = eng->submit_all(std::move(reqs), nullptr);
    ASSERT_EQ(streams.size(), lengths.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      for (;;) {
        auto ev = streams[i]->next(std::chrono::seconds(30));
        ASSERT_TRUE(ev);
        if (ev->finished) {
          EXPECT_EQ(ev->finish_reason, FinishReason::kLength);
          EXPECT_EQ(ev->usage.prompt_tokens, lengths[i]);
          EXPECT_EQ(ev->usage.completion_tokens, 8);
          break;
        }
      }
    }
    // The engine publishes its counters after the step that finished the requests.
    EngineStats st;
    for (int wait = 0; wait < 3000; ++wait) {
      st = eng->stats();
      if (st.requests_running == 0 && st.requests_waiting == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(st.steps_total - steps0, 8u) << "round " << round;
  }
}

// DeepSeek-V4.1 through the public Engine: streams, and a prompt holding the image placeholder
// (here set to an id of the tiny vocabulary) is one invalid-request error.
TEST(EngineModel, V41ThreadedEngineRefusesImageTokens) {
  EngineOptions o;
  o.model_dir = model_dir(kV41);
  o.threads = 1;
  o.num_kv_blocks = 500;
  auto eng = Engine::create(o);
  EXPECT_EQ(eng->info().vocab_size, 1024);
  auto s = eng->submit(GenerateRequest{prompt(20, 1), greedy(8)});
  std::vector<int32_t> got;
  for (;;) {
    auto ev = s->next(std::chrono::seconds(30));
    ASSERT_TRUE(ev);
    for (const auto& t : ev->tokens) got.push_back(t.token);
    if (ev->finished) break;
  }
  EXPECT_EQ(got.size(), 8u);
  // The same model with image_token_id 1000: that id in a prompt is refused, clearly.
  const std::string dir = ::testing::TempDir() + "/v41_image";
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(model_dir(kV41)))
    if (e.is_regular_file())
      std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(model_dir(kV41) + "/config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["image_token_id"] = 1000;
  std::filesystem::permissions(dir + "/config.json", std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  std::ofstream(dir + "/config.json") << cfg.dump();
  o.model_dir = dir;
  auto img = Engine::create(o);
  auto bad = img->submit(GenerateRequest{{0, 17, 1000, 18}, greedy(1)});
  auto ev = bad->next(std::chrono::seconds(30));
  ASSERT_TRUE(ev && ev->finished);
  EXPECT_EQ(ev->error.code, ErrorCode::kInvalidRequest);
  EXPECT_NE(ev->error.message.find("image token id 1000"), std::string::npos) << ev->error.message;
  std::filesystem::remove_all(dir);
}

// The runner's sequences live in the spec's page layout (kv/kv_spec.h, the one definition);
// a spec made for another layout is refused before any page is handed out.
TEST(ModelRunner, BindsOnlyThisModelsKvLayout) {
  ModelRunner runner(v4::Model::load(model_dir()), 1, "reference", "cpu");
  kv::KvLayout other = kv_layout_of(runner.model().config());
  other.window_tokens += 1;
  EXPECT_THROW(runner.bind_kv(kv::KvSpec::make(other, 64), 16), std::invalid_argument);
  const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(runner.model().config()), 64);
  runner.bind_kv(spec, 16);
  EXPECT_EQ(runner.arena_bytes(), 16 * spec.block_bytes);
}
