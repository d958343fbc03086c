// Pieces shared by the routes: JSON responses, ids, usage, token text, the non-streaming
// collector and the SSE driver.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "server/server.h"
#include "tokenizer/detokenizer.h"

namespace deepinfer::server {

using json = nlohmann::json;

std::string random_id(const std::string& prefix);
int64_t unix_time();
// Serialises with invalid UTF-8 replaced (token text may split a character).
std::string dump(const json& j);
void send_json(httplib::Response& res, const json& j, int status = 200);
void send_error(httplib::Response& res, const Status& s);

// 404 when the body names a model this server does not serve (a missing "model" is fine).
void check_model(const json& body, const Backend& b);

json usage_json(const Usage& u);
// -inf (a masked token) is not JSON; OpenAI servers report -9999.0 there.
double json_logprob(float lp);
// Text of one token as a JSON-safe string (lossy for bytes that are not UTF-8).
std::string token_text(const Backend& b, int32_t id);

// Token ids -> text deltas with stop strings applied (held back while they may still
// match, cut where they match). Stop tokens (EOS, stop_token_ids) produce no text.
class TextDecoder {
 public:
  TextDecoder(const Backend& b, std::vector<std::string> stops, bool skip_special_tokens);
  std::string push(const std::vector<GeneratedToken>& tokens);
  std::string finish();

 private:
  std::unique_ptr<tokenizer::StreamingDecoder> dec_;
  bool stopped_ = false;
};

// Runs a non-streaming request to its end. Throws ApiError if the request failed.
struct Collected {
  std::vector<GeneratedToken> tokens;
  StreamEvent last;  // the final event (finish reason, usage, stop string)
};
Collected collect(RequestStream& stream);

// SSE response driver. on_start writes what goes out before the first event (may be
// nothing); on_event writes one engine event's chunks (and the closing chunks when the
// event is the last). Both return false if a write failed: the client is gone, the request
// is cancelled. While the engine is silent (long prefill), a ": keep-alive" comment goes
// out every `keepalive`, which also notices a client that left.
struct SseJob {
  std::shared_ptr<RequestStream> stream;
  std::function<bool(httplib::DataSink&)> on_start;
  std::function<bool(httplib::DataSink&, StreamEvent&)> on_event;
  bool started = false;
  bool done = false;
};
void start_sse(httplib::Response& res, std::shared_ptr<SseJob> job, std::chrono::milliseconds keepalive);
bool sse_write(httplib::DataSink& sink, const json& j);
bool sse_write_raw(httplib::DataSink& sink, const std::string& s);

}  // namespace deepinfer::server
