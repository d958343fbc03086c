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

// prefix + 32 lowercase hex digits: kRandomIdBytes from the OS's CSPRNG (unguessable).
constexpr size_t kRandomIdBytes = 16;
std::string random_id(const std::string& prefix);
int64_t unix_time();
// Serialises with invalid UTF-8 replaced (token text may split a character).
std::string dump(const json& j);
void send_json(httplib::Response& res, const json& j, int status = 200);
void send_error(httplib::Response& res, const Status& s);

// 404 when the body names a model this server does not serve (a missing "model" is fine).
// J: nlohmann::json or nlohmann::ordered_json (the body as its route parsed it).
template <class J>
void check_model(const J& body, const Backend& b);

json usage_json(const Usage& u);
// Adds u's output side (completion and draft tokens) to total: one more choice of a prompt.
void add_output_usage(Usage& total, const Usage& u);
// -inf (a masked token) is not JSON; OpenAI servers report -9999.0 there.
double json_logprob(float lp);
// Text of one token as a JSON-safe string (lossy for bytes that are not UTF-8).
std::string token_text(const Backend& b, int32_t id);

// Token ids -> text deltas with stop strings applied (held back while they may still
// match, cut where they match). Stop tokens (EOS, stop_token_ids) produce no text.
// `hidden`: further ids that produce no text (sorted; chat_hidden_tokens()).
class TextDecoder {
 public:
  TextDecoder(const Backend& b, std::vector<std::string> stops, bool skip_special_tokens,
              std::vector<int32_t> hidden = {});
  std::string push(const std::vector<GeneratedToken>& tokens);
  std::string finish();

 private:
  std::unique_ptr<tokenizer::StreamingDecoder> dec_;
  std::vector<int32_t> hidden_;
  bool stopped_ = false;
};

// Chat and messages output with skip_special_tokens: besides the special tokens, every added
// token the output parser does not read (role markers, FIM and placeholder tokens that the
// tokenizer does not flag special) is hidden, so no raw control token reaches a message.
// Sorted ids; empty without a tokenizer.
std::vector<int32_t> chat_hidden_tokens(const Backend& b);

// Runs a non-streaming request to its end. Throws ApiError if the request failed.
struct Collected {
  std::vector<GeneratedToken> tokens;
  std::vector<GeneratedToken> prompt_logprobs;  // prompt tokens 1.. (prompt_logprobs requests)
  StreamEvent last;  // the final event (finish reason, usage, stop string)
};
Collected collect(RequestStream& stream);
// Several requests (n > 1, a list of prompts), in order. If one fails, the others are
// cancelled and its ApiError is thrown.
std::vector<Collected> collect_all(const std::vector<std::shared_ptr<RequestStream>>& streams);

// SSE response driver over one or more requests (several: give them one StreamWaiter, so
// that an event of any of them wakes the driver). on_start writes what goes out before the
// first event (may be nothing); on_event writes one engine event of streams[index];
// on_end writes the closing chunks once every request finished; on_error writes the error
// when a request fails (the others are then cancelled and the response ends). Each returns
// false if a write failed: the client is gone, the requests are cancelled. While the engine
// is silent (long prefill), a ": keep-alive" comment goes out every `keepalive`, which also
// notices a client that left.
struct SseJob {
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::shared_ptr<StreamWaiter> waiter;
  std::function<bool(httplib::DataSink&)> on_start;
  std::function<bool(httplib::DataSink&, StreamEvent&, size_t)> on_event;
  std::function<bool(httplib::DataSink&)> on_end;
  std::function<bool(httplib::DataSink&, const Status&)> on_error;
  std::vector<bool> finished;
  size_t next = 0;  // where the next poll starts, so no request starves the others
  bool started = false;
  bool done = false;
  void cancel_all() const {
    for (const auto& s : streams) s->cancel();
  }
};
void start_sse(httplib::Response& res, std::shared_ptr<SseJob> job, std::chrono::milliseconds keepalive);
bool sse_write(httplib::DataSink& sink, const json& j);
bool sse_write_raw(httplib::DataSink& sink, const std::string& s);

}  // namespace deepinfer::server
