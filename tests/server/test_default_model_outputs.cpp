// Constrained outputs end to end on the embedded default model (models-src/default, the small
// V4 trained on the King James Bible, which models/default copies), sampled at temperature 1
// as clients sample it (issue 27): schema-constrained answers finish before max_tokens as
// valid, compact JSON, and tool_choice "required" / Anthropic "any" turns end after their calls.
//
// The first two keep every value bounded by the schema itself (lengths, enums, integer ranges);
// the last two have free strings and free-text tool arguments, which only the model can end:
// it learnt to in a chat fine-tune (models-src/default README.txt; before it, having never seen
// a '"' or a '<' in the King James text, it ran on to max_tokens whatever the grammar did).
#include <gtest/gtest.h>

#include <memory>

#include "schema_check.h"
#include "server_harness.h"

namespace deepinfer::testing {
namespace {

class DefaultModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.model_dir = DI_DEFAULT_MODEL_DIR;
    eo.threads = 2;
    eo.num_kv_blocks = 4000;
    eo.max_model_len = 4096;
    backend_ = server::load_backend(eo, "default");
    server_ = new Running(server::ServerOptions{}, backend_);
  }
  static void TearDownTestSuite() {
    delete server_;
    backend_.reset();
  }
  static inline std::shared_ptr<const server::Backend> backend_;
  static inline Running* server_ = nullptr;
};

// Outside strings, whitespace is only a single space after ':' or ','.
bool compact(const std::string& text) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (c != ' ' || i == 0 || (text[i - 1] != ':' && text[i - 1] != ',')) return false;
    }
  }
  return true;
}

// A pydantic-style model whose every field the schema bounds.
const char* kPersonSchema = R"({"type": "object", "title": "Person",
  "properties": {"name": {"type": "string", "maxLength": 24},
                 "age": {"type": "integer"},
                 "tribe": {"enum": ["Judah", "Levi", "Benjamin"]},
                 "faithful": {"type": "boolean"}},
  "required": ["name", "age", "tribe", "faithful"], "additionalProperties": false})";

// Before the whitespace bound, all 30 ran to max_tokens, 81% of their text whitespace.
TEST_F(DefaultModel, SchemaSamplesAtTemperatureOneFinishAsCompactJson) {
  const chat::Json schema = chat::Json::parse(kPersonSchema);
  const json body = {
      {"messages", {{{"role", "user"}, {"content", "Extract the person: Moses, of the tribe of Levi, was 120 years old."}}}},
      {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "Person"}, {"strict", true},
                                                                      {"schema", json::parse(kPersonSchema)}}}}},
      {"temperature", 1},
      {"n", 30},
      {"seed", 1},
      {"max_tokens", 200}};
  const json r = post_ok(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(r["choices"].size(), 30u);
  for (const json& c : r["choices"]) {
    const std::string text = c["message"]["content"].get<std::string>();
    EXPECT_EQ(c["finish_reason"], "stop") << text;
    ASSERT_TRUE(json::accept(text)) << text;
    EXPECT_EQ(schema_check::check(schema, chat::Json::parse(text)), "") << text;
    EXPECT_TRUE(compact(text)) << text;
  }
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "set_level", "parameters": {"type": "object",
    "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 10}}, "required": ["level"],
    "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}])");

// After one complete call the model may close the block and end the turn; it does so in most
// samples, and every sample ends with its calls (none runs on to max_tokens).
TEST_F(DefaultModel, RequiredToolChoiceTurnsEndAfterTheirCalls) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Set the level to three."}}}},
                     {"tools", kTools},
                     {"tool_choice", "required"},
                     {"temperature", 1},
                     {"n", 30},
                     {"seed", 2},
                     {"max_tokens", 1000}};  // room for the most the grammar allows: 8 calls
  const json r = post_ok(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(r["choices"].size(), 30u);
  int single = 0;
  for (const json& c : r["choices"]) {
    EXPECT_EQ(c["finish_reason"], "tool_calls") << c.dump();
    const json& calls = c["message"]["tool_calls"];
    ASSERT_TRUE(calls.is_array() && !calls.empty()) << c.dump();
    single += calls.size() == 1;
    for (const json& call : calls) {
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      if (call["function"]["name"] == "set_level") {
        EXPECT_TRUE(args["level"].is_number_integer()) << args.dump();
      } else {
        EXPECT_EQ(call["function"]["name"], "ping");
        EXPECT_EQ(args, json::object());
      }
    }
  }
  EXPECT_GE(single, 10);  // ended right after the first call

  // Anthropic "any" is the same constraint.
  for (int i = 0; i < 3; ++i) {
    const json a = post_ok(*server_, "/v1/messages",
                           {{"max_tokens", 1000},  // unseeded: room for the 8 calls the grammar allows
                            {"temperature", 1},
                            {"messages", {{{"role", "user"}, {"content", "Set the level to three."}}}},
                            {"tools", {{{"name", "set_level"}, {"input_schema", kTools[0]["function"]["parameters"]}},
                                       {{"name", "ping"}, {"input_schema", kTools[1]["function"]["parameters"]}}}},
                            {"tool_choice", {{"type", "any"}}}});
    EXPECT_EQ(a["stop_reason"], "tool_use") << a.dump();
    ASSERT_FALSE(a["content"].empty()) << a.dump();
    for (const json& block : a["content"]) EXPECT_EQ(block["type"], "tool_use") << a.dump();
  }
}

// What openai's `parse` sends for a pydantic model with plain `str` fields: strict, every
// property required, additionalProperties false, titles, and FREE strings (no maxLength), so
// only the model closes them. Before the fine-tune that taught it JSON (models-src/default
// README.txt) every sample ran to max_tokens inside its first string.
const char* kFreePersonSchema = R"({"title": "Person", "type": "object",
  "properties": {"name": {"title": "Name", "type": "string"},
                 "father": {"title": "Father", "type": "string"},
                 "deed": {"title": "Deed", "type": "string"},
                 "age": {"title": "Age", "type": "integer"}},
  "required": ["name", "father", "deed", "age"], "additionalProperties": false})";

TEST_F(DefaultModel, FreeStringSchemaSamplesAtTemperatureOneFinish) {
  const chat::Json schema = chat::Json::parse(kFreePersonSchema);
  const json body = {
      {"messages", {{{"role", "user"}, {"content", "Extract the person: Joshua the son of Nun led Israel over Jordan."}}}},
      {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "Person"}, {"strict", true},
                                                                      {"schema", json::parse(kFreePersonSchema)}}}}},
      {"temperature", 1},
      {"n", 30},
      {"seed", 3},
      {"max_tokens", 150}};  // four short fields take under 80 tokens
  const json r = post_ok(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(r["choices"].size(), 30u);
  // Every finished sample must be valid; how many finish depends on the trained weights and on
  // the kernels' summation order (a different ISA samples other tokens at temperature 1), so the
  // count is a bound: 30 of 30 stopped when the fine-tune was made, 10% of margin below it. The
  // untuned model finished 0 of 30 (every sample ran to max_tokens inside its first string).
  int finished = 0;
  for (const json& c : r["choices"]) {
    const std::string text = c["message"]["content"].get<std::string>();
    if (c["finish_reason"] != "stop") {
      EXPECT_EQ(c["finish_reason"], "length") << text;
      continue;
    }
    ++finished;
    ASSERT_TRUE(json::accept(text)) << text;
    EXPECT_EQ(schema_check::check(schema, chat::Json::parse(text)), "") << text;
    EXPECT_TRUE(compact(text)) << text;
  }
  EXPECT_GE(finished, 27);
}

// instructor's default TOOLS mode and LangChain's with_structured_output: the schema becomes a
// tool's parameters and tool_choice names it; the plain strings are free-text DSML arguments,
// which only end when the model writes "</｜DSML｜parameter>". Before the fine-tune none of the
// 30 did; after it 29 of 30 do (the tool turns were learnt least: see models-src/default
// README.txt), so this holds the finished ones to be valid calls and at least 27 to finish.
TEST_F(DefaultModel, FreeTextToolArgumentsAtTemperatureOneFinish) {
  const json tools = {{{"type", "function"},
                       {"function", {{"name", "Person"},
                                     {"description", "Correctly extracted `Person` with all the required parameters"},
                                     {"parameters", json::parse(kFreePersonSchema)}}}}};
  const chat::Json schema = chat::Json::parse(kFreePersonSchema);
  const json body = {{"messages", {{{"role", "user"}, {"content", "Extract the person: David the son of Jesse slew Goliath."}}}},
                     {"tools", tools},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "Person"}}}}},
                     {"temperature", 1},
                     {"n", 30},
                     {"seed", 4},
                     {"max_tokens", 400}};  // four short arguments: ~160 tokens (this tokenizer spells DSML tags in pieces)
  const json r = post_ok(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(r["choices"].size(), 30u);
  int valid = 0;
  for (const json& c : r["choices"]) {
    if (c["finish_reason"] != "tool_calls") continue;
    const json& calls = c["message"]["tool_calls"];
    EXPECT_EQ(calls.size(), 1u) << c.dump();
    if (!calls.is_array() || calls.size() != 1) continue;
    EXPECT_EQ(calls[0]["function"]["name"], "Person") << c.dump();
    const std::string args = calls[0]["function"]["arguments"].get<std::string>();
    if (!json::accept(args)) continue;
    EXPECT_EQ(schema_check::check(schema, chat::Json::parse(args)), "") << args;
    ++valid;
  }
  EXPECT_GE(valid, 27);
}

}  // namespace
}  // namespace deepinfer::testing
