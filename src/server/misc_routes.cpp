// GET /v1/models, GET /v1/models/{id}, POST /tokenize, POST /detokenize, and the /metrics text.
#include <sstream>

#include "server/chat_prompt.h"
#include "server/common.h"
#include "server/errors.h"
#include "server/params.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

// `root` is the served name too, never the checkpoint's directory: a client learns no path.
json model_json(const Backend& b, const std::string& id) {
  const EngineInfo& info = b.engine->info();
  return json{{"id", id},
              {"object", "model"},
              {"type", "model"},  // Anthropic's ModelInfo
              {"created", unix_time()},
              {"owned_by", "deepinfer"},
              {"root", b.model_id},
              {"max_model_len", info.max_model_len},
              {"vocab_size", info.vocab_size}};  // extension: bench-serve draws random prompt ids from it
}

}  // namespace

// The served name, then its aliases (all accepted in "model", as vLLM's --served-model-name).
void handle_models(const Backend& b, httplib::Response& res) {
  json data = json::array({model_json(b, b.model_id)});
  for (const std::string& alias : b.model_aliases) data.push_back(model_json(b, alias));
  send_json(res, json{{"object", "list"}, {"data", std::move(data)}});
}

void handle_model(const Backend& b, const std::string& id, httplib::Response& res) {
  check_model(json{{"model", id}}, b);  // 404 for a name not served
  send_json(res, model_json(b, id));
}

void handle_tokenize(const Backend& b, const httplib::Request& req, httplib::Response& res) {
  // Key-ordered: a body with messages renders a chat prompt.
  const nlohmann::ordered_json body = parse_body_ordered(req.body);
  check_model(body, b);
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    ids = build_chat_prompt(b, body).ids;
  } else {
    auto text = get_string(body, "prompt");
    if (!text) throw ApiError(ErrorCode::kInvalidRequest, "'prompt' (a string) or 'messages' is required", "prompt");
    if (!b.tokenizer) throw ApiError(ErrorCode::kInvalidRequest, "no tokenizer is loaded");
    ids = b.tokenizer->encode(*text, true);
    const int32_t bos = b.engine->info().bos_token_id;
    if (get_bool(body, "add_special_tokens").value_or(true) && (ids.empty() || ids[0] != bos)) ids.insert(ids.begin(), bos);
  }
  json out = {{"count", ids.size()}, {"max_model_len", b.engine->info().max_model_len}, {"tokens", ids}};
  if (get_bool(body, "return_token_strs").value_or(false)) {  // vLLM's option
    json strs = json::array();
    for (int32_t t : ids) strs.push_back(token_text(b, t));
    out["token_strs"] = std::move(strs);
  }
  send_json(res, out);
}

void handle_detokenize(const Backend& b, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_body(req.body);
  check_model(body, b);
  const json* toks = get_array(body, "tokens");
  if (!toks) throw ApiError(ErrorCode::kInvalidRequest, "'tokens' (an array of token ids) is required", "tokens");
  if (!b.tokenizer) throw ApiError(ErrorCode::kInvalidRequest, "no tokenizer is loaded");
  std::vector<int32_t> ids;
  for (const auto& v : *toks) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= b.engine->info().vocab_size)
      throw ApiError(ErrorCode::kInvalidRequest, "'tokens' must hold token ids of this vocabulary", "tokens");
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  send_json(res, json{{"prompt", b.tokenizer->decode(ids)}});
}

namespace {

void counter(std::ostringstream& o, const std::string& name, const std::string& help, uint64_t v,
             const std::string& labels) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << "{" << labels << "} " << v
    << "\n";
}

void gauge(std::ostringstream& o, const std::string& name, const std::string& help, double v,
           const std::string& labels) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << "{" << labels << "} " << v
    << "\n";
}

void histogram(std::ostringstream& o, const std::string& name, const std::string& help, const Histogram& h,
               const std::string& labels) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cum += h.counts[i];
    o << name << "_bucket{" << labels << ",le=\"" << h.bounds[i] << "\"} " << cum << "\n";
  }
  cum += h.counts.back();
  o << name << "_bucket{" << labels << ",le=\"+Inf\"} " << cum << "\n";
  o << name << "_sum{" << labels << "} " << h.sum << "\n" << name << "_count{" << labels << "} " << h.count << "\n";
}

}  // namespace

std::string metrics_text(const EngineStats& s, const std::string& model_id) {
  std::ostringstream o;
  const std::string l = "model_name=\"" + model_id + "\"";
  gauge(o, "deepinfer_requests_running", "Requests in the running batch.", double(s.requests_running), l);
  gauge(o, "deepinfer_requests_waiting", "Requests queued for admission (queue length).", double(s.requests_waiting), l);
  gauge(o, "deepinfer_kv_blocks_total", "KV blocks in the pool.", double(s.kv_blocks_total), l);
  gauge(o, "deepinfer_kv_blocks_used", "KV blocks held by running sequences and prefix snapshots.",
        double(s.kv_blocks_used), l);
  gauge(o, "deepinfer_kv_blocks_prefix_cached", "KV blocks held by prefix-cache snapshots.", double(s.kv_blocks_cached), l);
  gauge(o, "deepinfer_kv_cache_usage_ratio", "Fraction of KV blocks in use (1 = full).",
        s.kv_blocks_total ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0.0, l);
  counter(o, "deepinfer_prompt_tokens_total", "Prompt tokens of finished requests.", s.prompt_tokens_total, l);
  counter(o, "deepinfer_generation_tokens_total", "Generated tokens.", s.generation_tokens_total, l);
  counter(o, "deepinfer_tokens_computed_total", "Tokens run through the model (prefill, recompute, decode).",
          s.tokens_computed_total, l);
  o << "# HELP deepinfer_request_success_total Finished requests by finish reason.\n"
    << "# TYPE deepinfer_request_success_total counter\n";
  const std::pair<const char*, uint64_t> reasons[] = {{"stop", s.requests_finished_stop},
                                                      {"length", s.requests_finished_length},
                                                      {"abort", s.requests_finished_abort},
                                                      {"error", s.requests_finished_error}};
  for (const auto& [r, n] : reasons)
    o << "deepinfer_request_success_total{" << l << ",finished_reason=\"" << r << "\"} " << n << "\n";
  counter(o, "deepinfer_requests_failed_nonfinite_total", "Requests failed because the model produced NaN/Inf logits.", s.requests_failed_nonfinite, l);
  counter(o, "deepinfer_prefix_cache_queries_total", "Admitted requests looked up in the prefix cache.",
          s.prefix_cache_queries, l);
  counter(o, "deepinfer_prefix_cache_hits_total", "Requests that resumed a prefix-cache snapshot.", s.prefix_cache_hits,
          l);
  counter(o, "deepinfer_prefix_cache_hit_tokens_total", "Prompt tokens served from prefix-cache snapshots.",
          s.prefix_cache_hit_tokens, l);
  counter(o, "deepinfer_prefix_cache_checkpoints_total", "Prompt checkpoints kept as prefix-cache snapshots.",
          s.prefix_cache_checkpoints, l);
  gauge(o, "deepinfer_prefix_cache_entries", "Prefix-cache snapshots held now.", double(s.prefix_cache_entries), l);
  counter(o, "deepinfer_prefix_cache_disk_hits_total", "Admissions that loaded a prefix snapshot from the disk cache.",
          s.prefix_cache_disk_hits, l);
  counter(o, "deepinfer_prefix_cache_disk_hit_tokens_total", "Prompt tokens served from disk-cache snapshots.",
          s.prefix_cache_disk_hit_tokens, l);
  counter(o, "deepinfer_prefix_cache_disk_reads_total", "Snapshot files read.", s.prefix_cache_disk_reads, l);
  counter(o, "deepinfer_prefix_cache_disk_writes_total", "Snapshot files written.", s.prefix_cache_disk_writes, l);
  counter(o, "deepinfer_prefix_cache_disk_errors_total",
          "Disk-cache reads or writes that failed (each a miss or an unsaved snapshot) or writes dropped.",
          s.prefix_cache_disk_errors, l);
  gauge(o, "deepinfer_prefix_cache_disk_entries", "Snapshot files in the disk cache.", double(s.prefix_cache_disk_entries), l);
  gauge(o, "deepinfer_prefix_cache_disk_bytes", "Bytes of the disk cache's files.", double(s.prefix_cache_disk_bytes), l);
  gauge(o, "deepinfer_prefix_cache_memory_bytes", "KV bytes held by prefix-cache snapshots.",
        double(s.prefix_cache_memory_bytes), l);
  counter(o, "deepinfer_preemptions_total", "Requests preempted (state dropped, recomputed later).",
          s.preemptions_total, l);
  counter(o, "deepinfer_engine_steps_total", "Engine steps run.", s.steps_total, l);
  counter(o, "deepinfer_spec_decode_verify_steps_total", "Speculative verify chunks (one per request per step).",
          s.spec_verify_steps, l);
  counter(o, "deepinfer_spec_decode_num_draft_tokens_total", "Draft tokens verified.", s.spec_draft_tokens, l);
  counter(o, "deepinfer_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", s.spec_accepted_tokens, l);
  gauge(o, "deepinfer_spec_decode_acceptance_rate", "Accepted over verified draft tokens since start.",
        s.spec_draft_tokens ? double(s.spec_accepted_tokens) / double(s.spec_draft_tokens) : 0.0, l);
  gauge(o, "deepinfer_spec_decode_mean_accepted_length",
        "Tokens emitted per verify step since start (accepted drafts + the model's own).",
        s.spec_verify_steps ? 1.0 + double(s.spec_accepted_tokens) / double(s.spec_verify_steps) : 0.0, l);
  histogram(o, "deepinfer_spec_decode_accepted_per_step", "Drafts accepted per verify step.", s.spec_accepted_per_step, l);
  histogram(o, "deepinfer_time_to_first_token_seconds", "Time from arrival to the first token.", s.ttft_seconds, l);
  histogram(o, "deepinfer_inter_token_latency_seconds", "Time between consecutive tokens of a request.", s.itl_seconds,
            l);
  histogram(o, "deepinfer_e2e_request_latency_seconds", "Time from arrival to finish.", s.e2e_seconds, l);
  histogram(o, "deepinfer_request_queue_time_seconds", "Time from arrival to the first scheduled step.",
            s.queue_seconds, l);
  histogram(o, "deepinfer_time_per_output_token_seconds", "Per request: time from first to last token / (tokens - 1).",
            s.tpot_seconds, l);
  histogram(o, "deepinfer_request_prefill_time_seconds", "Per request: first scheduled step to first token.",
            s.prefill_seconds, l);
  histogram(o, "deepinfer_request_decode_time_seconds", "Per request: first token to finish.", s.decode_seconds, l);
  histogram(o, "deepinfer_request_prompt_tokens", "Prompt tokens per finished request.", s.prompt_tokens, l);
  histogram(o, "deepinfer_request_generation_tokens", "Generated tokens per finished request.", s.generation_tokens, l);
  return o.str();
}

}  // namespace deepinfer::server
