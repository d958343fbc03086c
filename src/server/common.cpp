#include "server/common.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "core/log.h"
#include "server/errors.h"
#include "server/http_io.h"
#include "tokenizer/chat/encoder.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

// n bytes from the kernel's CSPRNG: getrandom(2), or /dev/urandom where the call is missing.
void os_random_bytes(unsigned char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(out + got, n - got, 0);
    if (r > 0) got += size_t(r);
    else if (r < 0 && errno == EINTR) continue;
    else break;
  }
  if (got == n) return;
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (urandom.read(reinterpret_cast<char*>(out + got), std::streamsize(n - got))) return;
  throw std::runtime_error("no randomness from the OS for an id (getrandom and /dev/urandom failed)");
}

}  // namespace

// Ids name stored responses (GET / DELETE /v1/responses/{id}, previous_response_id), so
// knowing one must not tell another: 128 bits from the OS each, never a seeded generator.
std::string random_id(const std::string& prefix) {
  unsigned char bytes[kRandomIdBytes];
  os_random_bytes(bytes, sizeof bytes);
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (unsigned char b : bytes) {
    s.push_back(hex[b >> 4]);
    s.push_back(hex[b & 15]);
  }
  return s;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response& res, const Status& s) {
  res.status = http_status(s.code);
  res.set_content(error_json(s), "application/json");
}

template <class J>
void check_model(const J& body, const Backend& b) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) throw ApiError(ErrorCode::kInvalidRequest, "'model' must be a string", "model");
  const std::string& name = it->template get_ref<const std::string&>();
  if (name == b.model_id) return;
  for (const std::string& alias : b.model_aliases)
    if (name == alias) return;
  std::string served = "`" + b.model_id + "`";
  for (const std::string& alias : b.model_aliases) served += ", `" + alias + "`";
  throw ApiError(ErrorCode::kNotFound, "The model `" + name + "` does not exist (served: " + served + ").", "model");
}
template void check_model<json>(const json&, const Backend&);
template void check_model<nlohmann::ordered_json>(const nlohmann::ordered_json&, const Backend&);

// Speculative decoding reports where OpenAI's predicted outputs do: draft tokens that became
// part of the completion, and those that did not.
json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"completion_tokens_details",
               {{"accepted_prediction_tokens", u.accepted_draft_tokens},
                {"rejected_prediction_tokens", u.draft_tokens - u.accepted_draft_tokens}}}};
}

void add_output_usage(Usage& total, const Usage& u) {
  total.completion_tokens += u.completion_tokens;
  total.draft_tokens += u.draft_tokens;
  total.accepted_draft_tokens += u.accepted_draft_tokens;
}

double json_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

std::string token_text(const Backend& b, int32_t id) {
  if (!b.tokenizer) return "";
  return b.tokenizer->token_bytes(id);
}

TextDecoder::TextDecoder(const Backend& b, std::vector<std::string> stops, bool skip_special_tokens,
                         std::vector<int32_t> hidden)
    : hidden_(std::move(hidden)) {
  if (b.tokenizer)
    dec_ = std::make_unique<tokenizer::StreamingDecoder>(*b.tokenizer, std::move(stops), skip_special_tokens);
}

std::string TextDecoder::push(const std::vector<GeneratedToken>& tokens) {
  std::string out;
  if (!dec_ || stopped_) return out;
  for (const GeneratedToken& t : tokens) {
    if (t.is_stop_token || std::binary_search(hidden_.begin(), hidden_.end(), t.token)) continue;
    auto r = dec_->push(t.token);
    out += r.text;
    if (r.stopped) {
      stopped_ = true;
      break;
    }
  }
  return out;
}

std::vector<int32_t> chat_hidden_tokens(const Backend& b) {
  if (!b.tokenizer) return {};
  return chat::chat_hidden_token_ids(*b.tokenizer);
}

std::string TextDecoder::finish() {
  if (!dec_ || stopped_) return "";
  stopped_ = true;
  return dec_->finish().text;
}

namespace {
// Why a request cut short by a forced shutdown ends (http::server_stopping()).
Status shutting_down() {
  return Status::error(ErrorCode::kUnavailable, "the server is shutting down: the request was cancelled; retry it");
}
}  // namespace

Collected collect(RequestStream& stream) {
  Collected c;
  for (;;) {
    auto ev = stream.next(std::chrono::milliseconds(200));
    // A client that hung up gets nothing: stop its work as a dropped stream is stopped. One
    // whose request the shutdown cuts short is told so (503).
    if (http::client_gone()) {
      stream.cancel();
      if (http::server_stopping()) throw ApiError(shutting_down());
      throw ApiError(ErrorCode::kCancelled, "the client closed the connection");
    }
    if (!ev) continue;
    for (auto& t : ev->tokens) c.tokens.push_back(std::move(t));
    for (auto& t : ev->prompt_logprobs) c.prompt_logprobs.push_back(std::move(t));
    if (!ev->finished) continue;
    if (ev->finish_reason == FinishReason::kError) throw ApiError(ev->error);
    c.last = std::move(*ev);
    return c;
  }
}

std::vector<Collected> collect_all(const std::vector<std::shared_ptr<RequestStream>>& streams) {
  std::vector<Collected> out;
  try {
    for (const auto& s : streams) out.push_back(collect(*s));
  } catch (...) {
    for (const auto& s : streams) s->cancel();  // finished ones ignore it
    throw;
  }
  return out;
}

bool sse_write_raw(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

bool sse_write(httplib::DataSink& sink, const json& j) { return sse_write_raw(sink, "data: " + dump(j) + "\n\n"); }

namespace {

// An event of job.streams[i]: written out, and the response ended after the last one.
bool sse_handle(SseJob& job, httplib::DataSink& sink, StreamEvent& ev, size_t i) {
  if (ev.finish_reason == FinishReason::kError) {
    job.done = true;
    job.cancel_all();
    const bool ok = job.on_error(sink, ev.error);
    if (ok) sink.done();
    return ok;
  }
  if (!job.on_event(sink, ev, i)) {
    job.cancel_all();
    return false;
  }
  if (ev.finished) job.finished[i] = true;
  for (bool f : job.finished)
    if (!f) return true;
  job.done = true;
  if (job.on_end && !job.on_end(sink)) return false;
  sink.done();
  return true;
}

// The next event of any unfinished request, polling from job.next; nullopt if none is queued.
std::optional<StreamEvent> poll(SseJob& job, size_t* index) {
  const size_t n = job.streams.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (job.next + k) % n;
    if (job.finished[i]) continue;
    if (auto ev = job.streams[i]->next(std::chrono::milliseconds(0))) {
      job.next = (i + 1) % n;
      *index = i;
      return ev;
    }
  }
  return std::nullopt;
}

// The shutdown cut the requests short: their error, then the stream's end.
bool sse_stop(SseJob& job, httplib::DataSink& sink) {
  job.done = true;
  job.cancel_all();
  const bool ok = job.on_error(sink, shutting_down());
  if (ok) sink.done();
  return ok;
}

// One call of the content provider: the opening chunks, then one engine event (or a
// keep-alive comment when none came within `keepalive`). The wait is sliced so that a
// shutdown is seen within kStopPoll.
bool sse_step(SseJob& job, httplib::DataSink& sink, std::chrono::milliseconds keepalive) {
  constexpr std::chrono::milliseconds kStopPoll{200};
  if (job.done) {
    sink.done();
    return true;
  }
  if (!job.started) {
    job.started = true;
    job.finished.assign(job.streams.size(), false);
    if (job.on_start && !job.on_start(sink)) {
      job.cancel_all();
      return false;
    }
  }
  size_t index = 0;
  std::optional<StreamEvent> ev;
  const auto deadline = std::chrono::steady_clock::now() + keepalive;
  for (;;) {
    if (http::server_stopping()) return sse_stop(job, sink);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto slice = std::clamp(left, std::chrono::milliseconds(0), kStopPoll);
    if (job.streams.size() == 1 || !job.waiter) {
      ev = job.streams[0]->next(slice);
    } else if (!(ev = poll(job, &index)) && slice.count() > 0) {
      job.waiter->wait(slice);
      continue;
    }
    if (ev || left.count() <= 0) break;
  }
  if (!ev) {
    if (sse_write_raw(sink, ": keep-alive\n\n")) return true;
    job.cancel_all();
    return false;
  }
  return sse_handle(job, sink, *ev, index);
}

}  // namespace

void start_sse(httplib::Response& res, std::shared_ptr<SseJob> job, std::chrono::milliseconds keepalive) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, keepalive](size_t, httplib::DataSink& sink) {
        // This runs after the route returned, outside the route's exception guard: a
        // failure here ends this stream (and cancels its request), never the server.
        try {
          return sse_step(*job, sink, keepalive);
        } catch (const std::exception& e) {
          log_warn("SSE stream failed: %s", e.what());
          job->cancel_all();
          return false;
        }
      },
      [job](bool success) {
        if (!success) job->cancel_all();
      });
}

}  // namespace deepinfer::server
