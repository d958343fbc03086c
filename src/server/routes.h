// Route handlers. Each takes the loaded backend and throws ApiError for a bad request;
// the server's wrapper turns exceptions into JSON errors.
#pragma once
#include <httplib.h>

#include <memory>

#include "server/server.h"

namespace deepinfer::server {

// The generation routes keep the backend alive for as long as their response streams.
using BackendPtr = std::shared_ptr<const Backend>;
void handle_completions(BackendPtr b, const ServerOptions& o, const httplib::Request& req, httplib::Response& res);
void handle_chat(BackendPtr b, const ServerOptions& o, const httplib::Request& req, httplib::Response& res);
void handle_messages(BackendPtr b, const ServerOptions& o, const httplib::Request& req, httplib::Response& res);
// POST /v1/messages/count_tokens (Anthropic): {"input_tokens": N} for a messages body.
void handle_count_tokens(BackendPtr b, const ServerOptions& o, const httplib::Request& req, httplib::Response& res);
void handle_models(const Backend& b, httplib::Response& res);
// GET /v1/models/{id} (the SDKs' models.retrieve): the model object, 404 for another id.
void handle_model(const Backend& b, const std::string& id, httplib::Response& res);
// OpenAI Responses API (responses.cpp): POST /v1/responses, GET / DELETE /v1/responses/{id}.
void handle_responses(BackendPtr b, const ServerOptions& o, const httplib::Request& req, httplib::Response& res);
// GET /v1/responses/{id} and GET /v1/responses/{id}/input_items (req.path names which).
void handle_response_get(const Backend& b, const httplib::Request& req, httplib::Response& res);
void handle_response_delete(const Backend& b, const std::string& id, httplib::Response& res);
void handle_tokenize(const Backend& b, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(const Backend& b, const httplib::Request& req, httplib::Response& res);
// Prometheus text exposition of the engine's counters, gauges and histograms.
std::string metrics_text(const EngineStats& s, const std::string& model_id);

}  // namespace deepinfer::server
