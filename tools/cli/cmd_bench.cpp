// deepinfer bench --model DIR [--prefill 512] [--decode 128] [--depths 0,2048,8192]
//                 [--decode-batches 1,4,16,32] [--check-depth-logits [--check-chunk N]]
//                 [--numerics reference|float] [--threads N] [--kernels cpu|ref] [--json | --csv]
// Loads the model once; for every context depth d (llama-bench style):
//   pp: a fresh sequence is filled to depth d, then `prefill` tokens are timed in one call
//       that returns the last row's logits (as a server prefill and llama-bench do);
//   tg: a fresh sequence is filled to depth d, then `decode` greedy tokens are timed one by one.
// Also measures this machine's memory bandwidth with a STREAM-like triad in the same run and
// reports decode speed against the roofline bandwidth / (weight + KV bytes read per token).
// --decode-batches: B fresh sequences decode one token each per forward; the roofline counts
// each matrix the batch reads (the distinct experts its tokens chose, the rest once) at the
// slower of its bytes over the bandwidth and its multiply-adds (B rows; an expert, the tokens
// that chose it) over the FMA peak, both measured in the same run.
// --check-depth-logits: at each depth, the last decoded token's logits against those of one
// prefill over the same tokens on a fresh sequence.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "args.h"
#include "command.h"
#include "core/cpu_features.h"
#include "core/profile.h"
#include "kernels/cpu/cpu_backend.h"
#include "core/log.h"
#include "model/deepseek_v4/routing_trace.h"
#include "model_cli.h"
#include "spec_decode.h"
#include "summary.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best-of-5 triad a = b + s*c over arrays far larger than the caches; counts 3 streams.
double triad_bandwidth_gb_s(ThreadPool* pool) {
  const int64_t n = int64_t(1) << 25;  // 32 Mi floats = 128 MiB per array
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  auto pass = [&] {
    parallel_for(pool, n, 1 << 16, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) a[i] = b[i] + s * c[i];
    });
  };
  pass();  // first touch
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    pass();
    best = std::min(best, seconds_since(t0));
  }
  if (a[n / 2] != 7.0f) throw std::runtime_error("triad check failed");
  return 3.0 * double(n) * sizeof(float) / best / 1e9;
}

// Peak resident set since start or the last reset_peak_rss(): VmHWM of /proc/self/status.
int64_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    std::fclose(f);
    if (kb >= 0) return int64_t(kb) * 1024;
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

// Starts the peak over from the current resident set (Linux: "5" to /proc/self/clear_refs),
// so the triad's 384 MB of arrays do not count as the model's memory. False if it cannot.
bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

// KV bytes a decode step at position p reads (window ring + visible compressed entries),
// as DeepInfer stores them (fp32).
int64_t kv_bytes_per_token(const v4::Config& c, int64_t p) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    bytes += std::min(p + 1, c.window) * c.head_dim * 4;
    const int64_t r = c.ratio(l);
    if (c.v41()) {  // shared caches: a top-k of entries; index sources score keys (candidates only when restricted)
      if (r == 0) continue;
      const int64_t n = (p + 1) / r;
      bytes += std::min(c.index_topk, n) * c.head_dim * 4;
      if (c.is_index_source(l))
        bytes += (c.uses_candidates(l) ? std::min(n, c.candidate_topk_blocks * c.candidate_block_size) : n) *
                 c.index_head_dim * 4;
    } else if (r == 4) {
      bytes += std::min(c.index_topk, (p + 1) / 4) * c.head_dim * 4 + ((p + 1) / 4) * c.index_head_dim * 4;
    } else if (r != 0) {
      bytes += ((p + 1) / r) * c.head_dim * 4;
    }
  }
  return bytes;
}

// KV bytes a sequence of n tokens holds by the KV spec (fp32 rows, no page rounding): per
// layer its window ring, its compressed entries and the indexer keys of the layers that own
// them. Excludes the MTP rings.
double kv_spec_bytes(const v4::Config& c, int64_t n) {
  double bytes = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    bytes += double(std::min(n, c.window) * c.head_dim * 4);
    const int64_t r = c.ratio(l);
    if (r == 0) continue;
    if (c.owns_compressor(l)) bytes += double((n / r) * c.head_dim * 4);
    if (c.owns_index_keys(l)) bytes += double((n / r) * c.index_head_dim * 4);
  }
  return bytes;
}

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

struct Run {
  int64_t depth;
  double prefill_tok_s, decode_tok_s, kv_bytes;
  // The decode sequence's state after the depth's tokens: bytes held (pages, fixed rows, MTP
  // rings included) and by the KV spec.
  double kv_held_bytes = 0, kv_spec_held_bytes = 0;
  // --check-depth-logits: max |decode - prefill| / std(prefill logits) of the last decoded
  // token (-1: not checked).
  double logits_diff_over_std = -1, logits_max_abs_diff = -1;
  // Expert parallel: this rank's time in collectives and bytes received, per token.
  double prefill_comm_s = 0, prefill_comm_bytes = 0, decode_comm_s = 0, decode_comm_bytes = 0;
};

// Prefill of n_prefill tokens and greedy decode of n_decode after `depth` tokens of context,
// each on a fresh sequence; tokens drawn from `draw` (the caller's generator: the same seed
// gives the same prompts).
Run measure_depth(const v4::Model& model, const Compute& compute, int64_t depth, int64_t n_prefill, int64_t n_decode,
                  const std::function<int32_t()>& draw, bool check_logits, int64_t check_chunk) {
  const v4::Config& c = model.config();
  dist::Communicator& comm = world();
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = draw();
    return t;
  };
  Run r{depth, 0, 0, 0};
  comm.reset_stats();
  auto st = model.new_sequence();
  if (depth > 0) run_chunked(model, random_tokens(depth), 512, st, compute.num, nullptr);
  auto prompt = random_tokens(n_prefill);
  std::vector<float> last_logits(c.vocab_size);
  const std::vector<v4::SequenceChunk> chunk{{prompt.data(), n_prefill, &st, last_logits.data(), false}};
  profile::reset();
  const int64_t prefill_t0 = profile::now_ns();
  auto t0 = Clock::now();
  model.forward_batch(chunk, compute.num);
  r.prefill_tok_s = double(n_prefill) / seconds_since(t0);
  if (profile::enabled()) {
    std::fprintf(stderr, "prefill profile at depth %lld (%lld tokens; %% of the prefill time):\n", (long long)depth,
                 (long long)n_prefill);
    profile::report(stderr, profile::now_ns() - prefill_t0);
  }
  r.prefill_comm_s = comm.stats().seconds / double(n_prefill);
  r.prefill_comm_bytes = double(comm.stats().bytes_received) / double(n_prefill);

  st = model.new_sequence();
  std::vector<int32_t> seen = random_tokens(depth);  // every token the decode sequence is fed
  if (depth > 0) run_chunked(model, seen, 512, st, compute.num, nullptr);
  r.kv_held_bytes = double(st.bytes());
  r.kv_spec_held_bytes = kv_spec_bytes(c, depth);
  int32_t next = draw();
  std::vector<float> row(c.vocab_size);
  profile::reset();
  comm.reset_stats();
  const int64_t profile_t0 = profile::now_ns();
  t0 = Clock::now();
  for (int64_t i = 0; i < n_decode; ++i) {
    r.kv_bytes += double(kv_bytes_per_token(c, st.n_past));
    seen.push_back(next);
    model.forward(&next, 1, st, compute.num, row.data());
    next = argmax_lowest(row.data(), c.vocab_size);
  }
  r.decode_tok_s = double(n_decode) / seconds_since(t0);
  r.decode_comm_s = comm.stats().seconds / double(n_decode);
  r.decode_comm_bytes = double(comm.stats().bytes_received) / double(n_decode);
  if (profile::enabled()) {
    std::fprintf(stderr, "decode profile at depth %lld (%lld tokens; %% of the decode time):\n", (long long)depth,
                 (long long)n_decode);
    profile::report(stderr, profile::now_ns() - profile_t0);
  }
  r.kv_bytes /= double(n_decode);
  if (check_logits) {
    // The same tokens in one prefill (check_chunk > 0: chunks of that many) on a fresh sequence;
    // only its last row's logits.
    auto fresh = model.new_sequence();
    std::vector<float> want(c.vocab_size);
    const int64_t n = int64_t(seen.size()), step = check_chunk > 0 ? check_chunk : n;
    for (int64_t i = 0; i < n; i += step) {
      const int64_t len = std::min(step, n - i);
      const std::vector<v4::SequenceChunk> part{{seen.data() + i, len, &fresh, i + len == n ? want.data() : nullptr, false}};
      model.forward_batch(part, compute.num);
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
             (long long)depth, (long long)n, max_diff, r.logits_diff_over_std);
  }
  return r;
}

struct BatchRun {
  int64_t batch = 0;
  double tok_s = 0;
  // Per step (one forward of `batch` tokens), means over the steps.
  double weight_bytes = 0, kv_bytes = 0;
  std::vector<double> distinct_experts;  // per layer
  // expert_rows[l][r]: experts of layer l whose products had r rows (batch_step_bound's input).
  std::vector<std::vector<double>> expert_rows;
  // The step's least time at the run's bandwidth and FMA peak, its KV reads included (set
  // once both are known; see v4::batch_step_bound).
  v4::StepBound bound;
  double roofline_tok_s() const { return double(batch) / bound.bound_s; }
  double memory_roofline_tok_s() const { return double(batch) / bound.memory_s; }
  double compute_roofline_tok_s() const { return bound.compute_s > 0 ? double(batch) / bound.compute_s : 0.0; }
  double distinct_mean() const {
    double s = 0;
    for (double d : distinct_experts) s += d;
    return distinct_experts.empty() ? 0.0 : s / double(distinct_experts.size());
  }
};

// `batch` fresh sequences, each prefilled with its own n_prefill tokens (not timed), then
// n_decode steps in which every sequence decodes one greedy token, all in one forward_batch.
// A routing trace counts the distinct experts each step's tokens chose per layer.
BatchRun measure_batch(const v4::Model& model, const Compute& compute, int64_t batch, int64_t n_prefill,
                       int64_t n_decode, const std::function<int32_t()>& draw) {
  const v4::Config& c = model.config();
  const int64_t V = c.vocab_size;
  std::vector<v4::SequenceState> states;
  states.reserve(size_t(batch));
  std::vector<int32_t> next(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt(static_cast<size_t>(n_prefill));
    for (auto& x : prompt) x = draw();
    states.push_back(model.new_sequence());
    run_chunked(model, prompt, 512, states.back(), compute.num, nullptr);
    next[size_t(b)] = draw();
  }
  std::vector<float> logits(static_cast<size_t>(batch * V));
  std::vector<v4::SequenceChunk> chunks;
  for (int64_t b = 0; b < batch; ++b) chunks.push_back({&next[size_t(b)], 1, &states[size_t(b)], &logits[size_t(b * V)], false});
  BatchRun r;
  r.batch = batch;
  r.distinct_experts.assign(size_t(c.n_layers), 0.0);
  r.expert_rows.assign(size_t(c.n_layers), std::vector<double>(size_t(batch * c.n_activated_experts + 1), 0.0));
  v4::RoutingTrace trace;
  v4::RoutingTrace* previous = v4::set_routing_trace(&trace);
  profile::reset();
  const int64_t profile_t0 = profile::now_ns();
  const auto t0 = Clock::now();
  for (int64_t step = 0; step < n_decode; ++step) {
    trace.clear();
    for (const auto& st : states) r.kv_bytes += double(kv_bytes_per_token(c, st.n_past));
    model.forward_batch(chunks, compute.num);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      r.distinct_experts[size_t(l)] += double(trace.distinct(l));
      if (l < int64_t(trace.chosen.size()))
        for (uint32_t rows : trace.chosen[size_t(l)]) r.expert_rows[size_t(l)][rows] += 1.0;
    }
    for (int64_t b = 0; b < batch; ++b) next[size_t(b)] = argmax_lowest(&logits[size_t(b * V)], V);
  }
  r.tok_s = double(batch * n_decode) / seconds_since(t0);
  v4::set_routing_trace(previous);
  if (profile::enabled()) {
    std::fprintf(stderr, "decode batch %lld profile (%lld steps; %% of the decode time):\n", (long long)batch,
                 (long long)n_decode);
    profile::report(stderr, profile::now_ns() - profile_t0);
  }
  r.kv_bytes /= double(n_decode);
  for (double& d : r.distinct_experts) d /= double(n_decode);
  for (auto& layer : r.expert_rows)
    for (double& n : layer) n /= double(n_decode);
  r.weight_bytes = v4::batch_weight_bytes_per_step(c, model.weights(), r.distinct_experts, batch);
  return r;
}

// Speculative decoding on `prompt` (see run()): plain greedy decode, which is also the oracle
// continuation; the checkpoint's drafter with its adaptive length; every draft rejected; every
// draft accepted for K = 1..5. Each variant against its own adjacent plain runs (medians of
// spec_rounds pairs). Throws if any variant changes the greedy output.
nlohmann::json measure_speculative(const v4::Model& model, const Compute& compute, const std::vector<int32_t>& prompt,
                                   int64_t n_decode, int64_t max_drafts, int64_t spec_rounds) {
  auto tok_s = [&](const SpecDecodeResult& r) {
    return r.decode_seconds > 0 ? double(r.tokens.size() - 1) / r.decode_seconds : 0.0;
  };
  // Each variant is timed right after a plain run of its own and reported against it, so a
  // machine whose speed drifts (other tenants, memory state) skews the ratios less.
  SpecDecodeOptions plain_opt;
  plain_opt.max_drafts = 0;
  const SpecDecodeResult plain = spec_decode(model, compute.num, prompt, n_decode, plain_opt);
  double plain_sum = tok_s(plain);
  int plain_runs = 1;
  // spec_rounds pairs (a plain run, then the variant); the ratio is the pairs' median, so
  // one pair that a stall of the machine hit moves it little. *out: the last variant run.
  auto against_plain = [&](const SpecDecodeOptions& o, SpecDecodeResult* out, nlohmann::json* ratios) {
    std::vector<double> r;
    for (int64_t round = 0; round < spec_rounds; ++round) {
      const double base = tok_s(spec_decode(model, compute.num, prompt, n_decode, plain_opt));
      plain_sum += base;
      ++plain_runs;
      profile::reset();
      const int64_t profile_t0 = profile::now_ns();
      *out = spec_decode(model, compute.num, prompt, n_decode, o);
      if (profile::enabled()) {
        std::fprintf(stderr, "speculative profile (%s drafts, K=%lld, %lld verify steps; %% of the time):\n",
                     o.drafts == SpecDecodeOptions::Drafts::kOracle  ? "all-accepted"
                     : o.drafts == SpecDecodeOptions::Drafts::kWrong ? "all-rejected"
                                                                      : "model",
                     (long long)o.max_drafts, (long long)out->verify_steps);
        profile::report(stderr, profile::now_ns() - profile_t0);
      }
      if (out->tokens != plain.tokens) throw std::runtime_error("bench: speculative decoding changed the greedy output");
      r.push_back(tok_s(*out) / base);
    }
    *ratios = r;
    return summarize(r).median;
  };
  SpecDecodeOptions o;
  o.oracle = &plain.tokens;
  o.max_drafts = max_drafts;
  SpecDecodeResult own, wrong;  // the checkpoint's drafts; every draft replaced by a wrong one
  nlohmann::json own_runs, wrong_runs, full_runs = nlohmann::json::object();
  const double own_speedup = against_plain(o, &own, &own_runs);
  o.drafts = SpecDecodeOptions::Drafts::kWrong;
  const double wrong_speedup = against_plain(o, &wrong, &wrong_runs);
  nlohmann::json full = nlohmann::json::object();
  o.drafts = SpecDecodeOptions::Drafts::kOracle;
  o.adaptive = false;
  for (int64_t k = 1; k <= std::min<int64_t>(5, max_drafts); ++k) {
    o.max_drafts = k;
    SpecDecodeResult r;
    full[std::to_string(k)] = against_plain(o, &r, &full_runs[std::to_string(k)]);
    log_info("speculative: every draft accepted, K=%lld: %.2f tok/s (%.2fx plain)", (long long)k, tok_s(r),
             double(full[std::to_string(k)]));
  }
  const double base = plain_sum / plain_runs;
  const double acc = own.drafted ? double(own.accepted) / double(own.drafted) : 0.0;
  const std::string mode = model.drafter() == v4::Model::Drafter::kDspark ? "dspark" : "mtp";
  // The adaptive draft length's cost model (in plain decode steps, from bytes read).
  const v4::Model::DraftCosts cost = model.draft_costs();
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
                               {"decode_tok_s", tok_s(own)},
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
           base, plain_runs, mode.c_str(), tok_s(own), own_speedup, acc, wrong_speedup);
  return spec;
}

// Decode after depth tokens must give the logits one prefill gives (float numerics: within
// 1e-4 of the logits' std).
constexpr double kLogitsTolerance = 1e-4;
// Where the attention cost per token is extrapolated to.
const int64_t kExtrapolateTo[] = {131072, 1048576};

// What one bench run measured, and what the report derives from it.
struct Report {
  std::vector<Run> runs;            // per depth
  std::vector<BatchRun> batch_runs;  // per decode batch
  nlohmann::json spec;              // the speculative variants (null: not asked for)
  int64_t max_drafts = 0, n_prefill = 0, n_decode = 0, wbytes = 0;
  double prefill_flop = 0;
  bool check_logits = false;
  int64_t check_chunk = 0;
  int threads = 1, ranks = 1;
  std::string kernels_name, kernels_arg, numerics;
  int64_t rss = 0;
  std::vector<int64_t> rss_ranks;
  double bw_before = 0, bw_after = 0, bw = 0;  // triad GB/s; the roofline uses their mean
  double fma_peak = 0;  // multiply-adds / s of the products' FMA on every thread (0: not known)
  double dot_peak = 0;  // the same for the bf16 dot-product instruction (0: none)
  double quantized_peak = 0;  // the rate the roofline gives FP8 / FP4 products (see run())
  // From analyse_depths():
  const Run* depth0 = nullptr;
  bool have_slope = false;
  double attention_slope = 0;  // seconds per decoded token per token of context
  double worst_logits = -1;

  double roofline(const Run& r) const { return bw * 1e9 / (double(wbytes) + r.kv_bytes); }
  double prefill_gflop_s(const Run& r) const { return prefill_flop * r.prefill_tok_s / double(n_prefill) / 1e9; }
  // Decode seconds per token at r's depth minus depth 0's.
  double attention_cost(const Run& r) const { return 1.0 / r.decode_tok_s - 1.0 / depth0->decode_tok_s; }
  bool logits_ok() const { return worst_logits <= kLogitsTolerance; }

  // Attention cost per decoded token at each depth (when depth 0 was measured) and a line
  // through the origin fitted to it (least squares) that extrapolates it; the worst logits check.
  void analyse_depths() {
    for (const Run& r : runs)
      if (r.depth == 0) depth0 = &r;
    double num = 0, den = 0;
    if (depth0)
      for (const Run& r : runs) {
        num += double(r.depth) * attention_cost(r);
        den += double(r.depth) * double(r.depth);
      }
    have_slope = depth0 && den > 0;
    attention_slope = have_slope ? num / den : 0.0;
    for (const Run& r : runs) worst_logits = std::max(worst_logits, r.logits_diff_over_std);
  }
};

nlohmann::json report_json(const Report& R) {
  nlohmann::json j;
  const Run& f = R.runs.front();
  j["prefill_tok_s"] = f.prefill_tok_s;
  j["decode_tok_s"] = f.decode_tok_s;
  j["decode_roofline_tok_s"] = R.roofline(f);
  j["decode_roofline_fraction"] = f.decode_tok_s / R.roofline(f);
  j["mem_bandwidth_gb_s"] = R.bw;
  j["mem_bandwidth_samples_gb_s"] = {R.bw_before, R.bw_after};
  if (R.fma_peak > 0) j["fma_peak_gflop_s"] = 2.0 * R.fma_peak / 1e9;
  if (R.dot_peak > 0) j["bf16_dot_peak_gflop_s"] = 2.0 * R.dot_peak / 1e9;
  if (R.quantized_peak > 0) j["fp8_fp4_product_peak_gflop_s"] = 2.0 * R.quantized_peak / 1e9;
  j["peak_rss_bytes"] = R.rss;
  j["ranks"] = R.ranks;
  j["peak_rss_bytes_per_rank"] = R.rss_ranks;
  j["prefill_comm_seconds_per_token"] = f.prefill_comm_s;
  j["prefill_comm_bytes_per_token"] = f.prefill_comm_bytes;
  j["decode_comm_seconds_per_token"] = f.decode_comm_s;
  j["decode_comm_bytes_per_token"] = f.decode_comm_bytes;
  j["weight_bytes_per_token"] = R.wbytes;
  j["kv_bytes_per_token"] = f.kv_bytes;
  j["prefill_gflop_s"] = R.prefill_gflop_s(f);
  j["threads"] = R.threads;
  j["kernels"] = R.kernels_name;
  // Which machine the figures came from: an AVX2 and an AVX-512 CPU differ by far more
  // than run-to-run noise (compute-bound drafter stages above all).
  j["cpu"] = {{"model", cpu_model_name()},
              {"kernel_isa", R.kernels_arg == "cpu" ? kernels::isa_name(kernels::cpu_dispatch_isa())
                             : R.kernels_arg.rfind("cpu-", 0) == 0 ? R.kernels_arg.substr(4)
                                                                  : R.kernels_arg},
              {"features", cpu_features_description()},
              {"hardware_threads", std::thread::hardware_concurrency()}};
  j["numerics"] = R.numerics;
  j["n_prefill"] = R.n_prefill;
  j["n_decode"] = R.n_decode;
  j["runs"] = nlohmann::json::array();
  if (!R.spec.is_null()) j["speculative"] = R.spec;
  for (const Run& r : R.runs) {
    nlohmann::json run = {{"depth", r.depth},
                          {"prefill_tok_s", r.prefill_tok_s},
                          {"decode_tok_s", r.decode_tok_s},
                          {"decode_roofline_fraction", r.decode_tok_s / R.roofline(r)},
                          {"kv_bytes_read_per_token", r.kv_bytes},
                          {"kv_bytes_held", r.kv_held_bytes},
                          {"kv_bytes_held_spec", r.kv_spec_held_bytes}};
    if (r.depth > 0) {
      run["kv_bytes_per_context_token"] = r.kv_held_bytes / double(r.depth);
      run["kv_bytes_per_context_token_spec"] = r.kv_spec_held_bytes / double(r.depth);
      run["kv_held_over_spec"] = r.kv_held_bytes / r.kv_spec_held_bytes;
    }
    if (R.depth0) {
      run["attention_seconds_per_token"] = R.attention_cost(r);
      run["decode_at_depth_over_depth0"] = r.decode_tok_s / R.depth0->decode_tok_s;
    }
    if (r.logits_diff_over_std >= 0) {
      run["logits_max_diff_over_std"] = r.logits_diff_over_std;
      run["logits_max_abs_diff"] = r.logits_max_abs_diff;  // 0: bit-identical
    }
    j["runs"].push_back(run);
  }
  if (R.have_slope) {
    j["attention_cost_seconds_per_token_per_context_token"] = R.attention_slope;
    for (int64_t d : kExtrapolateTo) j["attention_cost_extrapolated"][std::to_string(d)] = R.attention_slope * double(d);
  }
  if (R.check_logits)
    j["depth_logits_check"] = {{"max_diff_over_std", R.worst_logits},
                               {"tolerance", kLogitsTolerance},
                               {"ok", R.logits_ok()},
                               {"prefill_chunk", R.check_chunk}};
  if (!R.batch_runs.empty()) {
    j["decode_batches"] = nlohmann::json::array();
    for (const BatchRun& r : R.batch_runs) {
      j["decode_batches"].push_back({{"batch", r.batch},
                                     {"tok_s", r.tok_s},
                                     {"bytes_per_step", r.weight_bytes + r.kv_bytes},
                                     {"weight_bytes_per_step", r.weight_bytes},
                                     {"kv_bytes_per_step", r.kv_bytes},
                                     {"roofline_tok_s", r.roofline_tok_s()},
                                     {"roofline_fraction", r.tok_s / r.roofline_tok_s()},
                                     {"memory_roofline_tok_s", r.memory_roofline_tok_s()},
                                     {"memory_roofline_fraction", r.tok_s / r.memory_roofline_tok_s()},
                                     {"compute_roofline_tok_s", r.compute_roofline_tok_s()},
                                     {"distinct_experts_per_layer_mean", r.distinct_mean()},
                                     {"distinct_experts_per_layer", r.distinct_experts}});
    }
  }
  return j;
}

// The depth table (KV held, attention cost, logits check) of print_report.
void print_depth_table(const Report& R) {
  std::printf("\n| depth | KV held MB | KV B/context token | by the KV spec | held / spec | decode / depth 0 | attention s/token | "
              "logits max|diff| / std |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Run& r : R.runs) {
    std::printf("| %lld | %.2f | ", (long long)r.depth, r.kv_held_bytes / 1e6);
    if (r.depth > 0)
      std::printf("%.0f | %.0f | %.2f | ", r.kv_held_bytes / double(r.depth), r.kv_spec_held_bytes / double(r.depth),
                  r.kv_held_bytes / r.kv_spec_held_bytes);
    else
      std::printf("- | - | - | ");
    if (R.depth0)
      std::printf("%.3f | %.3g | ", r.decode_tok_s / R.depth0->decode_tok_s, R.attention_cost(r));
    else
      std::printf("- | - | ");
    if (r.logits_diff_over_std >= 0)
      std::printf("%.3g |\n", r.logits_diff_over_std);
    else
      std::printf("- |\n");
  }
  if (R.have_slope) {
    std::printf("attention cost extrapolated (a line through 0 fitted to these depths):");
    for (int64_t d : kExtrapolateTo) std::printf(" %lld tokens: %.4g s/token;", (long long)d, R.attention_slope * double(d));
    std::printf("\n");
  }
  if (R.check_logits)
    std::printf("decode vs one prefill over the same tokens: max |diff| / std %.3g (tolerance %g): %s\n", R.worst_logits,
                kLogitsTolerance, R.logits_ok() ? "ok" : "FAILED");
}

// The tables (or CSV rows) of a bench run.
void print_report(const Report& R, bool csv) {
  std::printf(csv ? "depth,prefill_tok_s,prefill_gflop_s,decode_tok_s,weight_mb_per_tok,kv_mb_per_tok,roofline_tok_s,roofline_fraction\n"
                  : "| depth | pp%lld tok/s | prefill GFLOP/s | tg%lld tok/s | weights MB/tok | KV MB/tok | roofline tok/s | of roofline |\n"
                    "|---:|---:|---:|---:|---:|---:|---:|---:|\n",
              (long long)R.n_prefill, (long long)R.n_decode);
  for (const Run& r : R.runs)
    std::printf(csv ? "%lld,%.3f,%.2f,%.3f,%.2f,%.2f,%.2f,%.3f\n" : "| %lld | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.1f%% |\n",
                (long long)r.depth, r.prefill_tok_s, R.prefill_gflop_s(r), r.decode_tok_s, R.wbytes / 1e6,
                r.kv_bytes / 1e6, R.roofline(r), (csv ? 1.0 : 100.0) * r.decode_tok_s / R.roofline(r));
  if (csv) return;
  std::printf("\nmemory bandwidth (triad, %d threads): %.1f GB/s (%.1f before the runs, %.1f after); peak RSS %.1f MB\n",
              R.threads, R.bw, R.bw_before, R.bw_after, R.rss / 1e6);
  if (R.depth0 || R.check_logits) print_depth_table(R);
  if (!R.batch_runs.empty()) {
    if (R.fma_peak > 0)
      std::printf("\nproduct peaks (%d threads): fp32 FMA %.1f GFLOP/s, bf16 dot product %.1f, FP8 / FP4 products "
                  "counted at %.1f; a batch's roofline counts each matrix at the slower of its bytes and its "
                  "multiply-adds\n",
                  R.threads, 2.0 * R.fma_peak / 1e9, 2.0 * R.dot_peak / 1e9, 2.0 * R.quantized_peak / 1e9);
    std::printf("\n| decode batch | tok/s | distinct experts / layer | weights MB/step | KV MB/step | memory-bound tok/s | "
                "compute-bound tok/s | roofline tok/s | of roofline |\n"
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const BatchRun& r : R.batch_runs)
      std::printf("| %lld | %.2f | %.2f | %.1f | %.2f | %.1f | %.1f | %.1f | %.1f%% |\n", (long long)r.batch, r.tok_s,
                  r.distinct_mean(), r.weight_bytes / 1e6, r.kv_bytes / 1e6, r.memory_roofline_tok_s(),
                  r.compute_roofline_tok_s(), r.roofline_tok_s(), 100.0 * r.tok_s / r.roofline_tok_s());
  }
  if (R.ranks > 1) {
    std::printf("expert parallel over %d ranks (%d threads each): peak RSS per rank", R.ranks, R.threads);
    for (size_t i = 0; i < R.rss_ranks.size(); ++i) std::printf("%s %.1f MB", i ? "," : "", R.rss_ranks[i] / 1e6);
    std::printf("\n");
    for (const Run& r : R.runs)
      std::printf("depth %lld: rank 0 in collectives: prefill %.3f ms/token (%.1f KB/token received), decode %.3f "
                  "ms/token (%.1f KB/token received)\n",
                  (long long)r.depth, r.prefill_comm_s * 1e3, r.prefill_comm_bytes / 1e3, r.decode_comm_s * 1e3,
                  r.decode_comm_bytes / 1e3);
  }
  if (!R.spec.is_null()) {
    const nlohmann::json& spec = R.spec;
    std::printf("\nspeculative (%s, up to %lld drafts): plain %.2f tok/s, with drafts %.2f tok/s (%.2fx), acceptance %.2f; "
                "every draft rejected %.2fx; every draft accepted:",
                std::string(spec["mode"]).c_str(), (long long)R.max_drafts, double(spec["plain_decode_tok_s"]),
                double(spec["decode_tok_s"]), double(spec["speedup"]), double(spec["acceptance_rate"]),
                double(spec["zero_acceptance_speedup"]));
    for (auto& [k, v] : spec["full_acceptance_speedup"].items()) std::printf(" K=%s %.2fx", k.c_str(), double(v));
    std::printf("\n");
  }
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--prefill", "--decode", "--depths", "--numerics", "--threads", "--kernels", "--speculative",
                   "--num-draft-tokens", "--spec-rounds", "--decode-batches", "--check-chunk"},
            {"--json", "--csv", "--profile", "--verify-weights", "--expert-parallel", "--check-depth-logits"});
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
  const int64_t check_chunk = args.get_int("--check-chunk", 0);
  if (check_chunk < 0) throw ArgError("--check-chunk must be >= 0");
  Compute compute = compute_args(args);
  auto model = load_model_arg(args);
  model->check_numerics(compute.num);
  const v4::Config& c = model->config();
  log_info("bench: %s kernels, %d threads, %s numerics", compute.backend->name(), compute.pool->size(),
           v4::numerics_name(compute.num.mode));

  // Bandwidth is measured before and after the runs (the machine's may drift, e.g. with other
  // tenants) and the roofline uses their mean.
  // Several ranks: rank 0 measures the bandwidth while the others wait (their own triads
  // would share the memory bus with it).
  dist::Communicator& comm = world();
  const double bw_before = comm.rank() == 0 ? triad_bandwidth_gb_s(compute.pool.get()) : 0.0;
  // The compute side of the batched decode roofline: only when batches are measured.
  const bool peaks = comm.rank() == 0 && !batches.empty();
  const double fma_peak = peaks ? compute.backend->fma_peak_macs_per_s() : 0.0;
  const double dot_peak = peaks ? compute.backend->bf16_dot_peak_macs_per_s() : 0.0;
  comm.barrier();
  if (!reset_peak_rss()) log_warn("bench: cannot reset the peak RSS; it includes the triad's arrays");
  const int64_t wbytes = v4::active_weight_bytes_per_token(c, model->weights());
  const int64_t macs = v4::active_weight_macs_per_token(c, model->weights());
  // A prompt is prefilled the way a server (and llama-bench's pp) runs it: logits of the last
  // row only, so the output head runs once per prompt, not once per token.
  const v4::Weights& w = model->weights();
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
  std::vector<Run> runs;
  for (int64_t depth : depths) {
    runs.push_back(measure_depth(*model, compute, depth, n_prefill, n_decode, draw, check_logits, check_chunk));
    const Run& r = runs.back();
    log_info("depth %lld: prefill %.2f tok/s, decode %.2f tok/s", (long long)depth, r.prefill_tok_s, r.decode_tok_s);
  }
  std::vector<BatchRun> batch_runs;
  for (int64_t b : batches) {
    batch_runs.push_back(measure_batch(*model, compute, b, n_prefill, n_decode, draw));
    const BatchRun& r = batch_runs.back();
    log_info("decode batch %lld: %.2f tok/s, %.1f distinct experts per layer", (long long)b, r.tok_s, r.distinct_mean());
  }
  // Speculative decoding, on one fresh prompt: plain greedy decode (which is also the oracle
  // continuation), the checkpoint's drafter with its adaptive draft length, every draft
  // accepted (the oracle as drafts) for K = 1..5, and every draft rejected (drafts run, then
  // replaced).
  // (Only when asked for: --speculative auto|mtp.)
  const int64_t max_drafts = args.get("--speculative") ? speculative_args(args, *model) : 0;
  nlohmann::json spec;
  if (max_drafts > 0)
    spec = measure_speculative(*model, compute, random_tokens(std::min<int64_t>(n_prefill, 128)), n_decode, max_drafts,
                               spec_rounds);

  Report rep;
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
  rep.threads = compute.pool->size();
  rep.ranks = comm.size();
  rep.kernels_name = compute.backend->name();
  rep.kernels_arg = args.get_or("--kernels", "cpu");
  rep.numerics = v4::numerics_name(compute.num.mode);
  rep.rss = peak_rss_bytes();
  // Every rank's peak (each holds its share of the experts), for rank 0 to print.
  rep.rss_ranks.resize(size_t(comm.size()));
  comm.allgather_bytes(&rep.rss, sizeof rep.rss, rep.rss_ranks.data());
  rep.bw_before = bw_before;
  rep.bw_after = comm.rank() == 0 ? triad_bandwidth_gb_s(compute.pool.get()) : 0.0;
  comm.barrier();
  rep.bw = 0.5 * (rep.bw_before + rep.bw_after);
  rep.fma_peak = fma_peak;
  rep.dot_peak = dot_peak;
  // Reference numerics multiplies act-quantised (bf16-exact) rows of FP8 / FP4 weights, which
  // the kernels may run on the bf16 dot-product instruction: those products get the faster
  // of the two rates; float numerics' products are fp32 FMAs.
  rep.quantized_peak = compute.num.mode == v4::NumericsMode::Reference ? std::max(fma_peak, dot_peak) : fma_peak;
  for (BatchRun& r : rep.batch_runs) {
    r.bound = v4::batch_step_bound(c, w, r.expert_rows, r.batch, rep.bw * 1e9, fma_peak, rep.quantized_peak);
    r.bound.memory_s += r.kv_bytes / (rep.bw * 1e9);
    r.bound.bound_s += r.kv_bytes / (rep.bw * 1e9);
  }
  rep.analyse_depths();
  if (rep.check_logits && !rep.logits_ok())
    log_warn("bench: decode logits differ from one prefill's by %.3g of their std (> %g)", rep.worst_logits,
             kLogitsTolerance);
  if (args.has("--json")) std::printf("%s\n", report_json(rep).dump().c_str());
  else print_report(rep, args.has("--csv"));
  return rep.check_logits && !rep.logits_ok() ? 1 : 0;
}

CommandRegistration reg("bench", "prefill / decode speed at context depths vs the memory roofline", run,
                        "usage: deepinfer bench [--model DIR] [options]\n\n"
                        DI_USAGE_MODEL
                        "  --prefill N                  prompt tokens per measurement (default 512)\n"
                        "  --decode N                   decoded tokens per measurement (default 128)\n"
                        "  --depths D1,D2,...           context depths to measure at (default 0)\n"
                        "  --decode-batches B1,B2,...   also decode B fresh sequences at once (one forward per step),\n"
                        "                               each prefilled with --prefill tokens first; tok/s against the\n"
                        "                               roofline of the bytes the batch reads and the multiply-adds\n"
                        "                               it does (FMA peak measured in the same run)\n"
                        "  --check-depth-logits         at each depth, compare the last decoded token's logits with one\n"
                        "                               prefill's over the same tokens; exit 1 above 1e-4 of their std\n"
                        "  --check-chunk N              that prefill in chunks of N tokens (default 0: one chunk)\n"
                        "  --json                       JSON output\n"
                        "  --csv                        CSV output\n"
                        "  --profile                    time of each forward section in prefill and decode, on stderr\n"
                        "  --spec-rounds N              with --speculative: each variant N times, each time against a\n"
                        "                               plain run just before it; the median ratio (default 1)\n"
                        "                               (also DEEPINFER_PROFILE=1 for any command)\n" DI_USAGE_COMPUTE DI_USAGE_SPECULATIVE
                        DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
