// Expert parallel without MPI: N threads stand for N ranks behind a shared-memory
// Communicator (ThreadRanks below), each with its own Model holding its slice of the routed
// experts and of the head's vocabulary rows. Every rank's logits must equal one process's bit for bit (reference numerics,
// the scalar referee kernels), on V4 and V4.1, prefill (gathered rows) and decode (one row).
// The MPI transport itself is tested under mpirun by tests/dist/test_mpi.py.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

#include "dist/communicator.h"
#include "model/deepseek_v4/expert_split.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

// The ranks' shared state: a barrier and the buffer each rank publishes for a collective.
struct ThreadGroup {
  explicit ThreadGroup(int n) : n(n), sync(n), published(size_t(n), nullptr) {}
  int n;
  std::barrier<> sync;
  std::vector<const void*> published;
};

// One rank of a ThreadGroup. Each collective: publish, wait, copy from the others, wait
// (so nobody's buffer is reused before every rank has read it).
class ThreadRanks final : public dist::Communicator {
 public:
  ThreadRanks(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.n; }
  const char* name() const override { return "threads"; }
  void barrier() override { g_.sync.arrive_and_wait(); }
  void broadcast(void* data, size_t bytes, int root) override {
    if (rank_ == root) g_.published[size_t(root)] = data;
    g_.sync.arrive_and_wait();
    if (rank_ != root) std::memcpy(data, g_.published[size_t(root)], bytes);
    g_.sync.arrive_and_wait();
  }
  void allgatherv(float* data, std::span<const int64_t> counts, std::span<const int64_t> displs) override {
    g_.published[size_t(rank_)] = data;
    g_.sync.arrive_and_wait();
    for (int r = 0; r < g_.n; ++r)
      if (r != rank_)
        std::memcpy(data + displs[size_t(r)], static_cast<const float*>(g_.published[size_t(r)]) + displs[size_t(r)],
                    size_t(counts[size_t(r)]) * sizeof(float));
    stats_.calls++;
    g_.sync.arrive_and_wait();
  }
  void allgather_bytes(const void* mine, size_t n, void* out) override {
    g_.published[size_t(rank_)] = mine;
    g_.sync.arrive_and_wait();
    for (int r = 0; r < g_.n; ++r) std::memcpy(static_cast<char*>(out) + size_t(r) * n, g_.published[size_t(r)], n);
    g_.sync.arrive_and_wait();
  }
  [[noreturn]] void abort(const std::string& message) override { throw std::logic_error(message); }

 private:
  ThreadGroup& g_;
  int rank_;
};

std::vector<int32_t> prompt(int64_t vocab, int64_t n) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = tok(rng);
  t[0] = 0;
  return t;
}

// Logits of `tokens` [S, vocab]: all at once (chunk 0) or one token per call (chunk 1).
std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& tokens, int64_t chunk) {
  const int64_t S = int64_t(tokens.size()), V = m.config().vocab_size;
  if (chunk <= 0) chunk = S;
  std::vector<float> out(size_t(S * V));
  auto st = m.new_sequence();
  for (int64_t i = 0; i < S; i += chunk) m.forward(&tokens[size_t(i)], std::min(chunk, S - i), st, Numerics{}, &out[size_t(i * V)]);
  return out;
}

// weight_budget > 0: every rank streams its routed experts from disk under that budget.
void expect_ranks_match_one_process(const std::string& set, int64_t weight_budget = 0) {
  const std::string dir = std::string(DI_GOLDEN_MODELS_DIR) + "/" + set + "/model";
  ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << dir << " missing: run ./setup.sh";
  auto one = Model::load(dir);
  const auto tokens = prompt(one->config().vocab_size, 12);
  for (int64_t chunk : {0, 1}) {
    const std::vector<float> want = logits_of(*one, tokens, chunk);
    for (int n : {2, 3}) {
      ThreadGroup group(n);
      std::vector<std::unique_ptr<ThreadRanks>> comms;
      for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<ThreadRanks>(group, r));
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      std::vector<int64_t> combines(static_cast<size_t>(n));
      std::vector<std::string> errors(static_cast<size_t>(n));
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          try {
            LoadOptions o;
            o.comm = comms[size_t(r)].get();
            o.expert_parallel = true;
            o.weight_budget = weight_budget;
            auto m = Model::load(dir, o);
            if (weight_budget > 0 && !m->expert_cache()) throw std::runtime_error("the experts do not stream");
            got[size_t(r)] = logits_of(*m, tokens, chunk);
            combines[size_t(r)] = comms[size_t(r)]->stats().calls;
          } catch (const std::exception& e) {
            errors[size_t(r)] = e.what();
          }
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(errors[size_t(r)], "") << set << " rank " << r;
        // Per forward call: one combine per MoE layer, one gather of the head's logits.
        const int64_t calls = chunk == 0 ? 1 : int64_t(tokens.size());
        EXPECT_EQ(combines[size_t(r)], calls * (one->config().n_layers + 1)) << set << " rank " << r;
        ASSERT_EQ(got[size_t(r)].size(), want.size());
        EXPECT_EQ(0, std::memcmp(got[size_t(r)].data(), want.data(), want.size() * sizeof(float)))
            << set << ": rank " << r << " of " << n << (chunk ? " (decode)" : " (prefill)")
            << " differs from one process";
      }
    }
  }
}

}  // namespace

TEST(ExpertParallel, SlicesAreContiguousAndCoverEveryExpert) {
  ThreadGroup group(3);
  ThreadRanks r1(group, 1);
  const ExpertSplit s = split_experts(&r1, 8);
  EXPECT_EQ(s.first, (std::vector<int64_t>{0, 3, 6, 8}));
  EXPECT_EQ(split_experts(&r1, 8, 1000).head_first, (std::vector<int64_t>{0, 334, 667, 1000}));
  EXPECT_TRUE(s.active());
  EXPECT_FALSE(s.owns(2));
  EXPECT_TRUE(s.owns(3));
  EXPECT_TRUE(s.owns(5));
  EXPECT_FALSE(s.owns(6));
  EXPECT_THROW(split_experts(&r1, 2), std::invalid_argument);  // more ranks than experts
  const ExpertSplit alone = split_experts(nullptr, 8);
  EXPECT_FALSE(alone.active());
  EXPECT_TRUE(alone.owns(7));
}

TEST(ExpertParallel, AgreeNamesTheLowestFailingRank) {
  ThreadGroup group(3);
  std::vector<std::string> what(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      ThreadRanks comm(group, r);
      try {
        dist::agree(comm, r == 0 ? "" : "shard " + std::to_string(r) + " is missing");
      } catch (const dist::RankError& e) {
        what[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(what[size_t(r)], "rank 1 of 3: shard 1 is missing") << "rank " << r;
}

TEST(ExpertParallel, V4RanksMatchOneProcessBitForBit) { expect_ranks_match_one_process("hf-v4-wide"); }

TEST(ExpertParallel, V41RanksMatchOneProcessBitForBit) { expect_ranks_match_one_process("np-v41-mix"); }

// Each rank streams its own slice of the experts through a cache of an eighth of all of them.
TEST(ExpertParallel, RanksStreamingTheirExpertsMatchOneProcess) {
  const std::string dir = std::string(DI_GOLDEN_MODELS_DIR) + "/hf-v4-wide/model";
  const TensorStore store(dir);
  const auto routed = [](const std::string& name) { return name.find(".ffn.experts.") != std::string::npos; };
  const int64_t all = int64_t(store.total_bytes()), dense = int64_t(store.total_bytes(routed));
  expect_ranks_match_one_process("hf-v4-wide", dense + (all - dense) / 8);
}
