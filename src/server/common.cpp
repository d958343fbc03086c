#include "server/common.h"

#include <cmath>
#include <random>

#include "core/log.h"
#include "server/errors.h"
#include "server/http_io.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s.push_back(hex[rng() & 15]);
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

void check_model(const json& body, const Backend& b) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) throw ApiError(ErrorCode::kInvalidRequest, "'model' must be a string", "model");
  if (it->get<std::string>() != b.model_id)
    throw ApiError(ErrorCode::kNotFound, "The model `" + it->get<std::string>() + "` does not exist.", "model");
}

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

double json_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

std::string token_text(const Backend& b, int32_t id) {
  if (!b.tokenizer) return "";
  return b.tokenizer->token_bytes(id);
}

TextDecoder::TextDecoder(const Backend& b, std::vector<std::string> stops, bool skip_special_tokens) {
  if (b.tokenizer)
    dec_ = std::make_unique<tokenizer::StreamingDecoder>(*b.tokenizer, std::move(stops), skip_special_tokens);
}

std::string TextDecoder::push(const std::vector<GeneratedToken>& tokens) {
  std::string out;
  if (!dec_ || stopped_) return out;
  for (const GeneratedToken& t : tokens) {
    if (t.is_stop_token) continue;
    auto r = dec_->push(t.token);
    out += r.text;
    if (r.stopped) {
      stopped_ = true;
      break;
    }
  }
  return out;
}

std::string TextDecoder::finish() {
  if (!dec_ || stopped_) return "";
  stopped_ = true;
  return dec_->finish().text;
}

Collected collect(RequestStream& stream) {
  Collected c;
  for (;;) {
    auto ev = stream.next(std::chrono::milliseconds(200));
    // A client that hung up gets nothing: stop its work as a dropped stream is stopped.
    if (http::client_gone()) {
      stream.cancel();
      throw ApiError(ErrorCode::kCancelled, "the client closed the connection");
    }
    if (!ev) continue;
    for (auto& t : ev->tokens) c.tokens.push_back(std::move(t));
    if (!ev->finished) continue;
    if (ev->finish_reason == FinishReason::kError) throw ApiError(ev->error);
    c.last = std::move(*ev);
    return c;
  }
}

bool sse_write_raw(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

bool sse_write(httplib::DataSink& sink, const json& j) { return sse_write_raw(sink, "data: " + dump(j) + "\n\n"); }

namespace {

// One call of the content provider: the opening chunks, then one engine event (or a
// keep-alive comment when none came within `keepalive`).
bool sse_step(SseJob& job, httplib::DataSink& sink, std::chrono::milliseconds keepalive) {
  if (job.done) {
    sink.done();
    return true;
  }
  if (!job.started) {
    job.started = true;
    if (job.on_start && !job.on_start(sink)) {
      job.stream->cancel();
      return false;
    }
  }
  auto ev = job.stream->next(keepalive);
  if (!ev) {
    if (sse_write_raw(sink, ": keep-alive\n\n")) return true;
    job.stream->cancel();
    return false;
  }
  const bool last = ev->finished;
  if (!job.on_event(sink, *ev)) {
    job.stream->cancel();
    return false;
  }
  if (last) {
    job.done = true;
    sink.done();
  }
  return true;
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
          job->stream->cancel();
          return false;
        }
      },
      [job](bool success) {
        if (!success) job->stream->cancel();
      });
}

}  // namespace deepinfer::server
