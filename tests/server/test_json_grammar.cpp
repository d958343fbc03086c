// The byte-level JSON validator (server/json_grammar.h): valid and invalid documents,
// every prefix of a valid document, UTF-8 and surrogate rules, a randomized comparison
// with nlohmann's parser on generated and mutated documents, and the schema subset.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "schema_check.h"
#include "server/json_grammar.h"

using namespace deepinfer::server;
using deepinfer::chat::Json;

namespace {

// Feeds `text` under `schema`; returns -1 if all bytes pass, else the index of the first
// refused byte. *complete: whether the whole text is a document.
int run(const Json& schema, std::string_view text, bool* complete = nullptr, bool markers = false,
        JsonWhitespace ws = JsonWhitespace::kCompact) {
  JsonGrammar g(JsonSchema{}, markers, ws);
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

// Constrained decoding writes compact JSON: one space after ':' or ',' and nowhere else, so a
// sampled document cannot run on in whitespace (issue 27: 18 of 30 samples at temperature 1
// reached max_tokens, 43% of their text whitespace). json_valid() reads any whitespace.
TEST(JsonGrammar, SampledDocumentsAreCompact) {
  EXPECT_TRUE(accepts(nullptr, R"({"a": [1, 2], "b": {"c": null}})"));  // json.dumps separators
  EXPECT_TRUE(accepts(nullptr, R"({"a":[1,2],"b":{"c":null}})"));       // fully compact
  EXPECT_EQ(run(nullptr, R"({"a":  1})"), 6);    // a longer run after ':'
  EXPECT_EQ(run(nullptr, "[1,  2]"), 4);         // ... or after ','
  EXPECT_EQ(run(nullptr, "{\"a\":\n1}"), 5);    // only a space
  EXPECT_EQ(run(nullptr, "{\"a\":\t1}"), 5);
  EXPECT_EQ(run(nullptr, "{ \"a\":1}"), 1);      // after '{'
  EXPECT_EQ(run(nullptr, "[ 1]"), 1);            // after '['
  EXPECT_EQ(run(nullptr, "{\"a\" :1}"), 4);      // after a key
  EXPECT_EQ(run(nullptr, "[1 ,2]"), 2);          // after a value
  EXPECT_EQ(run(nullptr, "{\"a\":1 }"), 6);
  EXPECT_EQ(run(nullptr, " 1"), 0);              // before the document
  const Json schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}})");
  EXPECT_EQ(run(schema, R"({"n":  1})"), 6);
  // The plain validator still reads pretty-printed text, in runs of up to 32 bytes.
  const nlohmann::json doc = {{"a", {1, 2}}, {"b", {{"c", nullptr}}}};
  EXPECT_TRUE(json_valid(doc.dump(4)));
  EXPECT_TRUE(json_valid("[" + std::string(32, ' ') + "1]"));
  EXPECT_FALSE(json_valid("[" + std::string(33, ' ') + "1]"));
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
  EXPECT_TRUE(accepts(schema, R"({"age": -3, "tags": ["p", "q"], "name": "", "kind": "b", "score": 1.5e3})"));
  EXPECT_EQ(run(schema, R"({"kind": "c"})"), 10);                   // enum values, not only their type
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
  // A $ref that does not resolve is an error, not "any value".
  EXPECT_THROW(run(Json::parse(R"({"$ref": "#/x"})"), "[1, {}]"), SchemaError);
  EXPECT_TRUE(accepts(Json::parse(R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})"), "7"));
  EXPECT_EQ(run(Json::parse(R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})"), "{"), 0);
  EXPECT_TRUE(accepts(Json::parse(R"({"type": "object", "additionalProperties": false})"), "{}"));
  EXPECT_EQ(run(Json::parse(R"({"type": "object", "additionalProperties": false})"), "{\""), 1);
}

// ------------------------------------------------------------------ schema keywords

namespace {

std::string schema_error(const Json& schema) {
  try {
    JsonSchema s;
    s.add(schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

// A byte-level walk under the schema: each step tries all 256 bytes on a copy of the state
// (so a dead end, where nothing is allowed and the document is not complete, is caught),
// then feeds a random allowed one; past `close_after` bytes it prefers bytes that close
// things ('"', '}', ']', then ','), so most walks end.
struct ByteWalk {
  std::string text;
  bool complete = false;
  bool dead_end = false;
};
ByteWalk byte_walk(JsonGrammar& g, int32_t root, std::mt19937& rng, size_t max_bytes = 600, size_t close_after = 60) {
  ByteWalk w;
  JsonState s = g.start(root);
  for (size_t step = 0; step < max_bytes; ++step) {
    std::vector<uint8_t> ok;
    const size_t arena = g.arena_size();
    for (int c = 0; c < 256; ++c) {
      JsonState t = s;
      if (g.feed(t, uint8_t(c))) ok.push_back(uint8_t(c));
    }
    g.truncate(arena);
    w.complete = g.complete(s);
    if (ok.empty()) {
      w.dead_end = !w.complete;
      return w;
    }
    if (w.complete && (step > close_after || rng() % 8 == 0)) return w;
    uint8_t pick = ok[rng() % ok.size()];
    const uint32_t r = rng() % 4;
    auto prefer = [&](std::string_view bytes) {
      for (char want : bytes)
        if (std::find(ok.begin(), ok.end(), uint8_t(want)) != ok.end()) {
          pick = uint8_t(want);
          return;
        }
    };
    if (step > close_after && r < 2) prefer("\"}],");
    else if (r == 2) prefer(std::string_view("acn0t1-").substr(rng() % 7));
    EXPECT_TRUE(g.feed(s, pick));
    w.text += char(pick);
  }
  w.complete = g.complete(s);
  return w;
}

// Random walks under `schema`: no dead end, and every complete document validates.
void walks_validate(const Json& schema, int walks, uint32_t seed, int min_complete) {
  std::mt19937 rng(seed);
  int complete = 0;
  for (int i = 0; i < walks; ++i) {
    JsonGrammar g(JsonSchema{}, i % 2 == 0);
    const int32_t root = g.add_schema(schema);
    const ByteWalk w = byte_walk(g, root, rng);
    ASSERT_FALSE(w.dead_end) << "dead end after: " << w.text << "\nschema: " << schema.dump();
    if (!w.complete) continue;
    ++complete;
    ASSERT_TRUE(nlohmann::json::accept(w.text)) << w.text;
    const Json doc = Json::parse(w.text);
    const std::string err = schema_check::check(schema, doc);
    ASSERT_EQ(err, "") << w.text << "\nschema: " << schema.dump();
  }
  EXPECT_GE(complete, min_complete) << schema.dump();
}

}  // namespace

TEST(JsonSchemaKeywords, EnumAndConstAreExactValues) {
  const Json e = Json::parse(R"({"enum": ["red", "green", 1, 12, null, true, {"a": [1, 2]}, [3]]})");
  for (const char* ok : {"\"red\"", "\"green\"", "1", "12", "null", "true", "{\"a\":[1,2]}", "[3]"})
    EXPECT_TRUE(accepts(e, ok)) << ok;
  EXPECT_EQ(run(e, "\"blue\""), 1);
  EXPECT_EQ(run(e, "\"re\""), 3);
  EXPECT_EQ(run(e, "2"), 0);
  EXPECT_EQ(run(e, "123"), 2);
  EXPECT_EQ(run(e, "false"), 0);
  EXPECT_EQ(run(e, "{\"a\":[1,3]}"), 8);
  EXPECT_EQ(run(e, " [3]", nullptr, false, JsonWhitespace::kLoose), -1);  // whitespace before the value is JSON
  EXPECT_EQ(run(e, " [3]"), 0);  // ... that a sampled document does without
  bool done = true;
  EXPECT_EQ(run(e, "\"gre", &done), -1);
  EXPECT_FALSE(done);
  // In a container, a literal that is a prefix of another ends at the next byte.
  const Json arr = Json{{"type", "array"}, {"items", e}};
  EXPECT_TRUE(accepts(arr, "[1,12, 1,\"red\"]"));
  EXPECT_EQ(run(arr, "[1,12, 1 ,\"red\"]"), 8);  // (a space before ',' only in kLoose)
  EXPECT_EQ(run(arr, "[1,12, 1 ,\"red\"]", nullptr, false, JsonWhitespace::kLoose), -1);
  EXPECT_EQ(run(arr, "[13]"), 2);
  // const, of any type; enum values are filtered by the rest of the schema.
  EXPECT_TRUE(accepts(Json::parse(R"({"const": {"k": "v"}})"), R"({"k":"v"})"));
  EXPECT_EQ(run(Json::parse(R"({"const": 42})"), "41"), 1);
  const Json typed = Json::parse(R"({"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1})");
  EXPECT_TRUE(accepts(typed, "\"a\""));
  EXPECT_EQ(run(typed, "1"), 0);
  EXPECT_EQ(run(typed, "\"b"), 1);
  EXPECT_NE(schema_error(Json::parse(R"({"type": "integer", "enum": ["a"]})")), "");
  // Chat markup in an enum value is dropped where strings may not hold it.
  JsonGrammar g(JsonSchema{}, true);
  EXPECT_THROW(g.add_schema(Json::parse(R"({"enum": ["<think>"]})")), SchemaError);
}

TEST(JsonSchemaKeywords, RefsDefsAndRecursion) {
  // A pydantic-style document: nested models in $defs, an optional field as anyOf with null.
  const Json person = Json::parse(R"({
    "$defs": {
      "Address": {"type": "object", "title": "Address",
                  "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                  "required": ["city", "zip"], "additionalProperties": false},
      "Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0}},
              "required": ["kind"], "additionalProperties": false}},
    "type": "object",
    "properties": {"name": {"type": "string", "description": "the name"},
                   "address": {"$ref": "#/$defs/Address"},
                   "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}, "maxItems": 3},
                   "spouse": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null}},
    "required": ["name", "address", "pets"], "additionalProperties": false})");
  EXPECT_TRUE(accepts(person, R"({"name": "A", "address": {"city": "X", "zip": "12345"}, "pets": [{"kind": "cat"}]})"));
  EXPECT_TRUE(accepts(person, R"({"name": "A", "address": {"city": "X", "zip": "12345"}, "pets": [], "spouse": null})"));
  EXPECT_EQ(run(person, R"({"name": "A", "address": {"city": "X", "zip": "1234x)"), 51);
  EXPECT_EQ(run(person, R"({"name": "A", "address": {"city": "X", "zip": "12345"}, "pets": [{"kind": "cow)"), 76);
  walks_validate(person, 60, 1, 20);
  // Recursive refs: a tree of any depth the nesting limit allows; nodes are compiled once.
  const Json tree = Json::parse(R"({"$ref": "#/definitions/Node", "definitions": {"Node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/Node"}}},
      "required": ["v"], "additionalProperties": false}}})");
  JsonSchema compiled;
  compiled.add(tree);
  EXPECT_LT(compiled.nodes.size(), 10u);
  std::string deep;
  for (int i = 0; i < 15; ++i) deep += "{\"v\":1,\"kids\":[";
  deep += "{\"v\":2}";
  for (int i = 0; i < 15; ++i) deep += "]}";
  EXPECT_TRUE(accepts(tree, deep));  // 31 levels
  walks_validate(tree, 40, 2, 10);
  // Near the limit a value that needs more levels is refused, never started.
  std::string too_deep;
  for (int i = 0; i < 16; ++i) too_deep += "{\"v\":1,\"kids\":[";
  too_deep += "{";
  EXPECT_EQ(run(tree, too_deep), int(too_deep.size()) - 1);
  // A recursion that requires itself has no finite document.
  EXPECT_NE(schema_error(Json::parse(R"({"type": "object", "properties": {"c": {"$ref": "#"}}, "required": ["c"]})")), "");
  EXPECT_NE(schema_error(Json::parse(R"({"$ref": "https://example.com/x.json"})")).find("$ref"), std::string::npos);
}

TEST(JsonSchemaKeywords, Patterns) {
  auto str = [](const char* pattern) { return Json{{"type", "string"}, {"pattern", pattern}}; };
  EXPECT_TRUE(accepts(str("^[A-Z]{2}-\\d{3}$"), "\"AB-123\""));
  EXPECT_EQ(run(str("^[A-Z]{2}-\\d{3}$"), "\"AB-12\""), 6);
  EXPECT_EQ(run(str("^[A-Z]{2}-\\d{3}$"), "\"ab"), 1);
  EXPECT_TRUE(accepts(str("ab"), "\"xxabyy\""));  // unanchored: a search
  EXPECT_EQ(run(str("^ab"), "\"xab\""), 1);
  EXPECT_TRUE(accepts(str("^(cat|dog)s?$"), "\"dogs\""));
  EXPECT_EQ(run(str("^(cat|dog)s?$"), "\"cow\""), 2);
  EXPECT_TRUE(accepts(str("^[^\\s@]+@[^\\s@]+\\.[a-z]{2,}$"), "\"a.b@c.io\""));
  EXPECT_TRUE(accepts(str("^\\w+(?:-\\w+)*$"), "\"foo-bar_1\""));
  EXPECT_TRUE(accepts(str("^.{2}$"), "\"é€\""));  // '.' is one character, not one byte
  EXPECT_EQ(run(str("^.{2}$"), "\"é€😀"), 6);
  EXPECT_TRUE(accepts(str("^[α-ω]+$"), "\"λόγος\"") == false);  // 'ό' is outside α-ω
  EXPECT_TRUE(accepts(str("^[α-ω]+$"), "\"λογ\""));
  // Escapes stand for the characters they encode; \u is refused inside a pattern.
  EXPECT_TRUE(accepts(str("^a\"b\\\\c\\n$"), R"("a\"b\\c\n")"));
  EXPECT_EQ(run(str("^a+$"), R"("a\n)"), 2);
  EXPECT_EQ(run(str("^.+$"), R"("\u0061")"), 2);
  // Formats become patterns; unknown formats are annotations.
  const Json date = Json{{"type", "string"}, {"format", "date"}};
  EXPECT_TRUE(accepts(date, "\"2024-02-29\""));
  EXPECT_EQ(run(date, "\"2024-13"), 7);
  EXPECT_TRUE(accepts(Json{{"type", "string"}, {"format", "uuid"}}, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(accepts(Json{{"type", "string"}, {"format", "uri"}}, "\"anything\""));
  // With length bounds the automaton ends only where both hold.
  const Json both = Json{{"type", "string"}, {"pattern", "^(a|aaaa)$"}, {"minLength", 2}, {"maxLength", 3}};
  EXPECT_NE(schema_error(both), "");  // no string satisfies both
  const Json digits = Json{{"type", "string"}, {"pattern", "^[0-9]*$"}, {"minLength", 2}, {"maxLength", 4}};
  EXPECT_EQ(run(digits, "\"1\""), 2);
  EXPECT_EQ(run(digits, "\"12345"), 5);
  EXPECT_TRUE(accepts(digits, "\"1234\""));
  for (const char* bad : {"(a", "a)", "(?=a)", "(?!a)", "(?<=a)b", "\\1", "\\bword", "\\p{L}", "a{3,2}", "*a", "a^b",
                          "[b-a]", "a{2000}"})
    EXPECT_NE(schema_error(str(bad)).find("pattern"), std::string::npos) << bad;
  for (const char* p : {"^[a-z]+$", "^\\d{3}-\\d{4}$", "^(foo|bar)+[0-9]?$", "^(ab|cd)*$", "^[A-Fa-f0-9]{4,8}$",
                        "^[^,]+,[^,]*$", "^a.c$"})
    walks_validate(str(p), 40, 3, 15);
  walks_validate(date, 20, 4, 8);
}

// Each format accepts what its subset of the RFC allows (json_grammar.cpp, format_pattern) and
// refuses the rest: dates that do not exist (month lengths, leap years), times and offsets out of
// range, octets over 255 or with leading zeros, malformed addresses; random walks validate
// against schema_check's plain-code checks.
TEST(JsonSchemaKeywords, FormatsAcceptValidAndRefuseInvalid) {
  struct Case {
    const char* format;
    std::vector<std::string> valid, invalid;
  };
  const std::string label63(63, 'a'), label64(64, 'a');
  const Case cases[] = {
      {"date",
       {"2024-02-29", "2000-02-29", "1600-02-29", "0000-02-29", "2023-02-28", "2023-01-31", "2023-03-31", "2023-04-30",
        "2023-07-31", "2023-08-31", "2023-10-31", "2023-12-31", "1999-11-30"},
       {"2023-02-29", "1900-02-29", "2100-02-29", "2023-02-30", "2023-02-31", "2023-04-31", "2023-06-31",
        "2023-09-31", "2023-11-31", "2023-00-10", "2023-13-01", "2023-01-00", "2023-01-32", "23-01-01", "2023-1-01",
        "2023-01-01T", "2023/01/01", ""}},
      {"time",
       {"00:00:00Z", "23:59:59z", "12:30:45.123456789+05:30", "08:00:00-23:59", "19:20:30.5Z"},
       {"24:00:00Z", "23:60:00Z", "23:59:60Z", "12:00:00", "12:00:00+24:00", "12:00:00+05:60", "12:00Z",
        "12:00:00.Z", "12:00:00.1234567890Z", "1:00:00Z", "12:00:00+0530", "12:00:00 Z"}},
      {"date-time",
       {"2024-02-29T23:59:59Z", "2023-12-31t00:00:00.5+01:00", "2000-02-29T12:00:00-08:00"},
       {"2023-02-29T00:00:00Z", "2023-04-31T10:00:00Z", "2023-01-01 00:00:00Z", "2023-01-01T25:00:00Z",
        "2023-01-01T10:00:00", "2023-01-01", "10:00:00Z"}},
      {"ipv4",
       {"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.0.9", "249.200.199.100"},
       {"256.1.1.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.004", "1.2.3.00", "300.0.0.0", "1..2.3", " 1.2.3.4",
        "1.2.3.4 ", "1.2.3.-1", "a.b.c.d"}},
      {"email",
       {"a@b", "a.b@c.io", "first.last+tag@sub.example.co.uk", "x_y-z@my-host.org", "o'neil@x.com",
        "!#$%&*/=?^`{|}~@a1.b2", "u@" + label63 + ".com"},
       {"@b.com", "a@", "a@@b.com", "a b@c.com", ".a@b.com", "a.@b.com", "a..b@c.com", "a@-b.com", "a@b-.com",
        "a@b..com", "a@.b.com", "a@b.com.", "a(b)@c.com", "a@b_c.com", "\"a\"@b.com", "a@[1.2.3.4]",
        "u@" + label64 + ".com", "ab.com", "é@b.com"}},
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    const Json schema = Json{{"type", "string"}, {"format", c.format}};
    for (const std::string& s : c.valid) {
      EXPECT_TRUE(accepts(schema, Json(s).dump())) << c.format << " should accept " << s;
      EXPECT_EQ(schema_check::check(schema, Json(s)), "") << c.format << " oracle on " << s;
    }
    for (const std::string& s : c.invalid) {
      EXPECT_FALSE(accepts(schema, Json(s).dump())) << c.format << " should refuse " << s;
      EXPECT_NE(schema_check::check(schema, Json(s)), "") << c.format << " oracle on " << s;
    }
    walks_validate(schema, 20, seed++, 8);
  }
}

TEST(JsonSchemaKeywords, StringAndArrayLengths) {
  const Json s = Json{{"type", "string"}, {"minLength", 2}, {"maxLength", 3}};
  EXPECT_TRUE(accepts(s, "\"ab\""));
  EXPECT_TRUE(accepts(s, "\"é😀\\n\""));  // code points, an escape is one
  EXPECT_TRUE(accepts(s, "\"\\ud83d\\ude00x\""));  // a surrogate pair is one
  EXPECT_EQ(run(s, "\"a\""), 2);
  EXPECT_EQ(run(s, "\"abcd"), 4);
  const Json a = Json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
  EXPECT_EQ(run(a, "[]"), 1);
  EXPECT_EQ(run(a, "[1]"), 2);
  EXPECT_TRUE(accepts(a, "[1, 2]"));
  EXPECT_EQ(run(a, "[1,2,3,"), 6);
  const Json tuple = Json::parse(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                                     "items": false})");
  EXPECT_TRUE(accepts(tuple, "[\"a\", 1]"));
  EXPECT_TRUE(accepts(tuple, "[]"));
  EXPECT_EQ(run(tuple, "[1"), 1);
  EXPECT_EQ(run(tuple, "[\"a\", 1,"), 7);
  for (const Json& x : {s, a, tuple}) walks_validate(x, 30, 5, 10);
}

TEST(JsonSchemaKeywords, IntegerBoundsAreExact) {
  const Json r = Json::parse(R"({"type": "integer", "minimum": 10, "maximum": 250})");
  for (const char* ok : {"10", "99", "100", "250"}) EXPECT_TRUE(accepts(r, ok)) << ok;
  bool done = true;
  EXPECT_EQ(run(r, "9", &done), -1);  // 9 may become 90..99
  EXPECT_FALSE(done);
  EXPECT_EQ(run(r, "251"), 2);
  EXPECT_EQ(run(r, "260"), 2);
  EXPECT_EQ(run(r, "0"), 0);
  EXPECT_EQ(run(r, "-"), 0);
  const Json neg = Json::parse(R"({"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 0})");
  EXPECT_TRUE(accepts(neg, "-4"));
  EXPECT_TRUE(accepts(neg, "-1"));
  EXPECT_EQ(run(neg, "-5"), 1);
  EXPECT_EQ(run(neg, "0"), 0);
  EXPECT_TRUE(accepts(Json::parse(R"({"type": "integer", "minimum": 1.5, "maximum": 2.5})"), "2"));
  EXPECT_EQ(run(Json::parse(R"({"type": "integer", "minimum": 1.5, "maximum": 2.5})"), "1"), 0);
  EXPECT_NE(schema_error(Json::parse(R"({"type": "integer", "minimum": 3, "maximum": 2})")), "");
  for (const char* b : {R"({"type": "integer", "minimum": 10, "maximum": 250})",
                        R"({"type": "integer", "minimum": -1000000, "maximum": -999990})",
                        R"({"type": "integer", "exclusiveMinimum": 0})", R"({"type": "integer", "maximum": -3})"})
    walks_validate(Json::parse(b), 40, 6, 20);
}

TEST(JsonSchemaKeywords, NumberBounds) {
  const Json p = Json::parse(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "0.5", "1", "1.0", "1.000", "0.999999999999999", "-0"}) EXPECT_TRUE(accepts(p, ok)) << ok;
  EXPECT_EQ(run(p, "1.5"), 2);
  EXPECT_EQ(run(p, "2"), 0);
  EXPECT_EQ(run(p, "-0.1"), 3);
  EXPECT_EQ(run(p, "0.5e1"), 3);  // no exponent under bounds
  const Json ex = Json::parse(R"({"type": "number", "exclusiveMinimum": 0.25, "exclusiveMaximum": 1})");
  EXPECT_TRUE(accepts(ex, "0.2500001"));
  EXPECT_EQ(run(ex, "0.25 "), 4);
  EXPECT_EQ(run(ex, "1"), 0);
  EXPECT_TRUE(accepts(ex, "0.9"));
  for (const char* b : {R"({"type": "number", "minimum": 0, "maximum": 1})",
                        R"({"type": "number", "exclusiveMinimum": 0.25, "exclusiveMaximum": 1})",
                        R"({"type": "number", "minimum": -2.5, "maximum": -2.25})",
                        R"({"type": ["number", "null"], "maximum": 1e-3})"})
    walks_validate(Json::parse(b), 40, 7, 20);
}

TEST(JsonSchemaKeywords, ObjectsAnyOfAndRequired) {
  const Json o = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                                 "required": ["a", "c"], "additionalProperties": {"type": "boolean"}})");
  EXPECT_TRUE(accepts(o, R"({"a": 1, "c": true})"));
  EXPECT_EQ(run(o, R"({"a": 1})"), 7);              // "c" is required (an undeclared key)
  EXPECT_EQ(run(o, R"({"a": 1, "c": 1})"), 14);     // ... with additionalProperties' schema
  EXPECT_EQ(run(o, R"({"a": 1, "c": true, "a")"), 22);  // a declared key is not repeated
  EXPECT_TRUE(accepts(o, R"({"a": 1, "c": true, "ab": false})"));
  const Json u = Json::parse(R"({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 2},
                                           {"type": "null"}]})");
  EXPECT_TRUE(accepts(u, "5"));
  EXPECT_TRUE(accepts(u, "\"ab\""));
  EXPECT_TRUE(accepts(u, "null"));
  EXPECT_EQ(run(u, "-1"), 1);  // ("-0" is 0)
  EXPECT_EQ(run(u, "\"abc"), 3);
  EXPECT_EQ(run(u, "true"), 0);
  walks_validate(o, 60, 8, 5);  // (random keys seldom spell "a" and "c")
  walks_validate(u, 40, 8, 15);
}

TEST(JsonSchemaKeywords, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"not": {"type": "string"}})", "'not'"},
      {R"({"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 3}}})", "'multipleOf'"},
      {R"({"type": "object", "patternProperties": {"^a": {}}})", "'patternProperties'"},
      {R"({"if": {}, "then": {}})", "'if'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"type": "object", "minProperties": 1})", "'minProperties'"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})", "'allOf'"},
      {R"({"anyOf": [{"type": "object"}, {"type": "object", "required": ["a"]}]})", "'anyOf'"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "'oneOf'"},
      {R"({"$ref": "#/$defs/A", "maxLength": 3, "$defs": {"A": {}}})", "'$ref' together with 'maxLength'"},
      {R"({"type": "object", "properties": {"x": {"type": "strin"}}})", "unknown type"},
  };
  for (const auto& [schema, needle] : cases) {
    const std::string e = schema_error(Json::parse(schema));
    EXPECT_NE(e.find(needle), std::string::npos) << schema << " -> " << e;
  }
  EXPECT_NE(schema_error(Json::parse(R"({"type": "object", "properties": {"x": {"multipleOf": 3}}})")).find("/properties/x"),
            std::string::npos);
  // Annotations are accepted.
  EXPECT_EQ(schema_error(Json::parse(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x",
      "title": "T", "description": "d", "examples": [1], "default": 1, "$comment": "c", "deprecated": false,
      "readOnly": false, "writeOnly": false, "type": "integer", "format": "int32"})")),
            "");
}

TEST(JsonSchemaKeywords, NeverDeadEndsOnAMixedSchema) {
  const Json mixed = Json::parse(R"({"type": "object", "properties": {
      "id": {"type": "string", "format": "uuid"},
      "n": {"type": "integer", "minimum": -3, "maximum": 3},
      "x": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 2},
      "tags": {"type": "array", "items": {"type": "string", "pattern": "^#[a-z]+$", "maxLength": 6}, "maxItems": 2},
      "kind": {"const": "fixed"},
      "opt": {"anyOf": [{"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 1}, {"type": "null"}]},
      "deep": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}}},
    "required": ["n", "kind"], "additionalProperties": false})");
  walks_validate(mixed, 80, 9, 30);
}
