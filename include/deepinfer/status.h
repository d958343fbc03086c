// Errors at the edges of the engine: one enum for everything a request can fail with.
// The server maps each code to an HTTP status and an OpenAI error type in exactly one
// function (src/server/errors.cpp); nothing else decides a status code.
#pragma once
#include <string>
#include <utility>

namespace deepinfer {

enum class ErrorCode {
  kOk = 0,
  kInvalidJson,            // the body is not JSON, or not an object
  kInvalidRequest,         // a field is missing, of the wrong type or out of range
  kContextLengthExceeded,  // prompt (+ requested tokens) longer than the model's context
  kPayloadTooLarge,        // body over the server's size limit
  kUnauthorized,           // missing or wrong API key
  kNotFound,               // no such route or model
  kUnavailable,            // model still loading, or engine shutting down
  kCancelled,              // the request was cancelled (client went away)
  kInternal,               // a bug; the request fails, the server keeps serving
};

const char* error_code_name(ErrorCode code);

struct Status {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  std::string param;  // the offending request field, when there is one

  bool ok() const { return code == ErrorCode::kOk; }
  static Status error(ErrorCode c, std::string msg, std::string param = {}) {
    return Status{c, std::move(msg), std::move(param)};
  }
};

}  // namespace deepinfer
