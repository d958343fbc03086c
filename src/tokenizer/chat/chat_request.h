// An OpenAI chat request body -> what a DeepSeek-V4 encoder takes (messages and options): the
// one translation the server (/v1/chat/completions and the routes built on it) and the Python
// package's LLM.chat() use.
//
//  * thinking: off by default (vLLM / SGLang behaviour). On with any of
//    "thinking": true | {"type": "enabled"}, chat_template_kwargs {"thinking": true},
//    {"enable_thinking": true} or {"thinking_mode": "thinking"}, or a reasoning_effort
//    other than "none" when thinking is not set explicitly.
//  * reasoning_effort (top level or in chat_template_kwargs): OpenAI's names are mapped onto
//    the nearest level the family has (minimal / low -> V4 "high", the others "low";
//    medium -> "high"; xhigh -> "max"; "none" is thinking off); anything else goes to the
//    encoder as given, so the family decides what it accepts (V4: high|max, 0731: low|high|max,
//    V4.1: 1..100 or those) and refuses the rest with the reference's message.
//  * chat_template_kwargs drop_thinking goes to the encoder.
//  * tools are rendered from the system message, as the reference does: they are attached
//    to the first message if it is a system message, otherwise an empty system message is
//    put in front. tool_choice "none" leaves the tools out. response_format (json_object /
//    json_schema) goes on that system message too.
//  * content given as a list of parts is joined from its text parts; other parts are refused.
#pragma once
#include <stdexcept>
#include <string>

#include "tokenizer/chat/encoder.h"

namespace deepinfer::chat {

// A body the translation or the encoder refuses: why, and the body field it is about.
struct RequestError : std::invalid_argument {
  std::string param;
  RequestError(const std::string& message, std::string field)
      : std::invalid_argument(message), param(std::move(field)) {}
};

struct ChatRequest {
  Json messages;          // as the encoder takes them
  EncodeOptions options;  // thinking_mode, reasoning_effort (mapped to the family), drop_thinking
  bool thinking = false;  // the prompt ends in <think>: the reply starts with reasoning
};

// body: the request, key order kept (tool schemas are rendered in order). Throws RequestError.
ChatRequest chat_request(ChatFamily family, const Json& body);

// chat_request() rendered by the family's encoder; *thinking (if given) as above. What the
// encoder rejects is a RequestError on "messages" carrying the encoder's message.
RenderedPrompt render_chat_request(ChatFamily family, const Json& body, bool* thinking = nullptr);

}  // namespace deepinfer::chat
