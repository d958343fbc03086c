// The engine as Python sees it: Engine (load a checkpoint, submit requests, stats) and
// Batch (the requests of one generate / chat call, read as they progress).
//
// GIL: loading, waiting for tokens and decoding them run with the GIL released, so other
// Python threads (and the engine thread, which never touches Python) keep going. A Batch
// is read by polling with a timeout so that Python can deliver KeyboardInterrupt between
// polls; its destructor cancels whatever is still running, which is how dropping a
// stream iterator stops its request.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/json_limits.h"
#include "deepinfer/engine.h"
#include "text_binding.h"
#include "tokenizer/chat/chat_request.h"
#include "tokenizer/chat/encoder.h"
#include "tokenizer/chat/family.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/detokenizer.h"

namespace deepinfer::python {

namespace {

// One token of a request's output with its logprobs (when they were asked for).
struct TokenOut {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

TokenOut token_out(const GeneratedToken& t) {
  TokenOut o{t.token, t.logprob, {}};
  o.top.reserve(t.top.size());
  for (const TokenLogprob& a : t.top) o.top.emplace_back(a.token, a.logprob);
  return o;
}

// What happened to one request since the last poll.
struct Update {
  int64_t index = 0;                     // position of the request in its batch
  std::vector<int32_t> token_ids;        // every generated token, stop tokens included
  std::vector<TokenOut> logprobs;        // one per token when logprobs >= 0
  std::vector<TokenOut> prompt_logprobs; // prompt tokens 1.. when prompt_logprobs >= 0
  std::string text;                      // decoded delta, stop strings cut, stop tokens silent
  // Chat requests: the parser's events for `text` as (kind, text, tool index).
  std::vector<std::tuple<std::string, std::string, int>> events;
  bool finished = false;
  std::string finish_reason;  // "stop" | "length" | "abort" | "error" once finished
  std::string stop_string;    // the stop string that ended it, if any
  int32_t stop_token = -1;    // the stop token id that ended it, if any (EOS included)
  std::string error;          // the engine's message when finish_reason == "error"
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

const char* event_kind(chat::ChatEventKind k) {
  switch (k) {
    case chat::ChatEventKind::Content: return "content";
    case chat::ChatEventKind::Reasoning: return "reasoning";
    case chat::ChatEventKind::ToolCallBegin: return "tool_call_begin";
    case chat::ChatEventKind::ToolCallArguments: return "tool_call_arguments";
    case chat::ChatEventKind::ToolCallEnd: return "tool_call_end";
    case chat::ChatEventKind::Error: return "error";
  }
  return "";
}

// A request as Python hands it over.
struct RequestIn {
  std::vector<int32_t> prompt;
  SamplingParams params;
  bool skip_special_tokens = true;
};

// The loaded engine with what its checkpoint says about text: tokenizer.json (if any),
// the chat family (if detectable).
struct Session {
  std::shared_ptr<Engine> engine;
  std::optional<TextTokenizer> tok;
  std::optional<chat::ChatFamily> family;
  std::string family_reason;
  std::vector<int32_t> chat_hidden;  // chat::chat_hidden_token_ids
};

// What Python holds: the session is shared with every Batch read from it.
struct EngineHandle {
  std::shared_ptr<const Session> s;
};

std::shared_ptr<const Session> open_session(EngineOptions o) {
  auto s = std::make_shared<Session>();
  try {
    if (std::filesystem::exists(o.model_dir + "/tokenizer.json")) {
      s->tok = TextTokenizer::load(o.model_dir);
      auto tok = s->tok->tok;
      // The text stop strings are matched against: special tokens give none (as the server).
      o.token_text = [tok](int32_t id) { return tok->is_special(id) ? std::string() : tok->token_bytes(id); };
      s->chat_hidden = chat::chat_hidden_token_ids(*tok);
    }
    try {
      s->family = chat::detect_family(o.model_dir, &s->family_reason);
    } catch (const std::exception& e) {
      s->family_reason = e.what();
    }
    s->engine = Engine::create(o);
  } catch (const std::invalid_argument&) {
    throw;  // a bad option (numerics, kernels): ValueError
  } catch (const std::exception& e) {
    throw EngineError(e.what());
  }
  return s;
}

// The requests of one call: submitted together (so the engine batches them), read through
// one StreamWaiter.
class Batch {
 public:
  Batch(std::shared_ptr<const Session> session, std::vector<RequestIn> requests, std::optional<bool> chat_thinking)
      : session_(std::move(session)), waiter_(std::make_shared<StreamWaiter>()) {
    if (chat_thinking && !session_->family) throw std::invalid_argument("this checkpoint has no chat format");
    const Engine& engine = *session_->engine;
    // Validate all before submitting any, so a bad request leaves nothing running.
    for (size_t i = 0; i < requests.size(); ++i) {
      const Status st = engine.validate(GenerateRequest{requests[i].prompt, requests[i].params});
      if (!st.ok())
        throw std::invalid_argument((requests.size() > 1 ? "request " + std::to_string(i) + ": " : std::string()) +
                                    st.message);
    }
    std::vector<GenerateRequest> gens;
    gens.reserve(requests.size());
    for (RequestIn& r : requests) {
      Slot slot;
      slot.logprobs = r.params.logprobs >= 0;
      if (session_->tok) {
        slot.decoder = std::make_unique<tokenizer::StreamingDecoder>(*session_->tok->tok, r.params.stop,
                                                                     r.skip_special_tokens);
        if (chat_thinking && r.skip_special_tokens) slot.hidden = &session_->chat_hidden;
      }
      if (chat_thinking) slot.parser = std::make_unique<chat::OutputParser>(*session_->family, *chat_thinking);
      gens.push_back(GenerateRequest{std::move(r.prompt), std::move(r.params)});
      slots_.push_back(std::move(slot));
    }
    // One hand-over, so the engine's first step already holds all of them.
    auto streams = session_->engine->submit_all(std::move(gens), waiter_);
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].stream = std::move(streams[i]);
  }

  ~Batch() { cancel(); }

  // Updates of the requests that progressed, waiting up to timeout_s for the first one.
  // Called with the GIL held; releases it while waiting and decoding.
  std::vector<Update> poll(double timeout_s) {
    nb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::vector<Update> out;
    for (;;) {
      for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (s.finished) continue;
        if (auto ev = s.stream->next(std::chrono::milliseconds(0))) out.push_back(absorb(i, *ev));
      }
      if (!out.empty() || done()) return out;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      waiter_->wait(left);
    }
  }

  void cancel() {
    for (const Slot& s : slots_)
      if (s.stream) s.stream->cancel();  // finished requests ignore it
  }

  // Without the lock: a reader may be waiting in poll() on another thread.
  bool done() const { return n_finished_.load() == slots_.size(); }

  std::vector<uint64_t> request_ids() const {
    std::vector<uint64_t> ids;
    for (const Slot& s : slots_) ids.push_back(s.stream->id());
    return ids;
  }

  // A chat request's reply folded from all its parser events:
  // (content, reasoning_content, [(name, arguments)], errors).
  auto parsed(size_t i) {
    std::lock_guard<std::mutex> lk(mu_);
    if (i >= slots_.size() || !slots_[i].parser) throw std::invalid_argument("not a chat request of this batch");
    const chat::ParsedOutput p = slots_[i].acc.result();
    std::vector<std::pair<std::string, std::string>> calls;
    for (const auto& c : p.tool_calls) calls.emplace_back(c.name, c.arguments);
    return std::make_tuple(p.content, p.reasoning_content, std::move(calls), p.errors);
  }

 private:
  struct Slot {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<tokenizer::StreamingDecoder> decoder;
    const std::vector<int32_t>* hidden = nullptr;  // sorted ids that produce no text
    std::unique_ptr<chat::OutputParser> parser;
    chat::OutputAccumulator acc;
    bool logprobs = false;
    bool text_stopped = false;  // the decoder saw a stop string: no more text
    bool finished = false;
  };

  std::string decode(Slot& s, const std::vector<GeneratedToken>& tokens, bool finished) {
    std::string text;
    if (!s.decoder || s.text_stopped) return text;
    for (const GeneratedToken& t : tokens) {
      if (t.is_stop_token) continue;
      if (s.hidden && std::binary_search(s.hidden->begin(), s.hidden->end(), t.token)) continue;
      auto r = s.decoder->push(t.token);
      text += r.text;
      if (r.stopped) {
        s.text_stopped = true;
        return text;
      }
    }
    if (finished) {
      text += s.decoder->finish().text;
      s.text_stopped = true;
    }
    return text;
  }

  Update absorb(size_t i, StreamEvent& ev) {
    Slot& s = slots_[i];
    Update u;
    u.index = int64_t(i);
    for (const GeneratedToken& t : ev.tokens) {
      u.token_ids.push_back(t.token);
      if (s.logprobs) u.logprobs.push_back(token_out(t));
    }
    for (const GeneratedToken& t : ev.prompt_logprobs) u.prompt_logprobs.push_back(token_out(t));
    u.text = decode(s, ev.tokens, ev.finished);
    if (s.parser) {
      std::vector<chat::ChatEvent> events = s.parser->feed(u.text);
      if (ev.finished) s.parser->finish(events);
      s.acc.add(events);
      for (const chat::ChatEvent& e : events) u.events.emplace_back(event_kind(e.kind), e.text, e.tool_index);
    }
    u.finished = ev.finished;
    s.finished = ev.finished;
    if (ev.finished) n_finished_.fetch_add(1);
    u.finish_reason = finish_reason_name(ev.finish_reason);
    u.stop_string = ev.stop_string;
    u.stop_token = ev.stop_token;
    if (ev.finish_reason == FinishReason::kError) u.error = ev.error.message;
    u.prompt_tokens = ev.usage.prompt_tokens;
    u.completion_tokens = ev.usage.completion_tokens;
    u.cached_tokens = ev.usage.cached_tokens;
    return u;
  }

  std::shared_ptr<const Session> session_;  // keeps the engine alive while requests are read
  std::shared_ptr<StreamWaiter> waiter_;
  std::vector<Slot> slots_;
  std::atomic<size_t> n_finished_{0};
  std::mutex mu_;
};

nb::dict stats_dict(const EngineStats& s) {
  nb::dict d;
  d["requests_running"] = s.requests_running;
  d["requests_waiting"] = s.requests_waiting;
  d["kv_blocks_total"] = s.kv_blocks_total;
  d["kv_blocks_used"] = s.kv_blocks_used;
  d["kv_blocks_cached"] = s.kv_blocks_cached;
  d["requests_finished_stop"] = s.requests_finished_stop;
  d["requests_finished_length"] = s.requests_finished_length;
  d["requests_finished_abort"] = s.requests_finished_abort;
  d["requests_finished_error"] = s.requests_finished_error;
  d["requests_failed_nonfinite"] = s.requests_failed_nonfinite;
  d["prompt_tokens_total"] = s.prompt_tokens_total;
  d["generation_tokens_total"] = s.generation_tokens_total;
  d["tokens_computed_total"] = s.tokens_computed_total;
  d["prefix_cache_queries"] = s.prefix_cache_queries;
  d["prefix_cache_hits"] = s.prefix_cache_hits;
  d["prefix_cache_hit_tokens"] = s.prefix_cache_hit_tokens;
  d["preemptions_total"] = s.preemptions_total;
  d["steps_total"] = s.steps_total;
  d["spec_verify_steps"] = s.spec_verify_steps;
  d["spec_draft_tokens"] = s.spec_draft_tokens;
  d["spec_accepted_tokens"] = s.spec_accepted_tokens;
  return d;
}

// The prompt of a chat request (the body of an OpenAI chat request: messages, tools,
// thinking, reasoning_effort, chat_template_kwargs, ...), translated as the server translates
// it (tokenizer/chat/chat_request.h): its text, its ids (the encoder's own markers are control
// tokens, the caller's text is plain text: a message cannot forge a turn) and whether thinking
// is on. What the translation or the encoder refuses is a ValueError with the server's message.
std::tuple<std::string, std::vector<int32_t>, bool> render_chat(const Session& s, const std::string& request_json) {
  if (!s.family) throw std::invalid_argument("this checkpoint has no chat format: " + s.family_reason);
  if (!s.tok) throw std::invalid_argument("this checkpoint has no tokenizer.json");
  std::string why;
  std::optional<chat::Json> request = parse_json_bounded<chat::Json>(request_json, &why);
  if (!request) throw std::invalid_argument("the chat request is " + why);
  if (!request->is_object()) throw std::invalid_argument("the chat request must be a JSON object");
  bool thinking = false;
  const chat::RenderedPrompt prompt = chat::render_chat_request(*s.family, *request, &thinking);
  return {prompt.text(), chat::tokenize_prompt(*s.tok->tok, prompt), thinking};
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<SamplingParams>(m, "SamplingParams")
      .def(nb::init<>())
      .def_rw("max_tokens", &SamplingParams::max_tokens)
      .def_rw("temperature", &SamplingParams::temperature)
      .def_rw("top_p", &SamplingParams::top_p)
      .def_rw("top_k", &SamplingParams::top_k)
      .def_rw("min_p", &SamplingParams::min_p)
      .def_rw("presence_penalty", &SamplingParams::presence_penalty)
      .def_rw("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_rw("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_rw("logit_bias", &SamplingParams::logit_bias)
      .def_rw("seed", &SamplingParams::seed)
      .def_rw("stop", &SamplingParams::stop)
      .def_rw("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_rw("ignore_eos", &SamplingParams::ignore_eos)
      .def_rw("logprobs", &SamplingParams::logprobs)
      .def_rw("prompt_logprobs", &SamplingParams::prompt_logprobs);

  nb::class_<RequestIn>(m, "Request")
      .def(nb::init<>())
      .def_rw("prompt", &RequestIn::prompt)
      .def_rw("params", &RequestIn::params)
      .def_rw("skip_special_tokens", &RequestIn::skip_special_tokens);

  nb::class_<TokenOut>(m, "TokenOut")
      .def_ro("token", &TokenOut::token)
      .def_ro("logprob", &TokenOut::logprob)
      .def_ro("top", &TokenOut::top);

  nb::class_<Update>(m, "Update")
      .def_ro("index", &Update::index)
      .def_ro("token_ids", &Update::token_ids)
      .def_ro("logprobs", &Update::logprobs)
      .def_ro("prompt_logprobs", &Update::prompt_logprobs)
      .def_ro("text", &Update::text)
      .def_ro("events", &Update::events)
      .def_ro("finished", &Update::finished)
      .def_ro("finish_reason", &Update::finish_reason)
      .def_ro("stop_string", &Update::stop_string)
      .def_ro("stop_token", &Update::stop_token)
      .def_ro("error", &Update::error)
      .def_ro("prompt_tokens", &Update::prompt_tokens)
      .def_ro("completion_tokens", &Update::completion_tokens)
      .def_ro("cached_tokens", &Update::cached_tokens);

  nb::class_<Batch>(m, "Batch")
      .def("poll", &Batch::poll, nb::arg("timeout_s"))
      .def("cancel", &Batch::cancel)
      .def("parsed", &Batch::parsed, nb::arg("index"), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("done", &Batch::done)
      .def_prop_ro("request_ids", &Batch::request_ids);

  nb::class_<EngineHandle>(m, "Engine")
      .def(
          "__init__",
          [](EngineHandle* self, const std::string& model_dir, const std::string& numerics, int threads,
             const std::string& kernels, int64_t kv_memory_bytes, int64_t max_model_len, int64_t max_batch_tokens,
             int64_t max_running, int64_t prefix_cache_entries, bool verify_weights, const std::string& speculative,
             int64_t num_draft_tokens) {
            EngineOptions o;
            o.model_dir = model_dir;
            o.numerics = numerics;
            o.threads = threads;
            o.kernels = kernels;
            o.kv_memory_bytes = kv_memory_bytes;
            o.max_model_len = max_model_len;
            o.max_batch_tokens = max_batch_tokens;
            o.max_running = max_running;
            o.prefix_cache_entries = prefix_cache_entries;
            o.verify_weights = verify_weights;
            o.speculative = speculative;
            o.num_draft_tokens = num_draft_tokens;
            new (self) EngineHandle{open_session(std::move(o))};
          },
          nb::arg("model_dir"), nb::arg("numerics"), nb::arg("threads"), nb::arg("kernels"),
          nb::arg("kv_memory_bytes"), nb::arg("max_model_len"), nb::arg("max_batch_tokens"), nb::arg("max_running"),
          nb::arg("prefix_cache_entries"), nb::arg("verify_weights"), nb::arg("speculative"), nb::arg("num_draft_tokens"),
          nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("model_dir", [](const EngineHandle& h) { return h.s->engine->info().model_dir; })
      .def_prop_ro("vocab_size", [](const EngineHandle& h) { return h.s->engine->info().vocab_size; })
      .def_prop_ro("max_model_len", [](const EngineHandle& h) { return h.s->engine->info().max_model_len; })
      .def_prop_ro("bos_token_id", [](const EngineHandle& h) { return h.s->engine->info().bos_token_id; })
      .def_prop_ro("eos_token_id", [](const EngineHandle& h) { return h.s->engine->info().eos_token_id; })
      .def_prop_ro("kv_blocks_total", [](const EngineHandle& h) { return h.s->engine->info().kv_blocks_total; })
      .def_prop_ro("tokenizer", [](const EngineHandle& h) { return h.s->tok; })
      .def_prop_ro("chat_family",
                   [](const EngineHandle& h) -> std::optional<std::string> {
                     if (!h.s->family) return std::nullopt;
                     return std::string(chat::family_name(*h.s->family));
                   })
      .def("stats", [](const EngineHandle& h) { return stats_dict(h.s->engine->stats()); })
      .def(
          "render_chat", [](const EngineHandle& h, const std::string& request_json) { return render_chat(*h.s, request_json); },
          nb::arg("request_json"), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "submit",
          [](const EngineHandle& h, std::vector<RequestIn> requests, std::optional<bool> chat_thinking) {
            return std::make_unique<Batch>(h.s, std::move(requests), chat_thinking);
          },
          nb::arg("requests"), nb::arg("chat_thinking") = nb::none());
}

}  // namespace deepinfer::python
