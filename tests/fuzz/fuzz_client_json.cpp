// fuzz-sources: src/core/json_limits.cpp src/tokenizer/chat/encoder.cpp src/tokenizer/chat/family.cpp src/tokenizer/chat/py_json.cpp src/regex/unicode_tables.cpp src/regex/unicode.cpp src/regex/syntax.cpp src/tokenizer/regex.cpp src/tokenizer/pretokenizer.cpp src/tokenizer/bpe.cpp src/tokenizer/added_tokens.cpp src/tokenizer/tokenizer.cpp src/tokenizer/detokenizer.cpp
// libFuzzer harness for client JSON, both where it arrives as a body and where it rides inside
// a string of one (tool-call arguments, which the chat encoders json.loads). What must hold:
//   - parse_json_bounded never builds a value deeper than its limit, and agrees with the
//     depth scan (a text it accepts is within the limit; one within it that nlohmann parses is
//     accepted);
//   - encoding a conversation whose assistant turn carries the input as its arguments, in every
//     family, either succeeds or throws invalid_argument: never a crash or a stack overflow.
// The first input byte picks the family and how the input is wrapped; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/json_limits.h"
#include "tokenizer/chat/encoder.h"

using namespace deepinfer;
using chat::Json;

namespace {

size_t depth_of(const Json& j) {  // recursion is fine here: j is already bounded
  size_t d = 0;
  if (j.is_array() || j.is_object())
    for (const auto& v : j) d = std::max(d, depth_of(v));
  return (j.is_array() || j.is_object()) ? d + 1 : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  JsonLimits limits;
  limits.max_depth = 1 + mode % 8;  // small limits, so the fuzzer reaches the edge cheaply
  const std::optional<Json> j = parse_json_bounded<Json>(text, nullptr, limits);
  if (j && depth_of(*j) > limits.max_depth) abort();
  if (!j && json_limit_violation(text, limits).empty() && Json::accept(text)) abort();

  // Strings inside a parsed body are valid UTF-8 (the parser checks), so only such text
  // reaches the encoders.
  std::string as_string;
  try {
    as_string = Json(text).dump();
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  const chat::ChatFamily families[] = {chat::ChatFamily::V4, chat::ChatFamily::V4_0731, chat::ChatFamily::V41};
  const chat::ChatFamily family = families[(mode >> 3) % 3];
  Json call = {{"type", "function"}, {"function", {{"name", "f"}, {"arguments", text}}}};
  // The V4.1 encoder unwraps a string twice: a JSON string holding the input reaches the
  // second json.loads.
  if (mode & 0x20) call["function"]["arguments"] = as_string;
  const Json messages = Json::array({Json{{"role", "user"}, {"content", "hi"}},
                                     Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}}});
  try {
    (void)chat::encode_messages(family, messages, chat::EncodeOptions{});
  } catch (const std::invalid_argument&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
