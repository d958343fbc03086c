// `deepinfer bench`: what a run measured (per depth, per decode batch, the speculative variants,
// the machine) and its report: the tables, the CSV rows or the JSON. The measurements:
// cmd_bench.cpp; the machine's side: bench_machine.h.
#pragma once
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_per_core.h"
#include "model/deepseek_v4/expert_cache.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::cli {

// One context depth's prefill and decode (measure_depth).
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
  // Thread-pool dispatches (fork / join barriers at the run's thread count) per decoded token
  // and for the whole prefill step.
  double decode_dispatches_per_token = 0, prefill_dispatches = 0;
  // Streamed experts (--memory-limit below the weights): the cache's counts over the prefill
  // step and over the timed decode steps.
  bool streamed = false;
  v4::ExpertCacheStats prefill_disk, decode_disk;
};

// One decode batch's steps (measure_batch).
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

// Decode after depth tokens must give the logits one prefill gives (float numerics: within
// 1e-4 of the logits' std).
inline constexpr double kLogitsTolerance = 1e-4;

// What one bench run measured, and what the report derives from it.
struct Report {
  std::vector<Run> runs;            // per depth
  std::vector<BatchRun> batch_runs;  // per decode batch
  nlohmann::json spec;              // the speculative variants (null: not asked for)
  nlohmann::json synthetic;         // --synthetic: the config and seed of the random weights (null: a checkpoint)
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
  double quantized_peak = 0;  // the rate the roofline gives FP8 / FP4 / BF16 products (see run())
  int64_t n_layers = 1;       // transformer layers a decoded token runs (the MTP module not counted)
  std::vector<PerCoreRow> per_core;  // --per-core
  double server_bw = 0, server_core_share = 0;  // GB/s of the stated server; bytes/s per core
  int64_t server_cores = 0;
  double barrier_s = 0;       // one empty dispatch (fork + join) on the run's threads
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

// The report as JSON (--json).
nlohmann::json report_json(const Report& R);

// The tables (or CSV rows) of a bench run (the default and --csv).
void print_report(const Report& R, bool csv);

}  // namespace deepinfer::cli
