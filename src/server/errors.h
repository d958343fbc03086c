// HTTP errors: the one place that maps an ErrorCode to an HTTP status and an OpenAI error
// body. Handlers throw ApiError; the route wrapper turns it into a response.
#pragma once
#include <stdexcept>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer::server {

struct ApiError : std::runtime_error {
  Status status;
  explicit ApiError(Status s) : std::runtime_error(s.message), status(std::move(s)) {}
  ApiError(ErrorCode code, const std::string& message, const std::string& param = {})
      : ApiError(Status::error(code, message, param)) {}
};

// The mapping. 400 bad input, 401 key, 404 route/model, 413 body size, 499 client gone,
// 500 bug, 503 loading or shutting down.
int http_status(ErrorCode code);
// OpenAI's "type" field for the code ("invalid_request_error", ...).
const char* error_type(ErrorCode code);
// {"error": {"message", "type", "param", "code"}} (OpenAI shape; code = error_code_name).
std::string error_json(const Status& s);

}  // namespace deepinfer::server
