#include "server/errors.h"

#include <nlohmann/json.hpp>

namespace deepinfer::server {

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return 200;
    case ErrorCode::kInvalidJson:
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kContextLengthExceeded: return 400;
    case ErrorCode::kUnauthorized: return 401;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kPayloadTooLarge: return 413;
    case ErrorCode::kCancelled: return 499;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

const char* error_type(ErrorCode code) {
  switch (http_status(code)) {
    case 400:
    case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "service_unavailable_error";
    default: return "internal_server_error";
  }
}

std::string error_json(const Status& s) {
  nlohmann::json e = {{"message", s.message},
                      {"type", error_type(s.code)},
                      {"param", s.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.param)},
                      {"code", error_code_name(s.code)}};
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace deepinfer::server
