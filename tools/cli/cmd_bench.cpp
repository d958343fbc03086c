// deepinfer bench --model DIR [--prefill 512] [--decode 128] [--depths 0,2048,8192]
//                 [--decode-batches 1,4,16,32] [--check-depth-logits [--check-chunk N]]
//                 [--numerics reference|float] [--threads N] [--kernels cpu|ref] [--json | --csv]
// Loads the model once into the engine `serve` runs (EngineCore + ModelRunner: scheduler,
// KV pool, sampler, drafter), whose steps it drives from its own thread; for every context
// depth d (llama-bench style):
//   pp: a request of d tokens leaves its state in the prefix cache; a second one, the same d
//       tokens and `prefill` more, reuses it and prefills the rest in one engine step (one
//       chunk, logits of the last row only, as a server prefill and llama-bench do), timed to
//       its first token;
//   tg: a greedy request whose prompt is d tokens of context and one more; its `decode`
//       decode steps after the first token are timed from the first token's event to the last.
// Also measures this machine's memory bandwidth with a STREAM-like triad in the same run and
// reports decode speed against the roofline bandwidth / (weight + KV bytes read per token).
// --decode-batches: B requests at once; once all of them decode, `decode` steps of one forward
// of B tokens are timed; the roofline counts each matrix the batch reads (the distinct experts
// its tokens chose, the rest once) at the slower of its bytes over the bandwidth and its
// multiply-adds (B rows; an expert, the tokens that chose it) over the FMA peak, both measured
// in the same run.
// --speculative: the engine's drafting against plain decoding, and its bounds (every draft
// accepted or rejected: the benchmarks' hooks of EngineCore replace the drafts).
// --check-depth-logits: at each depth, the last decoded token's logits (from the engine) against
// those of one prefill over the same tokens on a fresh sequence (a direct model call).
// The report: bench_report.cpp; the triad, the dispatch cost, the peak RSS and the KV bytes the
// roofline counts: bench_machine.cpp.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <sstream>

#include "args.h"
#include "bench_machine.h"
#include "bench_per_core.h"
#include "bench_report.h"
#include "command.h"
#include "core/profile.h"
#include "core/log.h"
#include "engine/engine_core.h"
#include "engine/engine_impl.h"
#include "engine/model_runner.h"
#include "kv/kv_spec.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/routing_trace.h"
#include "model_cli.h"
#include "summary.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A comma-separated list of integers in [lo, hi] for `flag` ("--depths 0,2048,8192").
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& flag, long lo, long hi,
                                    const char* example) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || v < lo || v > hi) throw ArgError(flag + " expects e.g. " + example);
    out.push_back(v);
  }
  if (out.empty()) throw ArgError(flag + " is empty");
  return out;
}

// The engine the bench measures: EngineCore over a ModelRunner, as `serve` runs them (the
// scheduler, the sampler, the drafter, the KV pool), with the steps driven from this thread
// so that single steps can be timed and the routing trace (per thread) sees the forwards.
// On several ranks this is rank 0's; the others run run_engine_worker.
struct Bench {
  engine::LocalEngine e;
  uint64_t next_id = 1;

  engine::EngineCore& core() { return *e.core; }
  const v4::Model& model() const { return e.runner->model(); }
  const v4::Config& config() const { return model().config(); }
};

// One request's events as the engine emits them, and when its tokens arrived.
struct Recorder final : engine::EventSink {
  std::vector<int32_t> tokens;
  Clock::time_point first_token, last_token;
  std::function<void()> on_first_token;  // called when the first token arrives (starts a timed phase)
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  Usage usage;

  void push(StreamEvent&& ev) override {
    const Clock::time_point now = Clock::now();
    if (!ev.tokens.empty()) {
      if (tokens.empty()) {
        first_token = now;
        if (on_first_token) on_first_token();
      }
      last_token = now;
      for (const GeneratedToken& t : ev.tokens) tokens.push_back(t.token);
    }
    usage = ev.usage;
    if (ev.finished) {
      finished = true;
      reason = ev.finish_reason;
      error = ev.error.message;
    }
  }
  // Decode speed: tokens after the first over the time from the first to the last.
  double decode_tok_s() const {
    const double s = std::chrono::duration<double>(last_token - first_token).count();
    return tokens.size() > 1 && s > 0 ? double(tokens.size() - 1) / s : 0.0;
  }
};

// Queues a greedy request that ignores EOS (max_tokens -1: until the context is full).
std::shared_ptr<Recorder> submit(Bench& b, std::vector<int32_t> prompt, int64_t max_tokens, uint64_t* id = nullptr) {
  GenerateRequest req;
  req.prompt = std::move(prompt);
  req.params.temperature = 0.0f;
  req.params.max_tokens = max_tokens;
  req.params.ignore_eos = true;
  auto rec = std::make_shared<Recorder>();
  const uint64_t rid = b.next_id++;
  const Status s = b.core().add(rid, std::move(req), rec, Clock::now());
  if (!s.ok()) throw std::runtime_error("bench: the engine refused a request: " + s.message);
  if (id) *id = rid;
  return rec;
}

// Steps the engine until done() or nothing is left to run. A step that runs nothing while
// requests wait means they cannot be scheduled (KV pool too small): an error.
void step_until(Bench& b, const std::function<bool()>& done = [] { return false; }) {
  while (!done() && b.core().has_work())
    if (b.core().step() == 0) throw std::runtime_error("bench: an engine step ran nothing (KV pool too small?)");
}

// Clears an engine hook when the measurement that set it ends, by return or throw.
template <class Hook>
struct HookReset {
  Hook& hook;
  ~HookReset() { hook = nullptr; }
};

void expect_finished(const Recorder& r, const char* what) {
  if (!r.finished) throw std::logic_error(std::string("bench: the ") + what + " request did not finish");
  if (r.reason == FinishReason::kError)
    throw std::runtime_error(std::string("bench: the ") + what + " request failed: " + r.error);
}

// The expert cache's counts between two snapshots.
v4::ExpertCacheStats disk_delta(const v4::ExpertCacheStats& a, const v4::ExpertCacheStats& b) {
  v4::ExpertCacheStats d;
  d.lookups = b.lookups - a.lookups;
  d.hits = b.hits - a.hits;
  d.reads = b.reads - a.reads;
  d.bytes_read = b.bytes_read - a.bytes_read;
  d.read_seconds = b.read_seconds - a.read_seconds;
  d.read_ahead = b.read_ahead - a.read_ahead;
  d.read_ahead_unused = b.read_ahead_unused - a.read_ahead_unused;
  d.predicted = b.predicted - a.predicted;
  d.predicted_chosen = b.predicted_chosen - a.predicted_chosen;
  d.chosen_predicted_layers = b.chosen_predicted_layers - a.chosen_predicted_layers;
  d.wait_seconds = b.wait_seconds - a.wait_seconds;
  d.read_busy_seconds = b.read_busy_seconds - a.read_busy_seconds;
  return d;
}

v4::ExpertCacheStats disk_stats(const Bench& b) {
  const v4::ExpertCache* c = b.e.runner->model().expert_cache();
  return c ? c->stats() : v4::ExpertCacheStats{};
}

// pp at `depth`: a first request (the depth's tokens, prompt only) leaves its state in the
// prefix cache; a second one, the same tokens and n_prefill more, reuses it (checked in the
// engine's counters) and prefills the n_prefill in one step (one chunk: the step budget
// holds them), timed to its first token. Also the bytes the first one's state holds.
void measure_prefill(Bench& b, Run& r, int64_t n_prefill, const std::vector<int32_t>& context,
                     const std::vector<int32_t>& prompt) {
  engine::EngineCore& core = b.core();
  dist::Communicator& comm = world();
  const int64_t depth = int64_t(context.size());
  core.drop_prefix_cache();
  if (depth > 0) {
    auto fill = submit(b, context, 0);
    step_until(b);
    expect_finished(*fill, "context");
    r.kv_held_bytes = double(b.e.runner->state_bytes());  // the prefix cache holds only its state
  } else {
    r.kv_held_bytes = double(b.e.info.kv_fixed_blocks_per_seq * b.e.info.kv_block_bytes);  // a state's fixed blocks
  }
  std::vector<int32_t> tokens = context;
  tokens.insert(tokens.end(), prompt.begin(), prompt.end());
  const EngineStats before = core.stats();
  auto rec = submit(b, std::move(tokens), 1);
  const uint64_t dispatches0 = b.e.runner->pool().dispatches();
  const v4::ExpertCacheStats disk0 = disk_stats(b);
  comm.reset_stats();
  profile::reset();
  const int64_t prefill_t0 = profile::now_ns();
  const Clock::time_point t0 = Clock::now();
  int64_t steps = 0;
  for (; rec->tokens.empty() && core.has_work(); ++steps)
    if (core.step() == 0) throw std::runtime_error("bench: the prefill could not be scheduled (KV pool too small?)");
  expect_finished(*rec, "prefill");
  r.prefill_dispatches = double(b.e.runner->pool().dispatches() - dispatches0);
  r.streamed = b.e.runner->model().expert_cache() != nullptr;
  r.prefill_disk = disk_delta(disk0, disk_stats(b));
  r.prefill_tok_s = double(n_prefill) / std::chrono::duration<double>(rec->first_token - t0).count();
  if (profile::enabled()) {
    std::fprintf(stderr, "prefill profile at depth %lld (%lld tokens; %% of the prefill time):\n", (long long)depth,
                 (long long)n_prefill);
    profile::report(stderr, profile::now_ns() - prefill_t0);
  }
  r.prefill_comm_s = comm.stats().seconds / double(n_prefill);
  r.prefill_comm_bytes = double(comm.stats().bytes_received) / double(n_prefill);
  const EngineStats after = core.stats();
  const uint64_t hit = after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens;
  const uint64_t computed = after.tokens_computed_total - before.tokens_computed_total;
  if (steps != 1 || hit != uint64_t(depth) || computed != uint64_t(n_prefill))
    throw std::logic_error("bench: the prefill at depth " + std::to_string(depth) + " took " + std::to_string(steps) +
                           " steps for " + std::to_string(computed) + " tokens after a prefix-cache hit of " +
                           std::to_string(hit) + " tokens (want 1 step, " + std::to_string(n_prefill) + " tokens, " +
                           std::to_string(depth) + " reused)");
  log_info("depth %lld: prefill of %lld tokens in one engine step after %llu tokens from the prefix cache",
           (long long)depth, (long long)n_prefill, (unsigned long long)hit);
}

// tg at `depth`: one greedy request whose prompt is the depth's tokens and `next`; the
// n_decode decode steps after its first token (each one forward of one token, the first at
// position depth + 1) timed from the first token's event to the last's, as llama-bench's
// tg. check_row: the logits that predict position depth + n_decode (the last decoded
// token's, fed at depth + n_decode - 1), and *fed the tokens that reach it.
void measure_decode(Bench& b, Run& r, int64_t n_decode, std::vector<int32_t> tokens, std::vector<float>* check_row,
                    std::vector<int32_t>* fed) {
  engine::EngineCore& core = b.core();
  dist::Communicator& comm = world();
  const v4::Config& c = b.config();
  const int64_t depth = int64_t(tokens.size()) - 1;
  core.drop_prefix_cache();
  HookReset<decltype(core.on_logits)> reset{core.on_logits};
  if (check_row)
    core.on_logits = [&, depth, n_decode](uint64_t, int64_t pos, const float* row) {
      if (pos == depth + n_decode) check_row->assign(row, row + c.vocab_size);
    };
  int64_t profile_t0 = 0;
  uint64_t dispatches0 = 0;
  v4::ExpertCacheStats disk0;
  const std::vector<int32_t> prompt = tokens;
  auto rec = submit(b, std::move(tokens), n_decode + 1);
  rec->on_first_token = [&] {
    dispatches0 = b.e.runner->pool().dispatches();
    disk0 = disk_stats(b);
    profile::reset();
    comm.reset_stats();
    profile_t0 = profile::now_ns();
  };
  step_until(b);
  expect_finished(*rec, "decode");
  r.decode_dispatches_per_token = double(b.e.runner->pool().dispatches() - dispatches0) / double(n_decode);
  r.decode_disk = disk_delta(disk0, disk_stats(b));
  r.decode_tok_s = rec->decode_tok_s();
  r.decode_comm_s = comm.stats().seconds / double(n_decode);
  r.decode_comm_bytes = double(comm.stats().bytes_received) / double(n_decode);
  if (profile::enabled()) {
    std::fprintf(stderr, "decode profile at depth %lld (%lld tokens; %% of the decode time):\n", (long long)depth,
                 (long long)n_decode);
    profile::report(stderr, profile::now_ns() - profile_t0);
  }
  for (int64_t i = 0; i < n_decode; ++i) r.kv_bytes += double(kv_bytes_per_token(c, depth + 1 + i));
  r.kv_bytes /= double(n_decode);
  if (fed) {
    *fed = prompt;
    fed->insert(fed->end(), rec->tokens.begin(), rec->tokens.begin() + (n_decode - 1));
  }
}

// The logits the engine's decode gave (`row`) against one prefill's over the same tokens
// (check_chunk > 0: chunks of that many) on a fresh sequence: a direct model call, the
// independent side of the check.
void check_against_prefill(const Bench& b, Run& r, const std::vector<int32_t>& seen, const std::vector<float>& row,
                           int64_t check_chunk) {
  const v4::Model& model = b.model();
  const v4::Config& c = model.config();
  if (int64_t(row.size()) != c.vocab_size) throw std::logic_error("bench: no logits row of the last decoded token");
  auto fresh = model.new_sequence();
  std::vector<float> want(c.vocab_size);
  const int64_t n = int64_t(seen.size()), step = check_chunk > 0 ? check_chunk : n;
  for (int64_t i = 0; i < n; i += step) {
    const int64_t len = std::min(step, n - i);
    const std::vector<v4::SequenceChunk> part{{seen.data() + i, len, &fresh, i + len == n ? want.data() : nullptr, false}};
    model.forward_batch(part, b.e.runner->numerics());
  }
  double mean = 0, var = 0, max_diff = 0;
  for (float x : want) mean += x;
  mean /= double(c.vocab_size);
  for (int64_t i = 0; i < c.vocab_size; ++i) {
    var += (want[i] - mean) * (want[i] - mean);
    max_diff = std::max(max_diff, double(std::fabs(row[i] - want[i])));
  }
  const double sd = std::sqrt(var / double(c.vocab_size));
  r.logits_diff_over_std = sd > 0 ? max_diff / sd : (max_diff > 0 ? 1e30 : 0.0);
  r.logits_max_abs_diff = max_diff;
  log_info("depth %lld: the last decoded token's logits vs one prefill over the same %lld tokens: max |diff| %.3g, "
           "%.3g of the logits' std",
           (long long)r.depth, (long long)n, max_diff, r.logits_diff_over_std);
}

// Prefill of n_prefill tokens and greedy decode of n_decode after `depth` tokens of context,
// each its own context; tokens drawn from `draw` (the caller's generator: the same seed
// gives the same prompts).
Run measure_depth(Bench& b, int64_t depth, int64_t n_prefill, int64_t n_decode, const std::function<int32_t()>& draw,
                  bool check_logits, int64_t check_chunk) {
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = draw();
    return t;
  };
  Run r{depth, 0, 0, 0};
  const std::vector<int32_t> context = random_tokens(depth);
  measure_prefill(b, r, n_prefill, context, random_tokens(n_prefill));
  r.kv_spec_held_bytes = kv_spec_bytes(b.config(), depth);

  std::vector<int32_t> tokens = random_tokens(depth);  // the decode request's context, then its first token
  tokens.push_back(draw());
  std::vector<float> row;
  std::vector<int32_t> seen;
  measure_decode(b, r, n_decode, std::move(tokens), check_logits ? &row : nullptr, &seen);
  if (check_logits) check_against_prefill(b, r, seen, row, check_chunk);
  b.core().drop_prefix_cache();
  return r;
}

// `batch` requests at once, each with its own n_prefill tokens and a first token; once all
// of them decode, n_decode engine steps, each one forward of `batch` tokens (one per
// request), are timed; then the requests are cancelled. A routing trace counts the distinct
// experts each step's tokens chose per layer. As in `serve`, the requests decode at
// different positions: prompts of long_prefill_token_threshold (64) tokens or more are
// prefilled one per step, and the first ones decode meanwhile.
BatchRun measure_batch(Bench& b, int64_t batch, int64_t n_prefill, int64_t n_decode,
                       const std::function<int32_t()>& draw) {
  engine::EngineCore& core = b.core();
  const v4::Config& c = b.config();
  core.drop_prefix_cache();
  std::vector<std::shared_ptr<Recorder>> recs;
  std::vector<uint64_t> ids(size_t(batch), 0);
  const int64_t prompt_len = n_prefill + 1;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (auto& x : prompt) x = draw();
    recs.push_back(submit(b, std::move(prompt), -1, &ids[size_t(i)]));
  }
  const uint64_t preemptions = core.stats().preemptions_total;
  // Prefills (not timed) until every request has its first token.
  step_until(b, [&] {
    return std::all_of(recs.begin(), recs.end(), [](const auto& r) { return !r->tokens.empty(); });
  });
  BatchRun r;
  r.batch = batch;
  r.distinct_experts.assign(size_t(c.n_layers), 0.0);
  r.expert_rows.assign(size_t(c.n_layers), std::vector<double>(size_t(batch * c.n_activated_experts + 1), 0.0));
  v4::RoutingTrace trace;
  v4::RoutingTrace* previous = v4::set_routing_trace(&trace);
  profile::reset();
  const int64_t profile_t0 = profile::now_ns();
  double seconds = 0;
  for (int64_t step = 0; step < n_decode; ++step) {
    trace.clear();
    // A request holds its prompt and every token it emitted but the last (the one it feeds).
    for (const auto& rec : recs)
      r.kv_bytes += double(kv_bytes_per_token(c, prompt_len + int64_t(rec->tokens.size()) - 1));
    const Clock::time_point t0 = Clock::now();
    const int64_t ran = core.step();
    seconds += seconds_since(t0);
    if (ran != batch)
      throw std::logic_error("bench: a decode step of batch " + std::to_string(batch) + " ran " + std::to_string(ran) +
                             " tokens");
    for (int64_t l = 0; l < c.n_layers; ++l) {
      r.distinct_experts[size_t(l)] += double(trace.distinct(l));
      if (l < int64_t(trace.chosen.size()))
        for (uint32_t rows : trace.chosen[size_t(l)]) r.expert_rows[size_t(l)][rows] += 1.0;
    }
  }
  r.tok_s = double(batch * n_decode) / seconds;
  v4::set_routing_trace(previous);
  if (profile::enabled()) {
    std::fprintf(stderr, "decode batch %lld profile (%lld steps; %% of the decode time):\n", (long long)batch,
                 (long long)n_decode);
    profile::report(stderr, profile::now_ns() - profile_t0);
  }
  for (uint64_t id : ids) core.abort(id);
  core.drop_prefix_cache();
  if (core.stats().preemptions_total != preemptions)
    throw std::runtime_error("bench: decode batch " + std::to_string(batch) + ": the KV pool was short (preemptions)");
  r.kv_bytes /= double(n_decode);
  for (double& d : r.distinct_experts) d /= double(n_decode);
  for (auto& layer : r.expert_rows)
    for (double& n : layer) n /= double(n_decode);
  r.weight_bytes = v4::batch_weight_bytes_per_step(c, b.model().weights(), r.distinct_experts, batch);
  return r;
}

// A speculative variant: how requests draft, and what replaces their drafts.
enum class Drafts {
  kNone,    // plain decoding: the request does not draft (its runs pay nothing for drafting)
  kModel,   // the checkpoint's drafter, adaptive length
  kWrong,   // the drafter runs (and is paid for) but every draft is replaced by one that
            // differs from the oracle (the plain continuation): every draft is rejected
  kOracle,  // always K drafts, the oracle's: every draft is accepted; the drafter never runs
};

struct SpecRun {
  std::vector<int32_t> tokens;
  double tok_s = 0;
  int64_t verify_steps = 0, drafted = 0, accepted = 0;
};

// One greedy request of n_decode tokens on `prompt`, drafting as `how` says (k: the most
// drafts per step). The oracle: the plain continuation of the prompt.
SpecRun speculative_run(Bench& b, const std::vector<int32_t>& prompt, int64_t n_decode, Drafts how, int64_t k,
                        const std::vector<int32_t>* oracle) {
  engine::EngineCore& core = b.core();
  const int32_t V = int32_t(b.config().vocab_size);
  const int64_t P = int64_t(prompt.size());
  core.drop_prefix_cache();
  core.set_drafting(how == Drafts::kNone ? 0 : k, how != Drafts::kOracle);
  HookReset<decltype(core.replace_drafts)> reset{core.replace_drafts};
  if (how == Drafts::kWrong || how == Drafts::kOracle) {
    if (!oracle || int64_t(oracle->size()) < n_decode) throw std::logic_error("bench: forced drafts need the oracle");
    core.replace_drafts = [how, oracle, P, V](uint64_t, std::span<const int32_t> tokens, int64_t n,
                                              const engine::EngineCore::Drafter& drafter) {
      // Drafts follow the pending token: they stand for the oracle's tokens from `done` on.
      const size_t done = tokens.size() - size_t(P);
      std::vector<int32_t> d;
      if (how == Drafts::kOracle) {
        const size_t end = std::min(oracle->size(), done + size_t(n));
        d.assign(oracle->begin() + std::ptrdiff_t(std::min(done, end)), oracle->begin() + std::ptrdiff_t(end));
      } else {
        d = drafter(n);
        for (size_t i = 0; i < d.size() && done + i < oracle->size(); ++i) d[i] = ((*oracle)[done + i] + 1) % V;
      }
      return d;
    };
  }
  const EngineStats before = core.stats();
  auto rec = submit(b, prompt, n_decode);
  step_until(b);
  expect_finished(*rec, "speculative");
  SpecRun out;
  out.tokens = rec->tokens;
  out.tok_s = rec->decode_tok_s();
  out.verify_steps = int64_t(core.stats().spec_verify_steps - before.spec_verify_steps);
  out.drafted = rec->usage.draft_tokens;
  out.accepted = rec->usage.accepted_draft_tokens;
  return out;
}

// Speculative decoding on `prompt` (see run()): plain greedy decode, which is also the oracle
// continuation; the checkpoint's drafter with its adaptive length; every draft rejected; every
// draft accepted for K = 1..5. Each variant against its own adjacent plain runs (medians of
// spec_rounds pairs). Throws if any variant changes the greedy output. All through the
// engine, which keeps what `serve` keeps between requests: the acceptance that new requests'
// draft policies start from and the measured cost of a draft.
nlohmann::json measure_speculative(Bench& b, const std::vector<int32_t>& prompt, int64_t n_decode, int64_t max_drafts,
                                   int64_t spec_rounds) {
  // Each variant is timed right after a plain run of its own and reported against it, so a
  // machine whose speed drifts (other tenants, memory state) skews the ratios less.
  const SpecRun plain = speculative_run(b, prompt, n_decode, Drafts::kNone, 0, nullptr);
  double plain_sum = plain.tok_s;
  int plain_runs = 1;
  // spec_rounds pairs (a plain run, then the variant); the ratio is the pairs' median, so
  // one pair that a stall of the machine hit moves it little. *out: the last variant run.
  auto against_plain = [&](Drafts how, int64_t k, SpecRun* out, nlohmann::json* ratios) {
    std::vector<double> r;
    for (int64_t round = 0; round < spec_rounds; ++round) {
      const double base = speculative_run(b, prompt, n_decode, Drafts::kNone, 0, nullptr).tok_s;
      plain_sum += base;
      ++plain_runs;
      profile::reset();
      const int64_t profile_t0 = profile::now_ns();
      *out = speculative_run(b, prompt, n_decode, how, k, &plain.tokens);
      if (profile::enabled()) {
        std::fprintf(stderr, "speculative profile (%s drafts, K=%lld, %lld verify steps; %% of the time):\n",
                     how == Drafts::kOracle  ? "all-accepted"
                     : how == Drafts::kWrong ? "all-rejected"
                                             : "model",
                     (long long)k, (long long)out->verify_steps);
        profile::report(stderr, profile::now_ns() - profile_t0);
      }
      if (out->tokens != plain.tokens) throw std::runtime_error("bench: speculative decoding changed the greedy output");
      r.push_back(out->tok_s / base);
    }
    *ratios = r;
    return summarize(r).median;
  };
  SpecRun own, wrong;  // the checkpoint's drafts; every draft replaced by a wrong one
  nlohmann::json own_runs, wrong_runs, full_runs = nlohmann::json::object();
  const double own_speedup = against_plain(Drafts::kModel, max_drafts, &own, &own_runs);
  const double wrong_speedup = against_plain(Drafts::kWrong, max_drafts, &wrong, &wrong_runs);
  nlohmann::json full = nlohmann::json::object();
  for (int64_t k = 1; k <= std::min<int64_t>(5, max_drafts); ++k) {
    SpecRun r;
    full[std::to_string(k)] = against_plain(Drafts::kOracle, k, &r, &full_runs[std::to_string(k)]);
    log_info("speculative: every draft accepted, K=%lld: %.2f tok/s (%.2fx plain)", (long long)k, r.tok_s,
             double(full[std::to_string(k)]));
  }
  b.core().set_drafting(0, true);
  const double base = plain_sum / plain_runs;
  const double acc = own.drafted ? double(own.accepted) / double(own.drafted) : 0.0;
  const std::string mode = b.model().drafter() == v4::Model::Drafter::kDspark ? "dspark" : "mtp";
  // The adaptive draft length's cost model (in plain decode steps, from bytes read).
  const v4::Model::DraftCosts cost = b.model().draft_costs();
  const double draft_cost = mode == "dspark" ? cost.per_step : cost.per_draft;
  log_info("speculative: cost model %s draft %.3f plain steps %s, verify %.3f per token", mode.c_str(), draft_cost,
           mode == "dspark" ? "per drafting step" : "per draft", cost.verify_per_token);
  const nlohmann::json spec = {{"mode", mode},
                               {"num_draft_tokens", max_drafts},
                               {"acceptance_rate", acc},
                               {"mean_accepted_per_verify",
                                own.verify_steps ? double(own.accepted) / double(own.verify_steps) : 0.0},
                               {"drafted_tokens", own.drafted},
                               {"accepted_tokens", own.accepted},
                               {"decode_tok_s", own.tok_s},
                               {"plain_decode_tok_s", base},
                               {"speedup", own_speedup},
                               {"greedy_output_equal", own.tokens == plain.tokens},
                               {"full_acceptance_speedup", full},
                               {"zero_acceptance_speedup", wrong_speedup},
                               {"spec_rounds", spec_rounds},
                               {"speedup_runs", own_runs},
                               {"zero_acceptance_speedup_runs", wrong_runs},
                               {"full_acceptance_speedup_runs", full_runs},
                               {"zero_acceptance_verify_steps", wrong.verify_steps},
                               {"cost_model", {{"draft", draft_cost}, {"verify_per_token", cost.verify_per_token}}},
                               {"n_decode", n_decode}};
  log_info("speculative: plain %.2f tok/s (mean of %d runs); %s drafts %.2f tok/s (%.2fx, acceptance %.2f); all "
           "rejected %.2fx",
           base, plain_runs, mode.c_str(), own.tok_s, own_speedup, acc, wrong_speedup);
  return spec;
}

// The blocks of KV memory the bench's requests hold at most at once (each phase drops the
// prefix cache first): a context state and the prefill that extends it; a decode request
// (its prompt, n_decode + 1 tokens); `batch` requests that decode while the others still
// prefill (at most one step per `budget` prompt tokens of each); a speculative run's request
// (up to 7 drafts past its tokens).
int64_t kv_blocks_needed(const kv::KvSpec& spec, const std::vector<int64_t>& depths, const std::vector<int64_t>& batches,
                         int64_t n_prefill, int64_t n_decode, int64_t budget) {
  int64_t most = spec.blocks_for(std::min<int64_t>(n_prefill, 128) + n_decode + 8);
  for (int64_t d : depths)
    most = std::max({most, spec.blocks_for(d) + spec.blocks_for(d + n_prefill), spec.blocks_for(d + 1 + n_decode + 1)});
  for (int64_t b : batches) {
    const int64_t prefill_steps = b * ((n_prefill + 1 + budget - 1) / budget + 1);
    most = std::max(most, b * spec.blocks_for(n_prefill + 1 + prefill_steps + n_decode + 1));
  }
  return most + 1;
}

// The engine `serve` runs, with what the measurements need: no drafting unless asked for
// (--speculative); a step budget that prefills n_prefill tokens in one chunk (and fills
// contexts 512 tokens at a time, as before) and decodes the largest batch in one step;
// prefix-cache snapshots of finished requests only (a checkpoint at every 512 prompt tokens
// would end a prefill chunk there); KV memory for the largest phase, at least the default.
EngineOptions bench_engine_options(const Args& args, const std::vector<int64_t>& depths,
                                   const std::vector<int64_t>& batches, int64_t n_prefill, int64_t n_decode) {
  EngineOptions eo = engine_options_from_args(args);
  eo.speculative = args.get_or("--speculative", "off");
  const int64_t most_batch = batches.empty() ? 1 : *std::max_element(batches.begin(), batches.end());
  eo.max_running = std::max<int64_t>(32, most_batch);
  eo.max_batch_tokens = std::max<int64_t>({512, n_prefill, eo.max_running + 1});
  eo.prefix_cache_granularity = 0;
  const kv::KvSpec spec = kv::KvSpec::make(v4::kv_layout_of(config_arg(args)), eo.kv_block_tokens);
  const int64_t need = kv_blocks_needed(spec, depths, batches, n_prefill, n_decode, eo.max_batch_tokens);
  eo.num_kv_blocks = std::max(need, EngineOptions::kDefaultKvMemoryBytes / spec.block_bytes);
  return eo;
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--memory-limit", "--prefill", "--decode", "--depths", "--numerics", "--threads", "--kernels", "--speculative",
                   "--num-draft-tokens", "--spec-rounds", "--decode-batches", "--check-chunk", "--synthetic", "--seed",
                   "--save", "--server-bandwidth", "--server-cores"},
            {"--json", "--csv", "--profile", "--verify-weights", "--expert-parallel", "--numa", "--check-depth-logits",
             "--per-core"});
  check_synthetic_flags(args);
  if (args.has("--profile")) profile::set_enabled(true);
  const int64_t n_prefill = args.get_int("--prefill", 512), n_decode = args.get_int("--decode", 128);
  if (n_prefill < 1 || n_decode < 1) throw ArgError("--prefill and --decode must be >= 1");
  const int64_t spec_rounds = args.get_int("--spec-rounds", 1);
  if (spec_rounds < 1 || spec_rounds > 99) throw ArgError("--spec-rounds must be 1..99");
  const auto depths = parse_int_list(args.get_or("--depths", "0"), "--depths", 0, LONG_MAX, "0,2048,8192");
  const std::vector<int64_t> batches =
      args.get("--decode-batches")
          ? parse_int_list(*args.get("--decode-batches"), "--decode-batches", 1, 4096, "1,4,16,32")
          : std::vector<int64_t>{};
  const bool check_logits = args.has("--check-depth-logits");
  const bool per_core = args.has("--per-core");
  const double server_bw = args.get_double("--server-bandwidth", 460.0);
  const int64_t server_cores = args.get_int("--server-cores", 32);
  if (!(server_bw > 0) || server_cores < 1) throw ArgError("--server-bandwidth must be > 0 (GB/s) and --server-cores >= 1");
  const int64_t check_chunk = args.get_int("--check-chunk", 0);
  if (check_chunk < 0) throw ArgError("--check-chunk must be >= 0");
  dist::Communicator& comm = world();
  if (check_logits && comm.size() > 1)
    throw ArgError("--check-depth-logits: its one-prefill side is a single-process model call; run it without mpirun");

  const EngineOptions eo = bench_engine_options(args, depths, batches, n_prefill, n_decode);
  if (comm.rank() > 0) {  // mpirun: the other ranks run rank 0's engine steps
    run_engine_worker(eo);
    int64_t rss = peak_rss_bytes();
    std::vector<int64_t> rss_ranks(size_t(comm.size()));
    comm.allgather_bytes(&rss, sizeof rss, rss_ranks.data());
    return 0;
  }
  const bool synthetic = synthetic_arg(args);
  if (synthetic) {
    // The weights in memory, built before the engine starts; the memory check counts the KV
    // arena the engine then allocates and a margin for the activations.
    const kv::KvSpec spec = kv::KvSpec::make(v4::kv_layout_of(config_arg(args)), eo.kv_block_tokens);
    const uint64_t kv_bytes = uint64_t(eo.num_kv_blocks) * uint64_t(spec.block_bytes);
    prepare_synthetic_arg(args, kv_bytes + (uint64_t(1) << 30),
                          "the KV pool of " + std::to_string(kv_bytes) + " bytes and 1 GiB of working memory");
  }
  Bench b{flag_errors_as_arg_errors([&] { return engine::create_local_engine(eo); })};
  if (synthetic) release_synthetic_arg(args);  // the engine's model holds the weights now
  const engine::ModelRunner& runner = *b.e.runner;
  const v4::Numerics& num = runner.numerics();
  const v4::Config& c = b.config();
  log_info("bench: %s kernels, %d threads, %s numerics", num.backend->name(), runner.pool().size(),
           v4::numerics_name(num.mode));

  // Bandwidth is measured before and after the runs (the machine's may drift, e.g. with other
  // tenants) and the roofline uses their mean. On several ranks rank 0 measures it while the
  // others wait for its first step (their own triads would share the memory bus with it).
  const double bw_before = triad_bandwidth_gb_s(&runner.pool());
  // The compute side of the batched decode roofline: only when batches are measured.
  const double fma_peak = batches.empty() ? 0.0 : num.backend->fma_peak_macs_per_s();
  const double dot_peak = batches.empty() ? 0.0 : num.backend->bf16_dot_peak_macs_per_s();
  if (!reset_peak_rss()) log_warn("bench: cannot reset the peak RSS; it includes the triad's arrays");
  const v4::Weights& w = b.model().weights();
  const int64_t wbytes = v4::active_weight_bytes_per_token(c, w);
  const int64_t macs = v4::active_weight_macs_per_token(c, w);
  // A prompt is prefilled the way a server (and llama-bench's pp) runs it: logits of the last
  // row only, so the output head runs once per prompt, not once per token.
  const int64_t head_macs = w.head.rows * w.head.cols + w.hc_head.fn.rows * w.hc_head.fn.cols;
  const double prefill_flop = 2.0 * (double(n_prefill) * double(macs - head_macs) + double(head_macs));

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(c.vocab_size - 1));
  // Text only: never the V4.1 image placeholder.
  auto draw = [&] {
    int32_t x = tok(rng);
    return x == c.image_token_id ? x - 1 : x;
  };
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = draw();
    return t;
  };
  // Depths and batches decode plainly, whatever --speculative says.
  b.core().set_drafting(0, true);
  std::vector<Run> runs;
  for (int64_t depth : depths) {
    runs.push_back(measure_depth(b, depth, n_prefill, n_decode, draw, check_logits, check_chunk));
    const Run& r = runs.back();
    log_info("depth %lld: prefill %.2f tok/s, decode %.2f tok/s", (long long)depth, r.prefill_tok_s, r.decode_tok_s);
  }
  std::vector<BatchRun> batch_runs;
  for (int64_t batch : batches) {
    batch_runs.push_back(measure_batch(b, batch, n_prefill, n_decode, draw));
    const BatchRun& r = batch_runs.back();
    log_info("decode batch %lld: %.2f tok/s, %.1f distinct experts per layer", (long long)batch, r.tok_s,
             r.distinct_mean());
  }
  // Speculative decoding, on one fresh prompt: plain greedy decode (which is also the oracle
  // continuation), the checkpoint's drafter with its adaptive draft length, every draft
  // accepted (the oracle as drafts) for K = 1..5, and every draft rejected (drafts run, then
  // replaced).
  // (Only when asked for: --speculative auto|mtp|dspark, on a checkpoint that drafts.)
  const int64_t max_drafts = b.e.info.num_draft_tokens;
  nlohmann::json spec;
  if (max_drafts > 0)
    spec = measure_speculative(b, random_tokens(std::min<int64_t>(n_prefill, 128)), n_decode, max_drafts, spec_rounds);

  Report rep;
  if (per_core) {
    log_info("bench: per-core rates of the decode products (one thread, weights from DRAM)");
    rep.per_core = measure_per_core(b.model(), args.get_or("--kernels", "cpu"), num.mode == v4::NumericsMode::Reference);
  }
  rep.server_core_share = server_bw * 1e9 / double(server_cores);
  rep.server_bw = server_bw;
  rep.server_cores = server_cores;
  rep.runs = std::move(runs);
  rep.batch_runs = std::move(batch_runs);
  rep.spec = std::move(spec);
  rep.max_drafts = max_drafts;
  rep.n_prefill = n_prefill;
  rep.n_decode = n_decode;
  rep.wbytes = wbytes;
  rep.prefill_flop = prefill_flop;
  rep.check_logits = check_logits;
  rep.check_chunk = check_chunk;
  rep.threads = runner.pool().size();
  rep.n_layers = std::max<int64_t>(1, c.n_layers);
  rep.barrier_s = barrier_seconds(runner.pool());
  rep.ranks = comm.size();
  rep.kernels_name = num.backend->name();
  rep.kernels_arg = args.get_or("--kernels", "cpu");
  rep.numerics = v4::numerics_name(num.mode);
  if (synthetic)
    rep.synthetic = {{"config", args.require("--synthetic")}, {"seed", args.get_int("--seed", 0)}};
  rep.rss = peak_rss_bytes();
  rep.bw_before = bw_before;
  rep.bw_after = triad_bandwidth_gb_s(&runner.pool());
  rep.bw = 0.5 * (rep.bw_before + rep.bw_after);
  rep.fma_peak = fma_peak;
  rep.dot_peak = dot_peak;
  // Reference numerics multiplies bf16-exact rows (act-quantised, or held in bf16 by the
  // reference) of FP8 / FP4 / BF16 weights, which the kernels may run on the bf16 dot-product
  // instruction: those products get the faster of the two rates; float numerics' products are
  // fp32 FMAs. (The JSON key keeps its name, fp8_fp4_product_peak_gflop_s.)
  rep.quantized_peak = num.mode == v4::NumericsMode::Reference ? std::max(fma_peak, dot_peak) : fma_peak;
  for (BatchRun& r : rep.batch_runs) {
    r.bound = v4::batch_step_bound(c, w, r.expert_rows, r.batch, rep.bw * 1e9, fma_peak, rep.quantized_peak);
    r.bound.memory_s += r.kv_bytes / (rep.bw * 1e9);
    r.bound.bound_s += r.kv_bytes / (rep.bw * 1e9);
  }
  // Every rank's peak (each holds its share of the experts), for rank 0 to print: the
  // workers leave their step loop when rank 0's engine is gone.
  b = Bench{};
  rep.rss_ranks.resize(size_t(comm.size()));
  comm.allgather_bytes(&rep.rss, sizeof rep.rss, rep.rss_ranks.data());
  rep.analyse_depths();
  if (rep.check_logits && !rep.logits_ok())
    log_warn("bench: decode logits differ from one prefill's by %.3g of their std (> %g)", rep.worst_logits,
             kLogitsTolerance);
  if (args.has("--json")) std::printf("%s\n", report_json(rep).dump().c_str());
  else print_report(rep, args.has("--csv"));
  return rep.check_logits && !rep.logits_ok() ? 1 : 0;
}

CommandRegistration reg("bench", "prefill / decode speed at context depths vs the memory roofline", run,
                        "usage: deepinfer bench [--model DIR | --synthetic CONFIG.json] [options]\n\n"
                        DI_USAGE_MODEL DI_USAGE_SYNTHETIC
                        "  --prefill N                  prompt tokens per measurement (default 512)\n"
                        "  --decode N                   decoded tokens per measurement (default 128)\n"
                        "  --depths D1,D2,...           context depths to measure at (default 0)\n"
                        "  --decode-batches B1,B2,...   also decode B requests at once (one forward of B tokens per\n"
                        "                               step), each with its own --prefill tokens; tok/s against the\n"
                        "                               roofline of the bytes the batch reads and the multiply-adds\n"
                        "                               it does (FMA peak measured in the same run)\n"
                        "  --check-depth-logits         at each depth, compare the last decoded token's logits with one\n"
                        "                               prefill's over the same tokens; exit 1 above 1e-4 of their std\n"
                        "  --check-chunk N              that prefill in chunks of N tokens (default 0: one chunk)\n"
                        "  --per-core                   also each decode product's weight bytes per second on one core\n"
                        "                               (routed experts at 1, 2, 4, 12 rows; shared expert, attention,\n"
                        "                               head at 1), the weights cycled from DRAM, against one core's\n"
                        "                               share of --server-bandwidth GB/s (460) over --server-cores (32)\n"
                        "  --json                       JSON output\n"
                        "  --csv                        CSV output\n"
                        "  --profile                    time of each forward section in prefill and decode, on stderr\n"
                        "                               (also DEEPINFER_PROFILE=1 for any command)\n"
                        "  --spec-rounds N              with --speculative: each variant N times, each time against a\n"
                        "                               plain run just before it; the median ratio (default 1)\n"
                        "  (bench: --speculative is off unless given; the depths and batches always decode plainly)\n"
                        DI_USAGE_COMPUTE DI_USAGE_SPECULATIVE
                        DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
