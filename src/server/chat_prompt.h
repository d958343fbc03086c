// OpenAI chat requests -> DeepSeek-V4 prompt tokens, through the reference encoders
// (tokenizer/chat/encoder.h).
//
//  * thinking: off by default (vLLM / SGLang behaviour). On with any of
//    "thinking": true | {"type": "enabled"}, chat_template_kwargs {"thinking": true},
//    {"enable_thinking": true} or {"thinking_mode": "thinking"}, or a reasoning_effort
//    other than "none" when thinking is not set explicitly.
//  * reasoning_effort (top level or in chat_template_kwargs) goes to the encoder as is; the
//    family decides what it accepts (V4: high|max, 0731: low|high|max, V4.1: 1..100 or
//    aliases); anything else is a 400 carrying the encoder's message.
//  * tools are rendered from the system message, as the reference does: they are attached
//    to the first message if it is a system message, otherwise an empty system message is
//    put in front. tool_choice "none" leaves the tools out; "auto", "required" and named
//    choices render them; "required" and named choices are enforced by a constraint on
//    the output (structured_output.h).
//  * response_format (json_object / json_schema) is rendered into the system prompt, as
//    the reference encoder does, and enforced by constrained decoding as well.
//  * content given as a list of parts is joined from its text parts.
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
