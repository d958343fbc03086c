// The byte-level JSON validator (server/json_grammar.h): valid and invalid documents,
// every prefix of a valid document, UTF-8 and surrogate rules, a randomized comparison
// with nlohmann's parser on generated and mutated documents, and the schema subset.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "server/json_grammar.h"

using namespace deepinfer::server;
using deepinfer::chat::Json;

namespace {

// Feeds `text` under `schema`; returns -1 if all bytes pass, else the index of the first
// refused byte. *complete: whether the whole text is a document.
int run(const Json& schema, std::string_view text, bool* complete = nullptr, bool markers = false) {
  JsonGrammar g(JsonSchema{}, markers);
  const int32_t root = schema.is_null() ? 0 : g.add_schema(schema);
  JsonState s = g.start(root);
  for (size_t i = 0; i < text.size(); ++i)
    if (!g.feed(s, uint8_t(text[i]))) return int(i);
  if (complete) *complete = g.complete(s);
  return -1;
}

bool accepts(const Json& schema, std::string_view text) {
  bool done = false;
  return run(schema, text, &done) < 0 && done;
}

// A random JSON value (nlohmann writes it in the strict form the oracle reads back).
nlohmann::json random_value(std::mt19937& rng, int depth) {
  const int kind = int(rng() % (depth > 4 ? 5 : 7));
  switch (kind) {
    case 0: return nullptr;
    case 1: return bool(rng() & 1);
    case 2: return int64_t(rng()) - int64_t(1u << 31);
    case 3: return std::ldexp(double(rng()) / 4294967296.0 - 0.5, int(rng() % 40) - 20);
    case 4: {
      static const char* pieces[] = {"a", "B", " ", "\"", "\\", "/", "\n", "\t", "é", "€", "😀", "\x01", "<", "z"};
      std::string s;
      for (int i = int(rng() % 6); i > 0; --i) s += pieces[rng() % 14];
      return s;
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = int(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = int(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 5)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

bool ends_in_space(const std::string& s) {
  return !s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r');
}

}  // namespace

TEST(JsonGrammar, ValidDocuments) {
  for (const char* doc : {"{}", "[]", "0", "-0", "1.5e-3", "-12E+4", "\"\"", "true", "false", "null",
                          R"({"a": [1, 2.0, {"b": null}], "c": "x\"y\\u00e9\ud83d\ude00"})", " [ 1 ,\n\t2 ]",
                          "\"é€😀\"", "[[[[[]]]]]", R"({"":""})", "123456789012345678901234567890", "1e99", "-2.5E-07"})
    EXPECT_TRUE(json_valid(doc)) << doc;
}

TEST(JsonGrammar, InvalidDocuments) {
  for (const char* doc : {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", ".5", "1e", "+1", "tru", "nul",
                          "{a:1}", "{\"a\" 1}", "[1 2]", "\"\\x\"", "\"\\u12G4\"", "\"\x01\"", "{}{}", "{} ",
                          "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"", "'a'", "[1]]", "NaN", "Infinity", "1e308"})
    EXPECT_FALSE(json_valid(doc)) << doc;
}

TEST(JsonGrammar, Utf8IsCheckedBytewise) {
  EXPECT_TRUE(json_valid("\"\xC3\xA9\""));
  EXPECT_TRUE(json_valid_prefix("\"\xE2\x82"));  // a character split across tokens
  EXPECT_FALSE(json_valid("\"\xE2\x82\""));      // ... that never completes
  EXPECT_FALSE(json_valid_prefix("\"\xC0\xAF"));  // overlong
  EXPECT_FALSE(json_valid_prefix("\"\xE0\x80"));  // overlong 3-byte
  EXPECT_FALSE(json_valid_prefix("\"\xED\xA0"));  // UTF-16 surrogate
  EXPECT_FALSE(json_valid_prefix("\"\xF4\x90"));  // above U+10FFFF
  EXPECT_FALSE(json_valid_prefix("\"\xFF"));
  EXPECT_FALSE(json_valid_prefix("\"\x80"));  // a stray continuation byte
}

TEST(JsonGrammar, Limits) {
  EXPECT_TRUE(json_valid(std::string(32, '[') + std::string(32, ']')));
  EXPECT_FALSE(json_valid_prefix(std::string(33, '[')));
  EXPECT_FALSE(json_valid_prefix(std::string(33, '1')));
  EXPECT_FALSE(json_valid_prefix("[" + std::string(33, ' ')));
}

TEST(JsonGrammar, ChatMarkersRefusedInStrings) {
  EXPECT_EQ(run(nullptr, "\"a<b</c>\"", nullptr, true), -1);
  EXPECT_GE(run(nullptr, "\"x</think>\"", nullptr, true), 0);
  EXPECT_GE(run(nullptr, "\"x<think>\"", nullptr, true), 0);
  EXPECT_GE(run(nullptr, "\"<｜end▁of▁sentence｜>\"", nullptr, true), 0);
  EXPECT_GE(run(nullptr, "\"｜DSML｜\"", nullptr, true), 0);
  EXPECT_EQ(run(nullptr, "\"｜\"", nullptr, true), -1);
}

// Generated documents, their prefixes, and single-byte mutations against nlohmann's parser.
TEST(JsonGrammar, RandomDocumentsAgreeWithParser) {
  std::mt19937 rng(1234);
  static const char kBytes[] = "{}[]\",:0123456789-+.eE tfnul\\/\x01\xC3\xA9\xE2\x82\xAC\xED\xA0\xF0\x9F";
  int n_valid = 0, n_invalid = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const nlohmann::json v = random_value(rng, 0);
    const std::string doc = v.dump(iter % 3 == 0 ? 2 : -1);
    ASSERT_TRUE(json_valid(doc)) << doc;
    for (size_t k = 0; k < doc.size(); ++k) ASSERT_TRUE(json_valid_prefix(doc.substr(0, k))) << doc.substr(0, k);
    std::string m = doc;
    const size_t at = m.empty() ? 0 : rng() % m.size();
    switch (rng() % 3) {
      case 0: m.erase(at, 1); break;
      case 1: m.insert(at, 1, kBytes[rng() % (sizeof kBytes - 1)]); break;
      default: m[at] = kBytes[rng() % (sizeof kBytes - 1)]; break;
    }
    if (ends_in_space(m)) continue;  // the grammar refuses whitespace after the document
    static const std::regex kLongExponent("[eE][-+]?[0-9]{3}");
    if (std::regex_search(m, kLongExponent)) continue;  // and 3-digit exponents
    const bool want = nlohmann::json::accept(m);
    ASSERT_EQ(json_valid(m), want) << m;
    (want ? n_valid : n_invalid)++;
    // A refused byte is final: no prefix of an accepted document is refused.
    if (want) {
      for (size_t k = 0; k < m.size(); ++k) ASSERT_TRUE(json_valid_prefix(m.substr(0, k)));
    }
  }
  EXPECT_GT(n_valid, 100);
  EXPECT_GT(n_invalid, 100);
}

TEST(JsonGrammar, SchemaTypesAndRequiredKeys) {
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}},
                   "kind": {"enum": ["a", "b"]}, "score": {"type": ["number", "null"]}},
    "required": ["name", "age"],
    "additionalProperties": false})");
  EXPECT_TRUE(accepts(schema, R"({"name": "x", "age": 3})"));
  EXPECT_TRUE(accepts(schema, R"({"age": -3, "tags": ["p", "q"], "name": "", "kind": "zz", "score": 1.5e3})"));
  EXPECT_TRUE(accepts(schema, R"({"name": "x", "age": 3, "score": null})"));
  EXPECT_EQ(run(schema, "[]"), 0);                                  // top-level type
  EXPECT_EQ(run(schema, R"({"name": "x"})"), 12);                   // '}' before required "age"
  EXPECT_EQ(run(schema, R"({"nope": 1})"), 3);                      // undeclared key, at its first wrong byte
  EXPECT_EQ(run(schema, R"({"name": 1})"), 9);                      // a string property
  EXPECT_EQ(run(schema, R"({"age": 1.5})"), 9);                     // an integer property
  EXPECT_TRUE(accepts(schema, R"({"name": "", "age": -123456789012345678})"));  // 18 digits: an int64
  EXPECT_EQ(run(schema, R"({"age": 1234567890123456789})"), 26);
  EXPECT_EQ(run(schema, R"({"tags": [1]})"), 10);                   // items
  EXPECT_EQ(run(schema, R"({"kind": 1})"), 9);                      // enum value types
  EXPECT_EQ(run(schema, R"({"name": "x", "name": "y"})"), 15);      // duplicate declared key
  EXPECT_EQ(run(schema, R"({"na\u006de": "x"})"), 4);               // escapes cannot spell a declared key
  EXPECT_EQ(run(schema, R"({"name": "", "age": 1, "tags": [], "kind": "a", "score": 2,)"), 58);  // no key left
}

TEST(JsonGrammar, SchemaOpenObjectsAndUnknownKeywords) {
  const Json open = Json::parse(R"({"type": "object", "properties": {"a": {"type": "boolean"}},
                                    "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(accepts(open, R"({"a": true, "b": 1})"));
  EXPECT_EQ(run(open, R"({"b": true})"), 6);
  EXPECT_EQ(run(open, R"({"a": 1})"), 6);
  // Unsupported keywords accept any value there.
  EXPECT_TRUE(accepts(Json::parse(R"({"$ref": "#/x"})"), "[1, {}]"));
  EXPECT_TRUE(accepts(Json::parse(R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})"), "7"));
  EXPECT_EQ(run(Json::parse(R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})"), "{"), 0);
  EXPECT_TRUE(accepts(Json::parse(R"({"type": "object", "additionalProperties": false})"), "{}"));
  EXPECT_EQ(run(Json::parse(R"({"type": "object", "additionalProperties": false})"), "{\""), 1);
}
