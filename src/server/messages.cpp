// POST /v1/messages (Anthropic Messages API) - placeholder until implemented below.
#include "server/errors.h"
#include "server/routes.h"

namespace deepinfer::server {

void handle_messages(BackendPtr, const ServerOptions&, const httplib::Request&, httplib::Response&) {
  throw ApiError(ErrorCode::kNotFound, "the Anthropic Messages API is not available yet");
}

}  // namespace deepinfer::server
