// `deepinfer bench`: its report as tables, CSV rows or JSON (bench_report.h).
#include "bench_report.h"

#include <cstdio>
#include <thread>

#include "core/cpu_features.h"
#include "kernels/cpu/cpu_backend.h"

namespace deepinfer::cli {
namespace {

// Where the attention cost per token is extrapolated to.
const int64_t kExtrapolateTo[] = {131072, 1048576};

// The JSON of one phase's streaming counts; tokens: the phase's tokens.
nlohmann::json disk_json(const v4::ExpertCacheStats& d, double tokens, double tok_s) {
  const double bytes_per_token = double(d.bytes_read) / tokens;
  const double disk_bw = d.read_busy_seconds > 0 ? double(d.bytes_read) / d.read_busy_seconds : 0.0;
  nlohmann::json j = {{"disk_bytes_per_token", bytes_per_token},
                      {"expert_lookups", d.lookups},
                      {"cache_hit_rate", d.lookups ? double(d.hits) / double(d.lookups) : 0.0},
                      {"expert_reads", d.reads},
                      {"read_ahead", d.read_ahead},
                      {"read_ahead_unused", d.read_ahead_unused},
                      {"prediction_hit_rate",
                       d.chosen_predicted_layers ? double(d.predicted_chosen) / double(d.chosen_predicted_layers) : 0.0},
                      {"predicted_experts", d.predicted},
                      {"wait_seconds_per_token", d.wait_seconds / tokens},
                      {"disk_read_gb_s", disk_bw / 1e9}};
  // What the disk alone allows at that read rate, and how close the run came to it.
  if (bytes_per_token > 0 && disk_bw > 0) {
    j["disk_bound_tok_s"] = disk_bw / bytes_per_token;
    j["of_disk_bound"] = tok_s / (disk_bw / bytes_per_token);
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

}  // namespace

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
  j["barrier_seconds"] = R.barrier_s;
  j["layers"] = R.n_layers;
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
  if (!R.synthetic.is_null()) j["synthetic_weights"] = R.synthetic;
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
                          {"kv_bytes_held_spec", r.kv_spec_held_bytes},
                          {"decode_dispatches_per_token", r.decode_dispatches_per_token},
                          {"decode_dispatches_per_layer", r.decode_dispatches_per_token / double(R.n_layers)},
                          {"prefill_dispatches_per_layer", r.prefill_dispatches / double(R.n_layers)}};
    if (r.depth > 0) {
      run["kv_bytes_per_context_token"] = r.kv_held_bytes / double(r.depth);
      run["kv_bytes_per_context_token_spec"] = r.kv_spec_held_bytes / double(r.depth);
      run["kv_held_over_spec"] = r.kv_held_bytes / r.kv_spec_held_bytes;
    }
    if (R.depth0) {
      run["attention_seconds_per_token"] = R.attention_cost(r);
      run["decode_at_depth_over_depth0"] = r.decode_tok_s / R.depth0->decode_tok_s;
    }
    if (r.streamed) {
      run["prefill_streaming"] = disk_json(r.prefill_disk, double(R.n_prefill), r.prefill_tok_s);
      run["decode_streaming"] = disk_json(r.decode_disk, double(R.n_decode), r.decode_tok_s);
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
  if (!R.per_core.empty()) {
    j["per_core"] = {{"server_bandwidth_gb_s", R.server_bw},
                     {"server_cores", R.server_cores},
                     {"server_core_share_bytes_per_s", R.server_core_share},
                     {"products", nlohmann::json::array()}};
    for (const PerCoreRow& p : R.per_core)
      j["per_core"]["products"].push_back({{"kind", p.kind},
                                           {"rows", p.rows},
                                           {"matrices", p.matrices},
                                           {"working_set_bytes", p.working_set},
                                           {"bytes_per_s", p.bytes_per_s},
                                           {"over_server_core_share", p.bytes_per_s / R.server_core_share}});
  }
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
  if (!R.synthetic.is_null())
    std::printf("\nweights: synthetic (random values in the official layout) from %s, seed %lld\n",
                std::string(R.synthetic["config"]).c_str(), (long long)R.synthetic["seed"].get<int64_t>());
  std::printf("\nmemory bandwidth (triad, %d threads): %.1f GB/s (%.1f before the runs, %.1f after); peak RSS %.1f MB\n",
              R.threads, R.bw, R.bw_before, R.bw_after, R.rss / 1e6);
  std::printf("thread-pool dispatches (fork / join barriers, %d threads, %.2f us each when empty):", R.threads,
              R.barrier_s * 1e6);
  for (const Run& r : R.runs)
    std::printf(" depth %lld: decode %.1f a token (%.1f a layer of %lld), prefill %.1f a layer;", (long long)r.depth,
                r.decode_dispatches_per_token, r.decode_dispatches_per_token / double(R.n_layers), (long long)R.n_layers,
                r.prefill_dispatches / double(R.n_layers));
  std::printf("\n");
  for (const Run& r : R.runs) {
    if (!r.streamed) continue;
    for (int phase = 0; phase < 2; ++phase) {
      const nlohmann::json j = phase == 0 ? disk_json(r.prefill_disk, double(R.n_prefill), r.prefill_tok_s)
                                          : disk_json(r.decode_disk, double(R.n_decode), r.decode_tok_s);
      std::printf("depth %lld %s, experts streamed from disk: %.1f MB a token, cache hits %.1f%%, next-layer "
                  "predictions right %.1f%%, %.0f reads ahead (%.0f unused), waited %.1f ms a token; disk %.2f GB/s "
                  "while reading",
                  (long long)r.depth, phase == 0 ? "prefill" : "decode", j["disk_bytes_per_token"].get<double>() / 1e6,
                  100.0 * j["cache_hit_rate"].get<double>(), 100.0 * j["prediction_hit_rate"].get<double>(),
                  j["read_ahead"].get<double>(), j["read_ahead_unused"].get<double>(),
                  1e3 * j["wait_seconds_per_token"].get<double>(), j["disk_read_gb_s"].get<double>());
      if (j.contains("disk_bound_tok_s"))
        std::printf(" (bound %.1f tok/s; %.0f%% of it)", j["disk_bound_tok_s"].get<double>(),
                    100.0 * j["of_disk_bound"].get<double>());
      std::printf("\n");
    }
  }
  if (R.depth0 || R.check_logits) print_depth_table(R);
  if (!R.batch_runs.empty()) {
    if (R.fma_peak > 0)
      std::printf("\nproduct peaks (%d threads): fp32 FMA %.1f GFLOP/s, bf16 dot product %.1f, FP8 / FP4 / BF16 "
                  "products counted at %.1f; a batch's roofline counts each matrix at the slower of its bytes and its "
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
  if (!R.per_core.empty()) {
    std::printf("\nper core (one thread, weights cycled from DRAM) against a %.0f GB/s, %lld-core server's share of "
                "%.1f GB/s a core:\n| product | rows | matrices | working set MB | GB/s a core | of the share |\n"
                "|---|---:|---:|---:|---:|---:|\n",
                R.server_bw, (long long)R.server_cores, R.server_core_share / 1e9);
    for (const PerCoreRow& p : R.per_core)
      std::printf("| %s | %lld | %lld | %.0f | %.2f | %.2fx |\n", p.kind.c_str(), (long long)p.rows,
                  (long long)p.matrices, p.working_set / 1e6, p.bytes_per_s / 1e9, p.bytes_per_s / R.server_core_share);
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

}  // namespace deepinfer::cli
