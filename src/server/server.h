// The HTTP front end: OpenAI-compatible routes over the public Engine API.
//
//   POST /v1/completions        prompt as text or token ids; SSE streaming
//   POST /v1/chat/completions   messages, tools, tool_choice, reasoning, thinking on/off
//   POST /v1/messages           Anthropic Messages API (text and tool_use blocks)
//   GET  /v1/models, GET /health (503 while loading), GET /metrics (Prometheus text)
//   POST /tokenize, POST /detokenize
//   GET  /, /index.html, /app.css, /app.js: the chat page (webui.h), no API key needed
//   HEAD on every GET route; a request from a browser page of a foreign origin (not
//   --allowed-origins) is a 403 and a POST body that is not application/json a 415, both
//   before any work; --api-key guards /v1/*, /tokenize, /detokenize and /metrics
//
// The server listens before the model is loaded (so /health can say 503); set_backend()
// makes it ready. Every error is an OpenAI-shaped JSON body with the status chosen in
// errors.cpp. A client that disconnects cancels its request, streaming or not. The
// connection handling (deadlines, caps, pipelining) is http_io.h.
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::server {

class TokenIndexCache;  // token_constraint.h
std::shared_ptr<TokenIndexCache> make_token_index_cache();
class ResponseStore;  // responses.cpp: stored Responses API conversations
std::shared_ptr<ResponseStore> make_response_store();

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0 = any free port (tests)
  std::string api_key;               // empty = no authentication
  bool metrics_without_key = false;  // /metrics open to a scraper even under api_key
  // Body limit of the generation routes; /tokenize and /detokenize take a quarter of it.
  size_t max_body_bytes = size_t(16) << 20;
  int http_threads = 256;            // requests handled at once (each stream holds one)
  int listen_backlog = 1024;         // connections the kernel queues before accept()
  size_t max_connections = 4096;     // open connections in all; beyond, 503
  size_t max_connections_per_client = 256;  // per remote address; beyond, 503 (except /health)
  size_t max_inflight_body_bytes = size_t(64) << 20;  // request bodies held at once; beyond, 503
  std::chrono::milliseconds header_timeout{10000};  // a request's head must arrive within this
  std::chrono::milliseconds body_timeout{60000};    // and its body within this after the head
  std::chrono::milliseconds idle_timeout{60000};    // an idle keep-alive connection is closed
  std::chrono::milliseconds write_timeout{60000};   // a client that reads nothing for this long is dropped
  std::chrono::milliseconds sse_keepalive{5000};  // SSE comment while nothing else is sent
  // Origins allowed to call the API from a browser (CORS); "*" allows any. Empty: no CORS.
  std::vector<std::string> allowed_origins;
  // Host names answered besides loopback ones and `host` ("*": any). A server on a loopback
  // address refuses other names (403: DNS rebinding); on another address, only this list
  // (when given) is checked.
  std::vector<std::string> allowed_hosts;
  // The chat page at / (webui.h); serve --no-webui turns it off (404).
  bool webui = true;
};

// What the routes need once the model is loaded.
struct Backend {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null: token-id prompts only
  std::string chat_family;  // "v4" | "v4_0731" | "v41"; empty: no chat template (chat routes 400)
  std::string model_id;     // reported by /v1/models and in answers, accepted in "model"
  // Further names accepted in "model" and GET /v1/models/{id}, listed after model_id
  // (serve --served-model-name NAME ALIAS...); answers still report model_id.
  std::vector<std::string> model_aliases;
  // The tokenizer's vocabulary sorted by bytes, built on the first constrained request.
  std::shared_ptr<TokenIndexCache> token_index = make_token_index_cache();
  // Special-token strings in client content are matched as control tokens (serve
  // --allow-special-tokens-in-content, for trusted clients); normally they are plain text.
  bool trusted_special_tokens = false;
  // Responses kept for previous_response_id (in memory, least recently used out first).
  std::shared_ptr<ResponseStore> responses = make_response_store();
};

class Server {
 public:
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws std::runtime_error on failure.
  int bind();
  // Serves until stop() or shutdown(); call after bind(), from any one thread.
  void listen();
  // Stops at once: requests in flight are cancelled.
  void stop();
  // Stops accepting, lets requests in flight finish for up to `grace`, then cancels the rest;
  // listen() returns when all have ended. /health answers 503 meanwhile.
  void shutdown(std::chrono::milliseconds grace);
  bool running() const;

  void set_backend(std::shared_ptr<const Backend> backend);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A Backend for a checkpoint directory: engine, DIR/tokenizer.json if present (its text for
// stop strings), the chat family detected from the checkpoint. Throws on load failure.
std::shared_ptr<const Backend> load_backend(EngineOptions options, const std::string& model_id,
                                            bool trusted_special_tokens = false);

}  // namespace deepinfer::server
