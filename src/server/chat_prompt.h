// OpenAI chat requests -> DeepSeek-V4 prompt tokens, through the reference encoders
// (tokenizer/chat/encoder.h).
//
//  * the body -> the encoder's messages and options (thinking, reasoning_effort, tools and
//    response_format on the system message, content parts): chat::render_chat_request
//    (tokenizer/chat/chat_request.h), the translation the Python package's LLM.chat() uses
//    too. What it or the encoder refuses is a 400 carrying its message.
//  * tool_choice "required" and named choices, and response_format, are enforced by a
//    constraint on the output as well (structured_output.h).
//  * special-token strings in anything the client sent (content, tool results, tool schemas,
//    tool call arguments, ...) are tokenized as plain text: only the encoder's own markers
//    are control tokens, so a message cannot forge a turn. trusted_special_tokens restores
//    the old behaviour (the whole rendered prompt matched for special tokens), for clients
//    that put control tokens into content on purpose.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "server/server.h"
#include "tokenizer/chat/encoder.h"

namespace deepinfer::server {

struct ChatPrompt {
  std::vector<int32_t> ids;
  chat::ChatFamily family = chat::ChatFamily::V4;
  bool thinking = false;
  std::shared_ptr<TokenConstraint> constraint;  // tool_choice / response_format; null: none
  // Where the prefix cache should keep a checkpoint: just after the last assistant-role
  // token. The next turn re-renders this answer after the same token (reasoning dropped, so
  // the text after it differs) and hits up to there.
  std::vector<int64_t> cache_points;
};

// o[key] when o is an object with a non-null `key`, else null.
const chat::Json* find_field(const chat::Json& o, const char* key);
// Throws ApiError kInvalidRequest (400).
[[noreturn]] void bad_request(const std::string& msg, const std::string& param);

// body: the request parsed with key order kept (tool schemas are rendered in order).
// Throws ApiError (400) for malformed messages or what the encoder rejects.
ChatPrompt build_chat_prompt(const Backend& b, const chat::Json& body, bool trusted_special_tokens = false);

}  // namespace deepinfer::server
