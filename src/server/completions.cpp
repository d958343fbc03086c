// POST /v1/completions (OpenAI legacy completions, vLLM extensions: top_k, min_p,
// repetition_penalty, stop_token_ids, ignore_eos, skip_special_tokens, return_token_ids).
#include "server/common.h"
#include "server/errors.h"
#include "server/params.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

std::vector<int32_t> ids_from_json(const json& a) {
  std::vector<int32_t> ids;
  for (const auto& v : a) {
    if (!v.is_number_integer())
      throw ApiError(ErrorCode::kInvalidRequest, "'prompt' must be a string or an array of token ids", "prompt");
    const int64_t x = v.get<int64_t>();
    ids.push_back(x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : int32_t(x));
  }
  return ids;
}

// Text is encoded with special tokens recognised and BOS added (add_special_tokens, as
// Hugging Face tokenizers do for DeepSeek); token ids are taken as they are.
std::vector<int32_t> completion_prompt(const json& body, const Backend& b) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw ApiError(ErrorCode::kInvalidRequest, "'prompt' is required", "prompt");
  const json* text = nullptr;
  if (it->is_string()) {
    text = &*it;
  } else if (it->is_array()) {
    if (it->empty()) throw ApiError(ErrorCode::kInvalidRequest, "'prompt' is empty", "prompt");
    const json& first = (*it)[0];
    if (first.is_number_integer()) return ids_from_json(*it);
    if (it->size() != 1)
      throw ApiError(ErrorCode::kInvalidRequest, "batched prompts are not supported: send one prompt per request",
                     "prompt");
    if (first.is_array()) return ids_from_json(first);
    if (first.is_string()) text = &first;
  }
  if (!text) throw ApiError(ErrorCode::kInvalidRequest, "'prompt' must be a string or an array of token ids", "prompt");
  if (!b.tokenizer) throw ApiError(ErrorCode::kInvalidRequest, "no tokenizer is loaded: send token ids", "prompt");
  std::vector<int32_t> ids = b.tokenizer->encode(text->get<std::string>(), true);
  const int32_t bos = b.engine->info().bos_token_id;
  if (get_bool(body, "add_special_tokens").value_or(true) && (ids.empty() || ids[0] != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

json stop_reason(const StreamEvent& e) {
  if (!e.stop_string.empty()) return e.stop_string;
  if (e.stop_token >= 0) return e.stop_token;
  return nullptr;
}

// The legacy completions logprobs object for these tokens.
json completion_logprobs(const Backend& b, const std::vector<GeneratedToken>& toks, int64_t* offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const GeneratedToken& t : toks) {
    const std::string s = token_text(b, t.token);
    tokens.push_back(s);
    lps.push_back(json_logprob(t.logprob));
    json top = json::object();
    for (const TokenLogprob& a : t.top) top[token_text(b, a.token)] = json_logprob(a.logprob);
    tops.push_back(top);
    offsets.push_back(*offset);
    *offset += int64_t(s.size());
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json token_ids(const std::vector<GeneratedToken>& toks) {
  json a = json::array();
  for (const auto& t : toks) a.push_back(t.token);
  return a;
}

}  // namespace

void handle_completions(std::shared_ptr<const Backend> bp, const ServerOptions& o, const httplib::Request& req,
                        httplib::Response& res) {
  const Backend& b = *bp;
  const json body = parse_body(req.body);
  check_model(body, b);
  const RequestOptions ro = parse_request_options(body, Api::kCompletions);
  const bool want_ids = get_bool(body, "return_token_ids").value_or(false);
  GenerateRequest g{completion_prompt(body, b), ro.sampling};
  const Status s = b.engine->validate(g);
  if (!s.ok()) throw ApiError(s);
  const std::vector<std::string> stops = g.params.stop;
  const bool logprobs = g.params.logprobs >= 0;
  auto stream = b.engine->submit(std::move(g));
  const std::string id = random_id("cmpl-");
  const int64_t created = unix_time();
  auto chunk_of = [bp, id, created](json choice) {
    return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", bp->model_id},
                {"choices", json::array({std::move(choice)})}};
  };

  if (!ro.stream) {
    Collected c = collect(*stream);
    TextDecoder dec(b, stops, ro.skip_special_tokens);
    std::string text = dec.push(c.tokens);
    text += dec.finish();  // after push: the order of operands of + is unspecified
    int64_t offset = 0;
    json choice = {{"index", 0},
                   {"text", text},
                   {"logprobs", logprobs ? completion_logprobs(b, c.tokens, &offset) : json(nullptr)},
                   {"finish_reason", finish_reason_name(c.last.finish_reason)},
                   {"stop_reason", stop_reason(c.last)}};
    if (want_ids) choice["token_ids"] = token_ids(c.tokens);
    json out = chunk_of(std::move(choice));
    out["usage"] = usage_json(c.last.usage);
    send_json(res, out);
    return;
  }

  auto job = std::make_shared<SseJob>();
  job->stream = stream;
  auto dec = std::make_shared<TextDecoder>(b, stops, ro.skip_special_tokens);
  auto offset = std::make_shared<int64_t>(0);
  const bool usage = ro.include_usage;
  job->on_event = [=](httplib::DataSink& sink, StreamEvent& ev) {
    if (ev.finish_reason == FinishReason::kError)
      return sse_write_raw(sink, "data: " + error_json(ev.error) + "\n\n") && sse_write_raw(sink, "data: [DONE]\n\n");
    std::string text = dec->push(ev.tokens);
    if (ev.finished) text += dec->finish();
    json choice = {{"index", 0},
                   {"text", text},
                   {"logprobs", logprobs ? completion_logprobs(*bp, ev.tokens, offset.get()) : json(nullptr)},
                   {"finish_reason", ev.finished ? json(finish_reason_name(ev.finish_reason)) : json(nullptr)}};
    if (ev.finished) choice["stop_reason"] = stop_reason(ev);
    if (want_ids) choice["token_ids"] = token_ids(ev.tokens);
    if (!sse_write(sink, chunk_of(std::move(choice)))) return false;
    if (!ev.finished) return true;
    if (usage) {
      json u = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", bp->model_id},
                {"choices", json::array()}, {"usage", usage_json(ev.usage)}};
      if (!sse_write(sink, u)) return false;
    }
    return sse_write_raw(sink, "data: [DONE]\n\n");
  };
  start_sse(res, job, o.sse_keepalive);
}

}  // namespace deepinfer::server
