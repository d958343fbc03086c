// DeepSeek-V4 prompt encoders, byte-exact with DeepSeek's Python reference
// `encoding/encoding_dsv4.py` (V4 preview and 0731 refresh) and V4.1's
// `encoding/encoding.py` (function `encode_messages`).
//
// Input messages are OpenAI-style dicts: role system|developer|user|assistant|
// tool|latest_reminder, content, reasoning_content, tool_calls (OpenAI format),
// tool_call_id, tools (OpenAI tool list; the reference renders them from the
// system message, or a V4 developer message), response_format, task, wo_eos.
// Tool messages are merged into the following user turn as <tool_result>
// blocks, ordered like the calls of the preceding assistant message.
//
// Everything the reference rejects (assert / raise) throws std::invalid_argument.
// Known deviations (all on inputs no API client sends):
//  * a list or dict where the reference formats a value as text (str()) throws
//    instead of inserting a Python repr;
//  * integers beyond 64 bits and NaN/Infinity literals are not representable in
//    nlohmann::json, so they cannot reproduce Python's output;
//  * `content_blocks` that is not a list throws (the reference iterates it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/chat/family.h"
#include "tokenizer/chat/py_json.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::chat {

// The reference's keyword arguments. Values are kept as JSON so that the exact
// Python semantics apply (truthiness, `in` checks, int-vs-str efforts).
struct EncodeOptions {
  Json thinking_mode = "chat";            // "chat" | "thinking" (required by the reference)
  Json reasoning_effort = nullptr;        // see ChatFamily
  Json drop_thinking = true;              // truthiness
  Json add_default_bos_token = true;      // truthiness
  Json context = nullptr;                 // list of already-encoded messages, or None
};

// Options from a JSON object of keyword arguments ("thinking_mode", "reasoning_effort",
// "drop_thinking", "add_default_bos_token", "context"). thinking_mode is
// required and unknown keys throw, as a Python call with those kwargs would.
EncodeOptions options_from_json(const Json& kwargs);

// encode_messages(messages, **options) of the family's reference encoder.
std::string encode_messages(ChatFamily family, const Json& messages, const EncodeOptions& options);

// The same prompt in pieces: from_template marks the encoder's own text (its markers such
// as <｜User｜>, <｜Assistant｜>, <think>, and its fixed wording), the rest came from the
// caller (message content, reasoning, tool results, tool schemas, tool call names and
// arguments, response_format). Tokenize the caller's pieces without matching special
// tokens, so a message cannot forge a turn. text() == encode_messages(...).
struct PromptPiece {
  std::string text;
  bool from_template = false;
};
struct RenderedPrompt {
  std::vector<PromptPiece> pieces;  // adjacent pieces differ in from_template
  std::string text() const;
};
RenderedPrompt render_messages(ChatFamily family, const Json& messages, const EncodeOptions& options);
RenderedPrompt render_messages(ChatFamily family, const nlohmann::json& messages, const EncodeOptions& options);

// A rendered prompt's ids: the encoder's pieces with special tokens matched, the caller's
// as plain text. trusted_special_tokens matches them in the whole text (the old behaviour,
// for callers that put control tokens into content on purpose).
std::vector<int32_t> tokenize_prompt(const tokenizer::Tokenizer& tok, const RenderedPrompt& prompt,
                                     bool trusted_special_tokens = false);

// The added tokens a chat reply hides when special tokens are skipped: all of them except the
// markers the output parser reads (<think>, </think>, the DSML marker), so role markers and
// placeholder tokens the tokenizer does not flag special never reach a message. Sorted ids.
std::vector<int32_t> chat_hidden_token_ids(const tokenizer::Tokenizer& tok);

// Convenience for callers holding a (key-sorted) nlohmann::json.
std::string encode_messages(ChatFamily family, const nlohmann::json& messages, const EncodeOptions& options);

// Special tokens and DSML spellings.
inline constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kEos = "<｜end▁of▁sentence｜>";
inline constexpr const char* kUser = "<｜User｜>";
inline constexpr const char* kAssistant = "<｜Assistant｜>";
inline constexpr const char* kSystem = "<｜System｜>";  // V4.1
inline constexpr const char* kLatestReminder = "<｜latest_reminder｜>";
inline constexpr const char* kThinkStart = "<think>";
inline constexpr const char* kThinkEnd = "</think>";
inline constexpr const char* kDsml = "｜DSML｜";
inline constexpr const char* kImage = "<｜deepseek_image｜>";  // V4.1

}  // namespace deepinfer::chat
