// fuzz-sources: src/server/json_grammar.cpp src/server/json_schema.cpp src/server/json_regex.cpp src/regex/syntax.cpp src/regex/unicode.cpp src/regex/unicode_tables.cpp src/tokenizer/chat/py_json.cpp
// libFuzzer harness for the constrained-decoding JSON validator. What sampling relies on:
//   - a text the validator calls a complete document is valid JSON for nlohmann::json (the
//     validator may refuse valid documents past its limits, never accept invalid ones);
//   - every prefix of an accepted text was accepted byte by byte (feeding never recovers
//     from a refused byte, so a token mask built on it cannot paint itself into a corner
//     the checker later disagrees with);
//   - under a schema, an accepted document has the schema's top-level type and required keys,
//     and satisfies the compiled schema (JsonSchema::admits: enum values, patterns, bounds).
// The first input byte picks the schema; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/json_grammar.h"

using namespace deepinfer::server;

namespace {

const char* const kSchemas[] = {
    R"({})",
    R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false})",
    R"({"type":"array","items":{"type":"boolean"}})",
    R"({"type":["number","null"]})",
    R"({"type":"object","properties":{"x":{"type":"array","items":{"type":"object"}}},"required":["x"]})",
    R"({"type":"object","properties":{"e":{"enum":["a","ab",1,12,null,{"k":[1]}]},"p":{"type":"string","pattern":"^[a-c]{1,3}-\\d$"},"n":{"type":"integer","minimum":-5,"maximum":120},"x":{"type":"number","exclusiveMinimum":0,"maximum":1.5},"s":{"type":"string","minLength":1,"maxLength":3}},"additionalProperties":false})",
    R"({"$defs":{"T":{"type":"object","properties":{"v":{"const":1},"k":{"type":"array","items":{"$ref":"#/$defs/T"},"maxItems":2}},"required":["v"],"additionalProperties":false}},"anyOf":[{"$ref":"#/$defs/T"},{"type":"null"},{"type":"string","format":"date"}]})",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t pick = data[0] % (sizeof kSchemas / sizeof kSchemas[0]);
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  // Plain validator against nlohmann.
  if (json_valid(text) && !nlohmann::json::accept(text)) std::abort();
  if (json_valid(text))
    for (size_t n = 0; n <= text.size(); ++n)
      if (!json_valid_prefix(text.substr(0, n))) std::abort();

  // The schema-driven grammar, byte by byte.
  JsonSchema schema;
  const int32_t node = schema.add(deepinfer::chat::Json::parse(kSchemas[pick]));
  JsonGrammar g(std::move(schema), false);
  JsonState s = g.start(node);
  size_t fed = 0;
  for (; fed < text.size(); ++fed)
    if (!g.feed(s, uint8_t(text[fed]))) break;
  if (fed < text.size() || !g.complete(s)) return 0;
  if (!nlohmann::json::accept(text)) std::abort();
  const nlohmann::json doc = nlohmann::json::parse(text);
  if (!g.schema().admits(node, deepinfer::chat::Json::parse(text))) std::abort();
  switch (pick) {
    case 1:
      if (!doc.is_object() || !doc.contains("a") || !doc["a"].is_number_integer()) std::abort();
      for (auto& [k, v] : doc.items())
        if (k != "a" && k != "b") std::abort();
      if (doc.contains("b") && !doc["b"].is_string()) std::abort();
      break;
    case 2:
      if (!doc.is_array()) std::abort();
      for (const auto& v : doc)
        if (!v.is_boolean()) std::abort();
      break;
    case 3:
      if (!doc.is_number() && !doc.is_null()) std::abort();
      break;
    case 4:
      if (!doc.is_object() || !doc.contains("x") || !doc["x"].is_array()) std::abort();
      for (const auto& v : doc["x"])
        if (!v.is_object()) std::abort();
      break;
    default:
      break;
  }
  return 0;
}
