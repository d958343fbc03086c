// fuzz-sources: src/tokenizer/chat/output_parser.cpp src/tokenizer/chat/family.cpp src/tokenizer/chat/py_json.cpp
// libFuzzer harness for the streaming DSML / reasoning output parser. The first input byte
// picks the family, thinking mode and a split point; the parser must never crash, and
// feeding the text in two pieces must give the same message as feeding it whole.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokenizer/chat/output_parser.h"

using namespace deepinfer::chat;

static ParsedOutput feed_split(ChatFamily family, bool thinking, std::string_view text, size_t split) {
  OutputParser parser(family, thinking);
  OutputAccumulator acc;
  acc.add(parser.feed(text.substr(0, split)));
  acc.add(parser.feed(text.substr(split)));
  acc.add(parser.finish());
  return acc.result();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t ctl = data[0];
  const ChatFamily family = (ctl & 1) ? ChatFamily::V41 : ChatFamily::V4;
  const bool thinking = (ctl & 2) != 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t split = (size_t(data[1]) * 131u + ctl) % (text.size() + 1);
  ParsedOutput whole = parse_output(family, text, thinking);
  ParsedOutput parts = feed_split(family, thinking, text, split);
  if (parsed_output_json(whole) != parsed_output_json(parts)) std::abort();
  if (whole.errors.size() != parts.errors.size()) std::abort();
  return 0;
}
