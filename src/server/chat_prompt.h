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
//    choices render them (the choice itself is not enforced: no constrained decoding).
//  * response_format (json_object / json_schema) is rendered into the system prompt, as
//    the reference encoder does; it is not enforced either.
//  * content given as a list of parts is joined from its text parts.
#pragma once
#include <cstdint>
#include <vector>

#include "server/server.h"
#include "tokenizer/chat/encoder.h"

namespace deepinfer::server {

struct ChatPrompt {
  std::vector<int32_t> ids;
  chat::ChatFamily family = chat::ChatFamily::V4;
  bool thinking = false;
};

// body: the request parsed with key order kept (tool schemas are rendered in order).
// Throws ApiError (400) for malformed messages or what the encoder rejects.
ChatPrompt build_chat_prompt(const Backend& b, const chat::Json& body);

}  // namespace deepinfer::server
