// POST /v1/completions (OpenAI legacy completions, vLLM extensions: top_k, min_p,
// repetition_penalty, stop_token_ids, ignore_eos, skip_special_tokens, return_token_ids).
//
// One request may carry a list of prompts (strings or token-id lists) and ask for n choices
// each (best_of samples drawn, the n with the highest cumulative logprob kept); choice
// index = prompt * n + choice, as OpenAI numbers them. echo puts the prompt before each
// choice's text; with logprobs, the prompt tokens' logprobs too (the first token's null),
// so that echo + logprobs + max_tokens 0 scores a text (lm-evaluation-harness loglikelihood).
#include <algorithm>
#include <numeric>

#include "server/common.h"
#include "server/errors.h"
#include "server/params.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

[[noreturn]] void bad_prompt() {
  throw ApiError(ErrorCode::kInvalidRequest,
                 "'prompt' must be a string, an array of strings, an array of token ids or an array of token-id arrays",
                 "prompt");
}

std::vector<int32_t> ids_from_json(const json& a) {
  std::vector<int32_t> ids;
  for (const auto& v : a) {
    if (!v.is_number_integer()) bad_prompt();
    const int64_t x = v.get<int64_t>();
    ids.push_back(x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : int32_t(x));
  }
  return ids;
}

struct Prompt {
  std::vector<int32_t> ids;
  std::optional<std::string> text;  // as the client sent it (echo); unset for token ids
  bool bos_added = false;           // ids[0] is a BOS put before the text (not in the echo)
};

// Text is encoded with special tokens recognised and BOS added (add_special_tokens, as
// Hugging Face tokenizers do for DeepSeek); token ids are taken as they are.
Prompt text_prompt(const std::string& text, const json& body, const Backend& b) {
  if (!b.tokenizer) throw ApiError(ErrorCode::kInvalidRequest, "no tokenizer is loaded: send token ids", "prompt");
  Prompt p{b.tokenizer->encode(text, true), text};
  const int32_t bos = b.engine->info().bos_token_id;
  if (get_bool(body, "add_special_tokens").value_or(true) && (p.ids.empty() || p.ids[0] != bos)) {
    p.ids.insert(p.ids.begin(), bos);
    p.bos_added = true;
  }
  return p;
}

std::vector<Prompt> completion_prompts(const json& body, const Backend& b) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw ApiError(ErrorCode::kInvalidRequest, "'prompt' is required", "prompt");
  if (it->is_string()) return {text_prompt(it->get<std::string>(), body, b)};
  if (!it->is_array()) bad_prompt();
  if (it->empty()) throw ApiError(ErrorCode::kInvalidRequest, "'prompt' is empty", "prompt");
  if ((*it)[0].is_number_integer()) return {Prompt{ids_from_json(*it), std::nullopt}};
  if (int64_t(it->size()) > kMaxSamplesPerRequest)
    throw ApiError(ErrorCode::kInvalidRequest,
                   "at most " + std::to_string(kMaxSamplesPerRequest) + " prompts fit in one request", "prompt");
  std::vector<Prompt> out;
  for (const auto& p : *it) {
    if (p.is_string()) out.push_back(text_prompt(p.get<std::string>(), body, b));
    else if (p.is_array()) out.push_back(Prompt{ids_from_json(p), std::nullopt});
    else bad_prompt();
  }
  return out;
}

json stop_reason(const StreamEvent& e) {
  if (!e.stop_string.empty()) return e.stop_string;
  if (e.stop_token >= 0) return e.stop_token;
  return nullptr;
}

// The text as it will read once serialised (invalid UTF-8 replaced), so that keys that
// would serialise alike are recognised as the same key.
std::string utf8_key(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

// Characters (code points) that token bytes add to the text: a character counts with the
// token that holds its first byte, so one split across tokens counts once.
int64_t text_chars(std::string_view bytes) {
  int64_t n = 0;
  for (char c : bytes) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

// The legacy completions logprobs object: tokens, token_logprobs, top_logprobs, text_offset.
// text_offset is where each token's text starts in the choice's "text", in characters (as
// OpenAI and vLLM count them, not UTF-8 bytes), running on from *offset; a token that puts
// nothing in the text (a BOS added before a text prompt, EOS, a special token skipped) does
// not move it.
struct LogprobsJson {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  void add(const Backend& b, int32_t token, json lp, json top, int64_t* offset, bool in_text) {
    const std::string s = token_text(b, token);
    tokens.push_back(s);
    lps.push_back(std::move(lp));
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    if (in_text) *offset += text_chars(s);
  }
  void add(const Backend& b, const GeneratedToken& t, int64_t* offset, bool in_text) {
    json top = json::object();
    // Keyed by text: two tokens with the same (lossy) text keep the better one, listed first.
    for (const TokenLogprob& a : t.top) top.emplace(utf8_key(token_text(b, a.token)), json_logprob(a.logprob));
    add(b, t.token, json_logprob(t.logprob), std::move(top), offset, in_text);
  }
  json value() const {
    return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }
};

// The echoed prompt's logprobs: its first token has none (null), the others come from the
// engine's prompt_logprobs.
// (The echo is the client's text, or all the ids decoded: every token but an added BOS shows.)
void add_prompt_logprobs(LogprobsJson& out, const Backend& b, const Prompt& prompt,
                         const std::vector<GeneratedToken>& lps, int64_t* offset) {
  if (prompt.ids.empty()) return;
  out.add(b, prompt.ids[0], nullptr, nullptr, offset, !prompt.bos_added);
  for (const GeneratedToken& t : lps) out.add(b, t, offset, true);
}

// Whether a generated token's text is in the choice's text (TextDecoder drops stop tokens,
// and special tokens under skip_special_tokens).
bool generated_in_text(const Backend& b, const GeneratedToken& t, bool skip_special_tokens) {
  if (t.is_stop_token) return false;
  return !(skip_special_tokens && b.tokenizer && b.tokenizer->is_special(t.token));
}

json token_ids(const std::vector<GeneratedToken>& toks) {
  json a = json::array();
  for (const auto& t : toks) a.push_back(t.token);
  return a;
}

std::string echo_text(const Backend& b, const Prompt& p) {
  if (p.text) return *p.text;
  return b.tokenizer ? b.tokenizer->decode(p.ids) : std::string();
}

double cumulative_logprob(const Collected& c) {
  double s = 0.0;
  for (const GeneratedToken& t : c.tokens) s += double(t.logprob);
  return s;
}

}  // namespace

void handle_completions(std::shared_ptr<const Backend> bp, const ServerOptions& o, const httplib::Request& req,
                        httplib::Response& res) {
  const Backend& b = *bp;
  const json body = parse_body(req.body);
  check_model(body, b);
  const RequestOptions ro = parse_request_options(body, Api::kCompletions);
  const bool want_ids = get_bool(body, "return_token_ids").value_or(false);
  const std::vector<Prompt> prompts = completion_prompts(body, b);
  const int64_t n = ro.n, best_of = ro.best_of;
  if (int64_t(prompts.size()) * best_of > kMaxSamplesPerRequest)
    throw ApiError(ErrorCode::kInvalidRequest,
                   "prompts x best_of is " + std::to_string(int64_t(prompts.size()) * best_of) + ", more than the " +
                       std::to_string(kMaxSamplesPerRequest) + " samples one request may ask for",
                   best_of > n ? "best_of" : "n");
  if (ro.stream && best_of > n)
    throw ApiError(ErrorCode::kInvalidRequest, "best_of greater than n cannot be streamed", "best_of");
  const bool logprobs = ro.sampling.logprobs >= 0;
  const std::vector<std::string> stops = ro.sampling.stop;

  // Validate everything before anything is submitted: a bad prompt fails the whole request.
  std::vector<GenerateRequest> gens;
  auto waiter = std::make_shared<StreamWaiter>();
  for (const Prompt& p : prompts)
    for (int64_t j = 0; j < best_of; ++j) {
      GenerateRequest g{p.ids, ro.sampling, {}};
      // Each sample draws its own tokens; a seed still makes the whole answer repeatable.
      if (g.params.seed) g.params.seed = *g.params.seed + uint64_t(j);
      if (best_of > n && !logprobs) g.params.logprobs = 0;  // ranking needs each token's logprob
      if (ro.echo && logprobs) g.params.prompt_logprobs = ro.sampling.logprobs;
      const Status s = b.engine->validate(g);
      if (!s.ok()) throw ApiError(s);
      gens.push_back(std::move(g));
    }
  std::vector<std::shared_ptr<RequestStream>> streams = b.engine->submit_all(std::move(gens), waiter);
  const std::string id = random_id("cmpl-");
  const int64_t created = unix_time();
  auto envelope = [bp, id, created](json choices) {
    return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", bp->model_id},
                {"choices", std::move(choices)}};
  };

  if (!ro.stream) {
    std::vector<Collected> all = collect_all(streams);
    json choices = json::array();
    Usage total;
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      // The n best of this prompt's samples (all of them, in order, without best_of).
      std::vector<size_t> order(static_cast<size_t>(best_of));
      std::iota(order.begin(), order.end(), pi * size_t(best_of));
      if (best_of > n)
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t c) { return cumulative_logprob(all[a]) > cumulative_logprob(all[c]); });
      total.prompt_tokens += all[order[0]].last.usage.prompt_tokens;
      total.cached_tokens += all[order[0]].last.usage.cached_tokens;
      for (int64_t j = 0; j < n; ++j) {
        const Collected& c = all[order[size_t(j)]];
        add_output_usage(total, c.last.usage);
        TextDecoder dec(b, stops, ro.skip_special_tokens);
        std::string text = ro.echo ? echo_text(b, prompts[pi]) : std::string();
        text += dec.push(c.tokens);
        text += dec.finish();
        LogprobsJson lp;
        int64_t offset = 0;
        if (logprobs && ro.echo) add_prompt_logprobs(lp, b, prompts[pi], c.prompt_logprobs, &offset);
        if (logprobs)
          for (const GeneratedToken& t : c.tokens) lp.add(b, t, &offset, generated_in_text(b, t, ro.skip_special_tokens));
        json choice = {{"index", int64_t(pi) * n + j},
                       {"text", text},
                       {"logprobs", logprobs ? lp.value() : json(nullptr)},
                       {"finish_reason", finish_reason_name(c.last.finish_reason)},
                       {"stop_reason", stop_reason(c.last)}};
        if (want_ids) {
          choice["token_ids"] = token_ids(c.tokens);
          if (ro.echo) choice["prompt_token_ids"] = prompts[pi].ids;
        }
        choices.push_back(std::move(choice));
      }
    }
    json out = envelope(std::move(choices));
    out["usage"] = usage_json(total);
    send_json(res, out);
    return;
  }

  // Streaming (best_of == n here): one state per choice.
  struct Choice {
    std::unique_ptr<TextDecoder> dec;
    int64_t offset = 0;
    bool echoed = false;
    std::vector<GeneratedToken> prompt_lps;
    Usage usage;
  };
  auto state = std::make_shared<std::vector<Choice>>(streams.size());
  for (auto& c : *state) c.dec = std::make_unique<TextDecoder>(b, stops, ro.skip_special_tokens);
  auto job = std::make_shared<SseJob>();
  job->streams = streams;
  job->waiter = waiter;
  const bool usage = ro.include_usage, echo = ro.echo, skip_special = ro.skip_special_tokens;
  auto chunk = [envelope](json choice) { return envelope(json::array({std::move(choice)})); };
  job->on_event = [=](httplib::DataSink& sink, StreamEvent& ev, size_t i) {
    Choice& st = (*state)[i];
    const Prompt& prompt = prompts[i / size_t(n)];
    const int64_t index = int64_t(i);  // streams are in prompt-major order already
    st.usage = ev.usage;
    for (auto& t : ev.prompt_logprobs) st.prompt_lps.push_back(std::move(t));
    // The echo goes out once the prompt's logprobs are complete (before the first token).
    if (echo && !st.echoed &&
        (st.prompt_lps.size() + 1 >= prompt.ids.size() || !logprobs || !ev.tokens.empty() || ev.finished)) {
      st.echoed = true;
      LogprobsJson lp;
      if (logprobs) add_prompt_logprobs(lp, *bp, prompt, st.prompt_lps, &st.offset);
      json c = {{"index", index}, {"text", echo_text(*bp, prompt)},
                {"logprobs", logprobs ? lp.value() : json(nullptr)}, {"finish_reason", nullptr}};
      if (want_ids) c["prompt_token_ids"] = prompt.ids;
      if (!sse_write(sink, chunk(std::move(c)))) return false;
    }
    if (ev.tokens.empty() && !ev.finished) return true;
    std::string text = st.dec->push(ev.tokens);
    if (ev.finished) text += st.dec->finish();
    LogprobsJson lp;
    if (logprobs)
      for (const GeneratedToken& t : ev.tokens) lp.add(*bp, t, &st.offset, generated_in_text(*bp, t, skip_special));
    json c = {{"index", index},
              {"text", text},
              {"logprobs", logprobs ? lp.value() : json(nullptr)},
              {"finish_reason", ev.finished ? json(finish_reason_name(ev.finish_reason)) : json(nullptr)}};
    if (ev.finished) c["stop_reason"] = stop_reason(ev);
    if (want_ids) c["token_ids"] = token_ids(ev.tokens);
    return sse_write(sink, chunk(std::move(c)));
  };
  job->on_end = [=](httplib::DataSink& sink) {
    if (usage) {
      Usage total;
      for (size_t i = 0; i < state->size(); ++i) {
        const Usage& u = (*state)[i].usage;
        if (i % size_t(n) == 0) {  // the prompt counts once per prompt, not per choice
          total.prompt_tokens += u.prompt_tokens;
          total.cached_tokens += u.cached_tokens;
        }
        add_output_usage(total, u);
      }
      json u = envelope(json::array());
      u["usage"] = usage_json(total);
      if (!sse_write(sink, u)) return false;
    }
    return sse_write_raw(sink, "data: [DONE]\n\n");
  };
  job->on_error = [](httplib::DataSink& sink, const Status& s) {
    return sse_write_raw(sink, "data: " + error_json(s) + "\n\n") && sse_write_raw(sink, "data: [DONE]\n\n");
  };
  start_sse(res, job, o.sse_keepalive);
}

}  // namespace deepinfer::server
