// Constrained decoding: the DSML tool-call grammar, the token constraint over the tiny
// model's tokenizer (random walks through the mask always give parseable output), the
// sampler's masking, and tool_choice / response_format over HTTP on the tiny random model
// (its text is noise, so the checks are on structure).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "engine/sampler.h"
#include "server/json_grammar.h"
#include "server/server.h"
#include "server/token_constraint.h"
#include "server/tool_grammar.h"
#include "schema_check.h"
#include "server_harness.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::server;
using namespace deepinfer::testing;
using deepinfer::chat::Json;

namespace {

std::string model_dir() { return std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model"; }

std::vector<ToolSpec> weather_tools() {
  return {{"get_weather", Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
                                          "days": {"type": "integer"}}, "required": ["city"]})")},
          {"noop", Json::parse(R"({"type": "object", "properties": {}})")},
          {"free", Json()}};
}

// Bytes fed after the forced prefix; -1 if all pass, else the index of the refused byte.
int feed_tools(ToolGrammar& g, ToolState& s, std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (!g.feed(s, uint8_t(text[i]))) return int(i);
  return -1;
}

const char* kCityDays =
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

}  // namespace

TEST(ToolGrammar, NamedCallParsesIntoToolCalls) {
  ToolGrammar g(chat::ChatFamily::V4, weather_tools(), false);
  const std::string prefix = g.forced_prefix(0);
  EXPECT_EQ(prefix, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n");
  ToolState s = g.start(0);
  ASSERT_EQ(feed_tools(g, s, kCityDays), -1);
  EXPECT_TRUE(g.complete(s));
  const chat::ParsedOutput out = chat::parse_output(chat::ChatFamily::V4, prefix + kCityDays, false);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_TRUE(out.errors.empty());
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments), Json::parse(R"({"city": "Paris", "days": 3})"));
}

TEST(ToolGrammar, RefusesWhatTheParserWouldReject) {
  auto refused_at = [](std::string_view text, int named = 0) {
    ToolGrammar g(chat::ChatFamily::V4, weather_tools(), true);
    ToolState s = g.start(named);
    return feed_tools(g, s, text);
  };
  EXPECT_EQ(refused_at("\n</｜DSML｜invoke>"), 0);  // "city" is required
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"days\" string=\"true\">"), 41);  // an integer
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"cityx"), 31);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"city\" string=\"false\">"), 41);  // only a string
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"days\" string=\"false\">3.5"), 49);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"city\" string=\"true\">a<｜"), 49);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"city\" string=\"true\">a</｜DSML｜x"), 60);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"city\" string=\"true\">a\x01"), 48);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"city\" string=\"true\">a</｜DSML｜parameter>\n"
                       "<｜DSML｜parameter name=\"city\""),
            98);  // a key twice
  EXPECT_EQ(refused_at("<｜DSML｜invoke name=\"nope\"", -1), 26);  // the "p": "noop" is a tool, "nope" is not
  // A text value may hold '<', "</" and other markup-free text.
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"city\" string=\"true\">a<b</c>\n"
                       "é</｜DSML｜parameter>\n</｜DSML｜invoke>"),
            -1);
}

TEST(ToolGrammar, RequiredParallelCallsAndFreeKeys) {
  ToolGrammar g(chat::ChatFamily::V4, weather_tools(), true);
  const std::string text =
      "<｜DSML｜invoke name=\"noop\">\n\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"free\">\n"
      "<｜DSML｜parameter name=\"x\" string=\"false\">[1, {\"a\": null}]</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"y\" string=\"true\">z</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  ToolState s = g.start(-1);
  ASSERT_EQ(feed_tools(g, s, text), -1);
  EXPECT_TRUE(g.complete(s));
  const chat::ParsedOutput out = chat::parse_output(chat::ChatFamily::V4, g.forced_prefix(-1) + text, false);
  ASSERT_EQ(out.tool_calls.size(), 2u) << out.errors.size();
  EXPECT_EQ(out.tool_calls[0].name, "noop");
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments), Json::object());
  EXPECT_EQ(Json::parse(out.tool_calls[1].arguments), Json::parse(R"({"x": [1, {"a": null}], "y": "z"})"));
  // Without parallel calls the block closes after the first invoke.
  ToolGrammar one(chat::ChatFamily::V4, weather_tools(), false);
  ToolState t = one.start(-1);
  EXPECT_EQ(feed_tools(one, t, text), 53);  // "\n<" then '｜' where "</" must close the block
}

// tool_choice "required": once one call is complete the block may close, and then the turn
// ends (only EOS is left); a JSON argument takes no whitespace around it.
TEST(ToolGrammar, RequiredMayEndAfterOneCall) {
  ToolGrammar g(chat::ChatFamily::V4, weather_tools(), true);
  ToolState s = g.start(-1);
  ASSERT_EQ(feed_tools(g, s, "<｜DSML｜invoke name=\"noop\">\n\n</｜DSML｜invoke>"), -1);
  EXPECT_FALSE(g.complete(s));
  ToolState closed = s;
  ASSERT_EQ(feed_tools(g, closed, "\n</｜DSML｜tool_calls>"), -1);
  EXPECT_TRUE(g.complete(closed));
  EXPECT_EQ(feed_tools(g, closed, "\n"), 0);
  ToolState more = s;
  EXPECT_EQ(feed_tools(g, more, "\n<｜DSML｜invoke name=\"noop\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"), -1);
  EXPECT_TRUE(g.complete(more));
  ToolState arg = g.start(0);
  EXPECT_EQ(feed_tools(g, arg, "<｜DSML｜parameter name=\"days\" string=\"false\"> 3"), 48);
}

TEST(ToolGrammar, V41Spelling) {
  ToolGrammar g(chat::ChatFamily::V41, weather_tools(), false);
  EXPECT_EQ(g.forced_prefix(1), "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"noop\">\n");
  ToolState s = g.start(1);
  ASSERT_EQ(feed_tools(g, s, "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"), -1);
  EXPECT_TRUE(g.complete(s));
  const chat::ParsedOutput out =
      chat::parse_output(chat::ChatFamily::V41, g.forced_prefix(1) + "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>", false);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "noop");
}

TEST(ToolGrammar, ClosedZeroArgumentToolsTakeNoParameters) {
  const std::vector<ToolSpec> tools = {
      {"empty_props", Json::parse(R"({"type": "object", "properties": {}})")},
      {"closed", Json::parse(R"({"type": "object", "additionalProperties": false})")},
      {"open", Json::parse(R"({"type": "object"})")}};
  for (int named : {0, 1}) {
    ToolGrammar g(chat::ChatFamily::V4, tools, false);
    ToolState s = g.start(named);
    EXPECT_EQ(feed_tools(g, s, "<"), 0) << named;  // no parameter opener, only "\n</...invoke>"
    ToolState t = g.start(named);
    ASSERT_EQ(feed_tools(g, t, "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"), -1);
    EXPECT_TRUE(g.complete(t));
    const chat::ParsedOutput out = chat::parse_output(
        chat::ChatFamily::V4, g.forced_prefix(named) + "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", false);
    ASSERT_EQ(out.tool_calls.size(), 1u);
    EXPECT_EQ(Json::parse(out.tool_calls[0].arguments), Json::object());
  }
  ToolGrammar g(chat::ChatFamily::V4, tools, false);
  ToolState s = g.start(2);  // no "properties": free keys stay possible
  EXPECT_EQ(feed_tools(g, s, "<｜DSML｜parameter name=\"x\" string=\"true\">1</｜DSML｜parameter>"), -1);
}

TEST(ToolGrammar, ConstrainedStringsAreWrittenAsJson) {
  const std::vector<ToolSpec> tools = {{"f", Json::parse(R"({"type": "object", "properties": {
      "unit": {"enum": ["celsius", "fahrenheit"]}, "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
      "note": {"type": "string"}, "n": {"type": "integer", "minimum": 1, "maximum": 5}},
      "required": ["unit"], "additionalProperties": false})")}};
  auto refused_at = [&](std::string_view text) {
    ToolGrammar g(chat::ChatFamily::V4, tools, false);
    ToolState s = g.start(0);
    return feed_tools(g, s, text);
  };
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"unit\" string=\"t"), 41);  // an enum: JSON only
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"unit\" string=\"false\">\"kelvin"), 49);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"code\" string=\"false\">\"ABCD"), 52);
  EXPECT_EQ(refused_at("<｜DSML｜parameter name=\"n\" string=\"false\">6"), 45);
  const std::string text =
      "<｜DSML｜parameter name=\"unit\" string=\"false\">\"celsius\"</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"code\" string=\"false\">\"EUR\"</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"note\" string=\"true\">a \"b\"</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">5</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  ASSERT_EQ(refused_at(text), -1);
  ToolGrammar g(chat::ChatFamily::V4, tools, false);
  const chat::ParsedOutput out = chat::parse_output(chat::ChatFamily::V4, g.forced_prefix(0) + text, false);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments),
            Json::parse(R"({"unit": "celsius", "code": "EUR", "note": "a \"b\"", "n": 5})"));
  EXPECT_THROW(ToolGrammar(chat::ChatFamily::V4, {{"g", Json::parse(R"({"type": "object", "not": {}})")}}, false),
               SchemaError);
}

// ------------------------------------------------------------------ token constraint

namespace {

struct Walk {
  std::vector<int32_t> tokens;
  bool ended = false;  // EOS sampled
};

// Samples from the constraint's mask: EOS when allowed (half the time), else mostly a
// uniformly random allowed token, sometimes one carrying structure bytes or one of the
// token sequences in `closing`, followed while the mask allows them (so that walks end).
Walk random_walk(TokenConstraint& c, const tokenizer::Tokenizer& tok, std::mt19937& rng, int max_steps,
                 const std::vector<std::vector<int32_t>>& closing = {}) {
  const int64_t V = tok.vocab_size();
  std::vector<uint64_t> mask(size_t((V + 63) / 64));
  Walk w;
  std::vector<int32_t> queue;
  for (int step = 0; step < max_steps; ++step) {
    std::fill(mask.begin(), mask.end(), 0);
    EXPECT_TRUE(c.allowed(mask.data(), V));
    std::vector<int32_t> ok, structural;
    for (int32_t t = 0; t < V; ++t)
      if ((mask[size_t(t) / 64] >> (t % 64)) & 1) {
        ok.push_back(t);
        const std::string& b = tok.token_bytes(t);
        if (b.find_first_of("<\"}]>,/\xEF") != std::string::npos) structural.push_back(t);
      }
    if (ok.empty()) {
      ADD_FAILURE() << "the constraint allows nothing after " << w.tokens.size() << " tokens: " << tok.decode(w.tokens) << " | ids " << ::testing::PrintToString(w.tokens);
      return w;
    }
    int32_t t;
    if (queue.empty() && !closing.empty() && rng() % 20 == 0) queue = closing[rng() % closing.size()];
    if (!queue.empty() && !((mask[size_t(queue[0]) / 64] >> (queue[0] % 64)) & 1)) queue.clear();
    if (mask[0] & 2 && rng() % 2) t = 1;
    else if (!queue.empty()) {
      t = queue[0];
      queue.erase(queue.begin());
    } else if (!structural.empty() && rng() % 3 == 0) t = structural[rng() % structural.size()];
    else t = ok[rng() % ok.size()];
    c.accept(t);
    if (t == 1) {
      w.ended = true;
      return w;
    }
    w.tokens.push_back(t);
  }
  return w;
}

const tokenizer::Tokenizer& tiny_tokenizer() {
  static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(model_dir());
  return tok;
}

ConstraintStart tiny_start(bool thinking = false) {
  ConstraintStart s;
  static TokenIndexCache cache;
  s.index = cache.get(tiny_tokenizer());
  s.eos_token_id = 1;
  s.after_reasoning = thinking;
  return s;
}

}  // namespace

TEST(TokenConstraint, RandomWalksGiveValidJson) {
  const auto& tok = tiny_tokenizer();
  std::mt19937 rng(7);
  const Json schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["n"], "additionalProperties": false})");
  int ended = 0;
  for (int iter = 0; iter < 40; ++iter) {
    JsonGrammar g(JsonSchema{}, true);
    const int32_t root = iter % 2 ? g.add_schema(schema) : g.add_schema(Json{{"type", "object"}});
    auto c = make_json_constraint(tiny_start(), std::move(g), root);
    const Walk w = random_walk(*c, tok, rng, 400);
    const std::string text = tok.decode(w.tokens);
    if (w.ended) {
      ++ended;
      ASSERT_TRUE(json_valid(text)) << text;
      const Json j = Json::parse(text);
      ASSERT_TRUE(j.is_object()) << text;
      if (iter % 2) EXPECT_TRUE(j.contains("n") && j["n"].is_number_integer()) << text;
    } else {
      ASSERT_TRUE(json_valid_prefix(text)) << text;
    }
  }
  EXPECT_GT(ended, 20);
}

TEST(TokenConstraint, RandomWalksGiveParsedToolCalls) {
  const auto& tok = tiny_tokenizer();
  std::mt19937 rng(11);
  int ended = 0;
  for (int iter = 0; iter < 30; ++iter) {
    const int named = iter % 3 == 0 ? -1 : iter % 3 == 1 ? 0 : 2;
    ToolGrammar g(chat::ChatFamily::V4, weather_tools(), named < 0);
    ConstraintStart st = tiny_start();
    const std::string prefix = g.forced_prefix(named);
    st.forced = tok.encode(prefix, true);
    auto c = make_tool_constraint(std::move(st), std::move(g), named);
    const Walk w = random_walk(*c, tok, rng, 3000,
                               {tok.encode("</｜DSML｜parameter>", true), tok.encode("\n</｜DSML｜invoke>", true),
                                tok.encode("\n</｜DSML｜tool_calls>", true)});
    const std::string text = tok.decode(w.tokens);
    ASSERT_EQ(text.substr(0, prefix.size()), prefix);
    if (!w.ended) continue;
    ++ended;
    const chat::ParsedOutput out = chat::parse_output(chat::ChatFamily::V4, text, false);
    ASSERT_TRUE(out.errors.empty()) << out.errors[0] << "\n" << text;
    ASSERT_GE(out.tool_calls.size(), 1u) << text;
    EXPECT_EQ(out.content, "");
    if (named >= 0) EXPECT_EQ(out.tool_calls[0].name, weather_tools()[size_t(named)].name);
    for (const auto& call : out.tool_calls) {
      const Json args = Json::parse(call.arguments);
      ASSERT_TRUE(args.is_object()) << call.arguments;
      if (call.name == "get_weather") {
        EXPECT_TRUE(args.contains("city") && args["city"].is_string()) << call.arguments;
        if (args.contains("days")) EXPECT_TRUE(args["days"].is_number_integer()) << call.arguments;
      }
    }
  }
  EXPECT_GT(ended, 15);
}

namespace {

const tokenizer::Tokenizer& v4_tokenizer() {
  static const tokenizer::Tokenizer tok =
      tokenizer::Tokenizer::from_file(std::string(DI_TEST_DATA_DIR) + "/tokenizer/v4_tokenizer.json");
  return tok;
}

std::vector<int32_t> allowed_ids(const std::vector<uint64_t>& mask, int64_t V) {
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < V; ++t)
    if ((mask[size_t(t) / 64] >> (t % 64)) & 1) ids.push_back(t);
  return ids;
}

// Steps a fast constraint and a reference one (fast_masks = false) with the same random
// tokens; at every step their masks must be equal. Returns the steps compared.
int compare_masks(TokenConstraint& fast, TokenConstraint& slow, const tokenizer::Tokenizer& tok, std::mt19937& rng,
                  int steps, int32_t eos) {
  const int64_t V = tok.vocab_size();
  std::vector<uint64_t> a(size_t((V + 63) / 64)), b(a.size());
  std::string text;
  int compared = 0;
  for (int step = 0; step < steps; ++step) {
    std::fill(a.begin(), a.end(), 0);
    std::fill(b.begin(), b.end(), 0);
    fast.allowed(a.data(), V);
    slow.allowed(b.data(), V);
    ++compared;
    if (a != b) {
      const std::vector<int32_t> x = allowed_ids(a, V), y = allowed_ids(b, V);
      std::vector<int32_t> diff;
      std::set_symmetric_difference(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(diff));
      ADD_FAILURE() << "masks differ after '" << text << "': " << diff.size() << " tokens, first "
                    << tok.token_bytes(diff[0]) << " (fast allows " << std::count(x.begin(), x.end(), diff[0]) << ")";
      return compared;
    }
    const std::vector<int32_t> ok = allowed_ids(a, V);
    if (ok.empty()) {
      ADD_FAILURE() << "nothing allowed after '" << text << "'";
      return compared;
    }
    std::vector<int32_t> structural;
    for (int32_t t : ok)
      if (tok.token_bytes(t).find_first_of("\"\\<}],:") != std::string::npos) structural.push_back(t);
    int32_t t = ok[rng() % ok.size()];
    if (!structural.empty() && rng() % 3 == 0) t = structural[rng() % structural.size()];
    if (std::count(ok.begin(), ok.end(), eos) && rng() % 8 == 0) t = eos;
    fast.accept(t);
    slow.accept(t);
    if (t == eos) break;
    text += tok.token_bytes(t);
  }
  return compared;
}

const char* kMixedSchema = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{0,3}$"},
    "level": {"type": "integer", "minimum": -20, "maximum": 300}, "ratio": {"type": "number", "minimum": 0, "maximum": 1},
    "color": {"enum": ["red", "green", "blue", null]}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
    "maxItems": 3}, "when": {"type": "string", "format": "date"}, "extra": {"$ref": "#/$defs/E"}},
    "required": ["name", "level"], "additionalProperties": false,
    "$defs": {"E": {"anyOf": [{"type": "object", "properties": {"note": {"type": "string"}}}, {"type": "null"}]}}})";

}  // namespace

TEST(TokenConstraint, FastMasksEqualTheReferenceWalk) {
  int compared = 0;
  for (const tokenizer::Tokenizer* tok : {&tiny_tokenizer(), &v4_tokenizer()}) {
    const bool big = tok->vocab_size() > 100000;
    TokenIndexCache cache;
    std::mt19937 rng(big ? 5 : 6);
    for (int iter = 0; iter < (big ? 6 : 30); ++iter) {
      ConstraintStart st;
      st.index = cache.get(*tok);
      st.eos_token_id = 1;
      ConstraintStart ref = st;
      ref.fast_masks = false;
      std::shared_ptr<TokenConstraint> fast, slow;
      if (iter % 3 == 2) {
        ToolGrammar g(chat::ChatFamily::V4, weather_tools(), true);
        st.forced = ref.forced = tok->encode(g.forced_prefix(-1), true);
        fast = make_tool_constraint(st, ToolGrammar(chat::ChatFamily::V4, weather_tools(), true), -1);
        slow = make_tool_constraint(ref, ToolGrammar(chat::ChatFamily::V4, weather_tools(), true), -1);
      } else {
        const Json schema = iter % 3 ? Json::parse(kMixedSchema) : Json{{"type", "object"}};
        JsonGrammar g1(JsonSchema{}, true), g2(JsonSchema{}, true);
        const int32_t r1 = g1.add_schema(schema), r2 = g2.add_schema(schema);
        fast = make_json_constraint(st, std::move(g1), r1);
        slow = make_json_constraint(ref, std::move(g2), r2);
      }
      compared += compare_masks(*fast, *slow, *tok, rng, big ? 40 : 120, 1);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(compared, 1000);
}

// tool_choice "auto" (structured_output.cpp): the grammar starts after the "<｜DSML｜" the model
// wrote and holds the block to the declared tools, strict ones (enforced schemas) and free ones
// (ToolSpec::enforce false: any keys and values, a schema the grammar could not enforce
// included). Random walks give calls that parse, of declared tools only, and the fast masks
// equal the reference walk's.
TEST(TokenConstraint, AutoToolBlocksParseAndMasksMatch) {
  std::vector<ToolSpec> tools = weather_tools();
  tools.push_back({"loose", Json::parse(R"({"type": "object", "properties": {"q": {"type": "string", "pattern": "^a+$"},
                                            "n": {"type": "integer", "multipleOf": 3}}, "required": ["q"]})"), false});
  tools.push_back({"anything", Json(), false});
  auto make = [&](const tokenizer::Tokenizer& tok, TokenIndexCache& cache, bool fast) {
    ConstraintStart st;
    st.index = cache.get(tok);
    st.eos_token_id = 1;
    st.fast_masks = fast;
    st.wait_for = ToolGrammar::trigger();
    auto c = make_tool_constraint(std::move(st), ToolGrammar(chat::ChatFamily::V4, tools, true, 0xFFFF),
                                  ToolGrammar::kAfterDsml);
    std::vector<uint64_t> mask(size_t((tok.vocab_size() + 63) / 64));
    for (int32_t t : tok.encode("Sure.\n\n<｜DSML｜", true)) {
      EXPECT_FALSE(c->allowed(mask.data(), tok.vocab_size()));  // free until the markup opens
      c->accept(t);
    }
    return c;
  };
  const auto& tok = tiny_tokenizer();
  TokenIndexCache tiny_cache;
  std::mt19937 rng(13);
  const std::set<std::string> names = {"get_weather", "noop", "free", "loose", "anything"};
  int ended = 0;
  for (int iter = 0; iter < 30; ++iter) {
    auto c = make(tok, tiny_cache, true);
    const Walk w = random_walk(*c, tok, rng, 3000,
                               {tok.encode("</｜DSML｜parameter>", true), tok.encode("\n</｜DSML｜invoke>", true),
                                tok.encode("\n</｜DSML｜tool_calls>", true)});
    if (HasFailure()) return;
    if (!w.ended) continue;
    ++ended;
    const std::string text = "Sure.\n\n<｜DSML｜" + tok.decode(w.tokens);
    const chat::ParsedOutput out = chat::parse_output(chat::ChatFamily::V4, text, false);
    ASSERT_TRUE(out.errors.empty()) << out.errors[0] << "\n" << text;
    ASSERT_GE(out.tool_calls.size(), 1u) << text;
    EXPECT_EQ(out.content, "Sure.");
    for (const auto& call : out.tool_calls) {
      EXPECT_TRUE(names.count(call.name)) << call.name;
      const Json args = Json::parse(call.arguments);
      ASSERT_TRUE(args.is_object()) << call.arguments;
      if (call.name == "get_weather") EXPECT_TRUE(args.contains("city") && args["city"].is_string()) << call.arguments;
    }
  }
  EXPECT_GT(ended, 10);
  int compared = 0;
  for (const tokenizer::Tokenizer* t : {&tiny_tokenizer(), &v4_tokenizer()}) {
    const bool big = t->vocab_size() > 100000;
    TokenIndexCache cache;
    for (int iter = 0; iter < (big ? 3 : 12); ++iter) {
      auto fast = make(*t, cache, true), slow = make(*t, cache, false);
      compared += compare_masks(*fast, *slow, *t, rng, big ? 40 : 150, 1);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(compared, 500);
}

TEST(TokenConstraint, TokenWalksHoldToTheSchema) {
  const auto& tok = tiny_tokenizer();
  std::mt19937 rng(21);
  const Json schemas[] = {
      Json::parse(kMixedSchema),
      Json::parse(R"({"type": "array", "items": {"enum": ["alpha", "beta", 7, true]}, "minItems": 1, "maxItems": 4})"),
      Json::parse(R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
          "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 99}}, "required": ["id", "n"]})"),
      Json::parse(R"({"$defs": {"T": {"type": "object", "properties": {"v": {"type": "integer"},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/T"}, "maxItems": 2}}, "required": ["v"],
          "additionalProperties": false}}, "$ref": "#/$defs/T"})")};
  int ended = 0;
  for (int iter = 0; iter < 48; ++iter) {
    const Json& schema = schemas[iter % 4];
    JsonGrammar g(JsonSchema{}, true);
    const int32_t root = g.add_schema(schema);
    auto c = make_json_constraint(tiny_start(), std::move(g), root);
    const Walk w = random_walk(*c, tok, rng, 600);
    if (::testing::Test::HasFailure()) return;
    if (!w.ended) continue;
    ++ended;
    const std::string text = tok.decode(w.tokens);
    ASSERT_TRUE(json_valid(text)) << text;
    ASSERT_EQ(schema_check::check(schema, Json::parse(text)), "") << text;
  }
  EXPECT_GT(ended, 20);
}

TEST(TokenConstraint, ReasoningIsFreeThenForcedTokensThenGrammar) {
  const auto& tok = tiny_tokenizer();
  ToolGrammar g(chat::ChatFamily::V4, weather_tools(), false);
  ConstraintStart st = tiny_start(true);
  st.forced = tok.encode(g.forced_prefix(1), true);
  const std::vector<int32_t> forced = st.forced;
  auto c = make_tool_constraint(std::move(st), std::move(g), 1);
  std::vector<uint64_t> mask(16);
  for (int32_t t : tok.encode("some reasoning </thi", true)) {
    EXPECT_FALSE(c->allowed(mask.data(), 1024));
    c->accept(t);
  }
  for (int32_t t : tok.encode("nk>", true)) c->accept(t);
  for (int32_t f : forced) {
    std::fill(mask.begin(), mask.end(), 0);
    ASSERT_TRUE(c->allowed(mask.data(), 1024));
    int n = 0;
    for (uint64_t w : mask) n += __builtin_popcountll(w);
    EXPECT_EQ(n, 1);
    EXPECT_TRUE((mask[size_t(f) / 64] >> (f % 64)) & 1);
    c->accept(f);
  }
  std::fill(mask.begin(), mask.end(), 0);
  ASSERT_TRUE(c->allowed(mask.data(), 1024));
  EXPECT_FALSE(mask[0] & 2);  // no EOS inside the invoke
}

// tool_choice "auto" with strict tools: the answer is free (reasoning too) until the output
// holds the tool-call block opener; from there on the calls follow the grammar, the bytes after
// the opener in the token that completes it included.
TEST(TokenConstraint, StrictAutoIsFreeUntilTheBlockOpens) {
  const auto& tok = tiny_tokenizer();
  for (bool thinking : {false, true}) {
    ToolGrammar g(chat::ChatFamily::V4, weather_tools(), true);
    ConstraintStart st = tiny_start(thinking);
    const std::string opener = g.forced_prefix(-1);
    st.wait_for = opener.substr(2);
    auto c = make_tool_constraint(std::move(st), std::move(g), -1);
    std::vector<uint64_t> mask(16);
    const std::string free_text = (thinking ? "why </think>" : std::string()) + "Some words first." + opener;
    for (int32_t t : tok.encode(free_text, true)) {
      EXPECT_FALSE(c->allowed(mask.data(), 1024)) << "constrained before the block opened";
      c->accept(t);
    }
    // Now inside the block: "<｜DSML｜invoke name=\"get_weather\">" goes on, no EOS, no free text.
    std::fill(mask.begin(), mask.end(), 0);
    ASSERT_TRUE(c->allowed(mask.data(), 1024));
    EXPECT_FALSE(mask[0] & 2);
    for (int32_t t : tok.encode("Hello", true)) EXPECT_FALSE((mask[size_t(t) / 64] >> (t % 64)) & 1);
    const std::vector<int32_t> call = tok.encode("<｜DSML｜invoke name=\"get_weather\">\n", true);
    for (int32_t t : call) {
      std::fill(mask.begin(), mask.end(), 0);
      ASSERT_TRUE(c->allowed(mask.data(), 1024));
      ASSERT_TRUE((mask[size_t(t) / 64] >> (t % 64)) & 1) << tok.decode({t});
      c->accept(t);
    }
    // A name that is not a tool is refused.
    ToolGrammar g2(chat::ChatFamily::V4, weather_tools(), true);
    ConstraintStart st2 = tiny_start();
    st2.wait_for = opener.substr(2);
    auto c2 = make_tool_constraint(std::move(st2), std::move(g2), -1);
    for (int32_t t : tok.encode(opener + "<｜DSML｜invoke name=\"", true)) c2->accept(t);
    std::fill(mask.begin(), mask.end(), 0);
    ASSERT_TRUE(c2->allowed(mask.data(), 1024));
    for (int32_t t : tok.encode("x", true)) EXPECT_FALSE((mask[size_t(t) / 64] >> (t % 64)) & 1);
  }
}

// The index skips special tokens and keeps the byte order it relies on.
TEST(TokenConstraint, IndexIsSortedWithPrefixLengths) {
  const auto& tok = tiny_tokenizer();
  auto ix = TokenIndex::build(tok);
  ASSERT_GT(ix->all.ids.size(), 1000u);
  EXPECT_EQ(ix->entry_of[1], -1);  // EOS
  for (size_t i = 1; i < ix->all.ids.size(); ++i) {
    const std::string_view a = ix->token(ix->all.ids[i - 1]), b = ix->token(ix->all.ids[i]);
    ASSERT_LE(a, b);
    size_t l = 0;
    while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
    ASSERT_EQ(ix->all.lcp[i], l);
  }
}

// ------------------------------------------------------------------ sampler

namespace {

class AllowSet final : public TokenConstraint {
 public:
  explicit AllowSet(std::vector<int32_t> ok) : ok_(std::move(ok)) {}
  bool allowed(uint64_t* mask, int64_t) override {
    for (int32_t t : ok_) mask[t / 64] |= uint64_t(1) << (t % 64);
    return true;
  }
  void accept(int32_t t) override { accepted.push_back(t); }
  std::vector<int32_t> accepted;

 private:
  std::vector<int32_t> ok_;
};

}  // namespace

TEST(SamplerConstraint, MaskComesFirstAndTheChoiceIsAccepted) {
  engine::Sampler s(200);
  std::vector<float> logits(200);
  for (int i = 0; i < 200; ++i) logits[size_t(i)] = float(i % 17);
  auto c = std::make_shared<AllowSet>(std::vector<int32_t>{3, 70, 130});
  SamplingParams p;
  p.constraint = c;
  p.temperature = 0.0f;
  engine::PenaltyState h;
  engine::Rng rng(1);
  EXPECT_EQ(s.sample(logits.data(), p, h, rng).token, 130);  // logits 3, 2 (70), 11 (130)
  p.temperature = 1.0f;
  p.logprobs = 5;
  for (int i = 0; i < 200; ++i) {
    const engine::SampleResult r = s.sample(logits.data(), p, h, rng);
    EXPECT_TRUE(r.token == 3 || r.token == 70 || r.token == 130);
    EXPECT_EQ(r.top[3].logprob, -std::numeric_limits<float>::infinity());
  }
  EXPECT_EQ(c->accepted.size(), 201u);
  // Allowed tokens whose logits are NaN: the lowest allowed id, never a forbidden one.
  std::vector<float> nan(200, 1.0f);
  for (int t : {3, 70, 130}) nan[size_t(t)] = std::nanf("");
  EXPECT_EQ(s.sample(nan.data(), p, h, rng).token, 3);
}

// ------------------------------------------------------------------ over HTTP

namespace {

class StructuredHttp : public TinyServerSuite<StructuredHttp> {};

// Tools whose calls the grammar keeps short: integer / boolean arguments only.
const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "set_level", "parameters": {"type": "object",
    "properties": {"level": {"type": "integer"}, "loud": {"type": "boolean"}}, "required": ["level"]}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}])");

json chat_body(json tool_choice, int seed) {
  return json{{"messages", {{{"role", "user"}, {"content", "Set the level."}}}},
              {"tools", kTools}, {"tool_choice", std::move(tool_choice)}, {"seed", seed},
              {"max_tokens", 400}};
}

// Three seeded chat answers under response_format each finish ("stop") with content that
// follows `schema`.
void expect_answers_follow(const Running& srv, const json& response_format, const json& schema) {
  for (int seed = 0; seed < 3; ++seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                 {"response_format", response_format}, {"seed", seed}, {"max_tokens", 200}};
    int st = 0;
    json r = post(srv, "/v1/chat/completions", body.dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    const std::string content = r["choices"][0]["message"]["content"];
    EXPECT_EQ(schema_check::check(Json::parse(schema.dump()), Json::parse(content)), "") << content;
  }
}

}  // namespace

TEST_F(StructuredHttp, NamedToolChoiceIsACallOfThatFunction) {
  const json named = {{"type", "function"}, {"function", {{"name", "set_level"}}}};
  for (int seed = 0; seed < 4; ++seed) {
    int st = 0;
    json r = post(srv(), "/v1/chat/completions", chat_body(named, seed).dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
    const json& fn = choice["message"]["tool_calls"][0]["function"];
    EXPECT_EQ(fn["name"], "set_level");
    ASSERT_TRUE(fn["arguments"].is_string());
    const json args = json::parse(fn["arguments"].get<std::string>());
    EXPECT_TRUE(args["level"].is_number_integer()) << args.dump();
    EXPECT_TRUE(choice["message"]["content"].is_null()) << r.dump();
  }
}

TEST_F(StructuredHttp, NamedToolChoiceStreamsArguments) {
  json body = chat_body({{"type", "function"}, {"function", {{"name", "set_level"}}}}, 3);
  int st = 0;
  const json whole = post(srv(), "/v1/chat/completions", body.dump(), &st);
  body["stream"] = true;
  Sse s = stream_post(srv().port, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string name, args, content;
  for (const json& c : s.chunks) {
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& t : d["tool_calls"]) {
        if (t.contains("id")) name = t["function"]["name"];
        args += t["function"]["arguments"].get<std::string>();
      }
  }
  EXPECT_EQ(content, "");
  EXPECT_EQ(name, "set_level");
  EXPECT_EQ(json::parse(args), json::parse(whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
                                               .get<std::string>()));  // same seed, same call
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

// Each chunk holds at most one tool_calls entry per call index (the call's header and its first
// arguments together). openai-python's stream accumulator takes a chunk's first tool_calls list
// as it is, so a second entry of index 0 there kept the opening '{' out of the arguments.
TEST_F(StructuredHttp, StreamedToolCallChunksHoldOneEntryPerCall) {
  for (int seed = 0; seed < 4; ++seed) {
    json body = chat_body(seed % 2 ? json("required") : json{{"type", "function"}, {"function", {{"name", "set_level"}}}},
                          seed);
    body["stream"] = true;
    body["parallel_tool_calls"] = seed == 1;  // up to 8 calls of this noise model: 3000 tokens
    body["max_tokens"] = 3000;
    Sse s = stream_post(srv().port, "/v1/chat/completions", body);
    ASSERT_EQ(s.status, 200) << s.body;
    json first_list;  // what openai-python keeps from the first chunk with tool_calls
    std::map<int, std::string> args;
    for (const json& c : s.chunks) {
      const json& d = c["choices"][0]["delta"];
      if (!d.contains("tool_calls")) continue;
      std::set<int> indices;
      for (const json& t : d["tool_calls"]) {
        EXPECT_TRUE(indices.insert(t["index"].get<int>()).second) << "two entries of one call in " << c.dump();
        args[t["index"].get<int>()] += t["function"]["arguments"].get<std::string>();
      }
      if (first_list.is_null()) first_list = d["tool_calls"];
    }
    ASSERT_FALSE(args.empty()) << s.body;
    for (const auto& [i, a] : args) EXPECT_TRUE(json::parse(a).is_object()) << a;
    EXPECT_EQ(first_list[0]["function"]["arguments"].get<std::string>().substr(0, 1), "{") << first_list.dump();
  }
}

TEST_F(StructuredHttp, RequiredToolChoiceCallsSomeTool) {
  for (int seed = 0; seed < 4; ++seed) {
    json body = chat_body("required", seed);
    body["max_tokens"] = 3000;  // up to 8 calls of this noise model
    if (seed % 2) body["parallel_tool_calls"] = false;
    int st = 0;
    json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
    const json& calls = r["choices"][0]["message"]["tool_calls"];
    ASSERT_GE(calls.size(), 1u) << r.dump();
    if (seed % 2) EXPECT_EQ(calls.size(), 1u);
    for (const json& c : calls) {
      EXPECT_TRUE(c["function"]["name"] == "set_level" || c["function"]["name"] == "ping") << c.dump();
      EXPECT_TRUE(json::parse(c["function"]["arguments"].get<std::string>()).is_object());
    }
  }
}

TEST_F(StructuredHttp, ToolChoiceErrors) {
  int st = 0;
  json r = post(srv(), "/v1/chat/completions",
                chat_body({{"type", "function"}, {"function", {{"name", "nope"}}}}, 0).dump(), &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "tool_choice");
  json no_tools = chat_body("required", 0);
  no_tools.erase("tools");
  post(srv(), "/v1/chat/completions", no_tools.dump(), &st);
  EXPECT_EQ(st, 400);
  post(srv(), "/v1/chat/completions", chat_body("sometimes", 0).dump(), &st);
  EXPECT_EQ(st, 400);
  json anthropic = {{"max_tokens", 100}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
                    {"tools", {{{"name", "ping"}, {"input_schema", {{"type", "object"}}}}}},
                    {"tool_choice", {{"type", "tool"}, {"name", "pong"}}}};
  r = post(srv(), "/v1/messages", anthropic.dump(), &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["type"], "error");
}

TEST_F(StructuredHttp, AnthropicToolChoice) {
  // Greedy: /v1/messages has no seed, and a sampled random-weight model may still be inside
  // a string argument when max_tokens runs out.
  json req = {{"max_tokens", 400},
              {"temperature", 0},
              {"messages", {{{"role", "user"}, {"content", "Set the level."}}}},
              {"tools", {{{"name", "set_level"}, {"input_schema", kTools[0]["function"]["parameters"]}},
                         {{"name", "ping"}, {"input_schema", {{"type", "object"}, {"properties", json::object()}}}}}},
              {"tool_choice", {{"type", "tool"}, {"name", "set_level"}}}};
  int st = 0;
  json r = post(srv(), "/v1/messages", req.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["stop_reason"], "tool_use") << r.dump();
  ASSERT_EQ(r["content"].size(), 1u) << r.dump();
  EXPECT_EQ(r["content"][0]["type"], "tool_use");
  EXPECT_EQ(r["content"][0]["name"], "set_level");
  EXPECT_TRUE(r["content"][0]["input"]["level"].is_number_integer());

  req["tool_choice"] = {{"type", "any"}, {"disable_parallel_tool_use", true}};
  req["stream"] = true;
  Sse s = stream_post(srv().port, "/v1/messages", req);
  ASSERT_EQ(s.status, 200);
  int tool_blocks = 0;
  for (const json& e : s.chunks)
    if (e["type"] == "content_block_start") {
      EXPECT_EQ(e["content_block"]["type"], "tool_use");
      ++tool_blocks;
    }
  EXPECT_EQ(tool_blocks, 1);
  EXPECT_EQ(s.chunks[s.chunks.size() - 2]["delta"]["stop_reason"], "tool_use");
}

TEST_F(StructuredHttp, JsonObjectResponseFormat) {
  int complete = 0;
  for (int seed = 0; seed < 6; ++seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                 {"response_format", {{"type", "json_object"}}}, {"seed", seed}, {"max_tokens", 300}};
    int st = 0;
    json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    const std::string content = r["choices"][0]["message"]["content"].get<std::string>();
    if (r["choices"][0]["finish_reason"] == "stop") {
      ++complete;
      ASSERT_TRUE(json::accept(content)) << content;
      EXPECT_TRUE(json::parse(content).is_object()) << content;
    } else {
      EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
      EXPECT_TRUE(json_valid_prefix(content)) << content;
    }
  }
  EXPECT_GT(complete, 0);
}

TEST_F(StructuredHttp, JsonSchemaResponseFormat) {
  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"},
      "ok": {"type": "boolean"}, "xs": {"type": "array", "items": {"type": "integer"}}},
      "required": ["n", "ok"], "additionalProperties": false})");
  for (int seed = 0; seed < 4; ++seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                 {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schema}}}}},
                 {"seed", seed}, {"max_tokens", 1000}, {"stream", seed % 2 == 1}};
    std::string content, finish;
    if (seed % 2) {
      Sse s = stream_post(srv().port, "/v1/chat/completions", body);
      ASSERT_EQ(s.status, 200);
      for (const json& c : s.chunks) {
        const json& d = c["choices"][0]["delta"];
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
      }
    } else {
      int st = 0;
      json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
      ASSERT_EQ(st, 200) << r.dump();
      content = r["choices"][0]["message"]["content"];
      finish = r["choices"][0]["finish_reason"];
    }
    ASSERT_EQ(finish, "stop") << content;
    const json j = json::parse(content);
    EXPECT_TRUE(j["n"].is_number_integer() && j["ok"].is_boolean()) << content;
    for (auto it = j.begin(); it != j.end(); ++it) EXPECT_TRUE(it.key() == "n" || it.key() == "ok" || it.key() == "xs");
  }
}

// instructor's JSON_SCHEMA mode (and Together / Fireworks clients) put the schema beside
// "type": "json_object"; the object must follow it, not be any object.
TEST_F(StructuredHttp, JsonObjectWithASchemaFollowsTheSchema) {
  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"},
      "ok": {"type": "boolean"}}, "required": ["n", "ok"], "additionalProperties": false})");
  expect_answers_follow(srv(), {{"type", "json_object"}, {"schema", schema}}, schema);
  json bad = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 5},
              {"response_format", {{"type", "json_object"}, {"schema", {{"type", "string"}, {"not", json::object()}}}}}};
  int st = 0;
  json r = post(srv(), "/v1/chat/completions", bad.dump(), &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "response_format");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("response_format.schema"), std::string::npos) << r.dump();
}

// Schemas built from classes (pydantic through instructor or LangChain) list their properties
// and leave additionalProperties out: only the listed keys are written, nested ones ($defs)
// included, in response_format and in tool arguments; a required key that is not listed
// keeps its object open.
TEST_F(StructuredHttp, ListedPropertiesAreTheOnlyKeys) {
  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"},
      "inner": {"$ref": "#/$defs/Inner"}}, "required": ["n", "inner"],
      "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "integer"}, "ys": {"type": "array",
        "items": {"type": "object", "properties": {"b": {"type": "boolean"}}}}}, "required": ["x"]}}})");
  auto only_listed_keys = [](const json& v) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (it.key() != "n" && it.key() != "inner") return false;
    for (auto it = v["inner"].begin(); it != v["inner"].end(); ++it)
      if (it.key() != "x" && it.key() != "ys") return false;
    if (v["inner"].contains("ys"))
      for (const json& y : v["inner"]["ys"])
        for (auto it = y.begin(); it != y.end(); ++it)
          if (it.key() != "b") return false;
    return v["n"].is_number_integer() && v["inner"]["x"].is_number_integer();
  };
  for (int seed = 0; seed < 4; ++seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}}, {"seed", seed}, {"max_tokens", 400}};
    if (seed % 2) body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schema}}}};
    else body["response_format"] = {{"type", "json_object"}, {"schema", schema}};
    int st = 0;
    json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    const std::string content = r["choices"][0]["message"]["content"];
    EXPECT_TRUE(only_listed_keys(json::parse(content))) << content;
  }
  json tool = {{"type", "function"}, {"function", {{"name", "put"}, {"parameters", schema}}}};
  for (int seed = 0; seed < 3; ++seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Put it."}}}}, {"tools", {tool}},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "put"}}}}}, {"seed", seed},
                 {"max_tokens", 400}};
    int st = 0;
    json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    ASSERT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
    const json& calls = r["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << r.dump();
    EXPECT_TRUE(only_listed_keys(json::parse(calls[0]["function"]["arguments"].get<std::string>()))) << r.dump();
  }
  // "required" naming a key that "properties" does not list: that key is an extra key, so the
  // object stays open (not a 400 for additionalProperties false).
  json open = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"b"}}};
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 5},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", open}}}}}};
  int st = 0;
  json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
  EXPECT_EQ(st, 200) << r.dump();
}

// Strict tools under tool_choice "auto" are held to their schemas, so a keyword the grammar
// cannot enforce is a 400 there, with other tools or not (non-strict tools under "auto" take
// free arguments and are not compiled); the answer itself stays free.
TEST_F(StructuredHttp, StrictToolsUnderAutoAreCompiled) {
  json body = chat_body("auto", 0);
  body["max_tokens"] = 20;
  for (json& t : body["tools"]) t["function"]["strict"] = true;
  int st = 0;
  json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  body["tools"][0]["function"]["parameters"]["properties"]["level"]["multipleOf"] = 5;
  r = post(srv(), "/v1/chat/completions", body.dump(), &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "tools");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("multipleOf"), std::string::npos) << r.dump();
  body["tools"][1]["function"]["strict"] = false;  // the strict one is still enforced
  post(srv(), "/v1/chat/completions", body.dump(), &st);
  EXPECT_EQ(st, 400);
  body["tools"][0]["function"]["strict"] = false;  // a non-strict tool's schema is not compiled
  post(srv(), "/v1/chat/completions", body.dump(), &st);
  EXPECT_EQ(st, 200);
}

TEST_F(StructuredHttp, UnsupportedSchemaKeywordsAre400) {
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 5},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "r"},
                 {"schema", json::parse(R"({"type": "object", "properties": {"a": {"type": "string", "not": {}}}})")}}}}}};
  int st = 0;
  json r = post(srv(), "/v1/chat/completions", body.dump(), &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "response_format");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("'not'"), std::string::npos) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("/properties/a"), std::string::npos) << r.dump();
  json tools = chat_body("required", 0);
  tools["tools"][0]["function"]["parameters"]["properties"]["level"]["multipleOf"] = 5;
  r = post(srv(), "/v1/chat/completions", tools.dump(), &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "tools");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("multipleOf"), std::string::npos) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("set_level"), std::string::npos) << r.dump();
  // Under tool_choice "auto" nothing is enforced, so nothing is refused.
  tools["tool_choice"] = "auto";
  tools["max_tokens"] = 5;
  post(srv(), "/v1/chat/completions", tools.dump(), &st);
  EXPECT_EQ(st, 200);
}

TEST_F(StructuredHttp, ZeroArgumentToolGetsEmptyArguments) {
  const json named = {{"type", "function"}, {"function", {{"name", "ping"}}}};
  for (int seed = 0; seed < 3; ++seed) {
    int st = 0;
    json r = post(srv(), "/v1/chat/completions", chat_body(named, seed).dump(), &st);
    ASSERT_EQ(st, 200) << r.dump();
    const json& calls = r["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << r.dump();
    EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json::object()) << r.dump();
  }
}

TEST_F(StructuredHttp, JsonSchemaValuesHoldOverHttp) {
  const json schema = json::parse(R"({"type": "object", "properties": {"unit": {"enum": ["c", "f"]},
      "n": {"type": "integer", "minimum": 3, "maximum": 7}, "code": {"type": "string", "pattern": "^[a-z]{2}$"}},
      "required": ["unit", "n", "code"], "additionalProperties": false})");
  expect_answers_follow(srv(), {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schema}}}}, schema);
}

// The mask cost on the real V4 vocabulary (129280 ids), when setup.sh has put its
// tokenizer in models/default: printed, not asserted (machines differ).
// The mask walk on the real V4 vocabulary (129,280 ids, tests/data/tokenizer): its cost is
// counted in grammar bytes fed, not timed. The fast walk (fast classes, skip tables) must give
// the reference walk's mask bit for bit, feed at most one byte per edge of the trie it walks
// (each edge is fed once: a refused prefix skips its subtree), and inside a JSON string, where
// every plain string token is allowed by copying its class's bits, feed a small part of what
// the reference walk feeds.
TEST(TokenConstraint, MaskCostOnTheRealVocabulary) {
  const auto tok = tokenizer::Tokenizer::from_file(std::string(DI_TEST_DATA_DIR) + "/tokenizer/v4_tokenizer.json");
  ASSERT_EQ(tok.vocab_size(), 129280);
  TokenIndexCache cache;
  const std::shared_ptr<const TokenIndex> index = cache.get(tok);
  auto edges = [](const TokenTrie& t) {
    uint64_t n = 0;
    for (size_t i = 0; i < t.ids.size(); ++i) n += t.length[i] - t.lcp[i];
    return n;
  };
  const uint64_t all_edges = edges(index->all), string_edges = edges(index->rest[0]);
  ASSERT_GT(index->all.ids.size(), 128000u);
  ASSERT_LT(string_edges, all_edges / 4);  // most tokens are plain string characters
  const int64_t V = tok.vocab_size();
  auto popcount = [](const std::vector<uint64_t>& m) {
    int64_t n = 0;
    for (uint64_t w : m) n += __builtin_popcountll(w);
    return n;
  };
  struct Case {
    const char* prefix;
    bool in_string;
  };
  for (const Case& k : {Case{"{", false}, Case{"{\"a\": \"hello wor", true}, Case{"{\"a\": 12", false}}) {
    SCOPED_TRACE(k.prefix);
    std::vector<uint64_t> masks[2];
    uint64_t fed[2] = {0, 0};
    for (int fast = 0; fast < 2; ++fast) {
      ConstraintStart st;
      st.index = index;
      st.fast_masks = fast == 1;
      st.bytes_fed = &fed[fast];
      JsonGrammar g(JsonSchema{}, true);
      const int32_t root = g.add_schema(Json{{"type", "object"}});
      auto c = make_json_constraint(st, std::move(g), root);
      for (int32_t t : tok.encode(k.prefix, true)) c->accept(t);
      masks[fast].assign(size_t((V + 63) / 64), 0);
      ASSERT_TRUE(c->allowed(masks[fast].data(), V));
    }
    EXPECT_EQ(masks[0], masks[1]);
    const int64_t n = popcount(masks[1]);
    EXPECT_GT(n, 0);
    EXPECT_GT(fed[1], 0u);
    EXPECT_LE(fed[0], all_edges);
    EXPECT_LE(fed[1], k.in_string ? string_edges : all_edges);
    if (k.in_string) {
      EXPECT_GE(n, popcount(index->class_bits[0]));  // every plain string token, and what the walk adds
      EXPECT_LT(fed[1] * 8, fed[0]);
    }
    std::printf("json_object after '%s': %lld allowed; bytes fed fast %llu, reference %llu (trie edges %llu, string-class rest %llu)\n",
                k.prefix, (long long)n, (unsigned long long)fed[1], (unsigned long long)fed[0],
                (unsigned long long)all_edges, (unsigned long long)string_edges);
  }
}
