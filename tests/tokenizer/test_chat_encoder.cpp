// Prompt encoders against goldens produced by DeepSeek's Python reference encoders
// (tests/data/chat/README.md), plus the Python-compatible JSON formatting they rely on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "tokenizer/chat/encoder.h"
#include "tokenizer/chat/family.h"

namespace fs = std::filesystem;
using namespace deepinfer::chat;

namespace {

const fs::path kData = fs::path(DI_TEST_DATA_DIR) / "chat";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  Json messages;
  EncodeOptions options;
};

Case load_case(const std::string& name) {
  Json doc = Json::parse(slurp(kData / "cases" / (name + ".json")));
  Case c{doc["messages"], options_from_json(doc["options"])};
  if (doc.contains("tools")) c.messages[0]["tools"] = doc["tools"];
  return c;
}

std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto around = [&](const std::string& s) { return s.substr(i < 40 ? 0 : i - 40, 100); };
  return "first difference at byte " + std::to_string(i) + "\n  got:      ..." + around(a) + "\n  expected: ..." +
         around(b);
}

}  // namespace

TEST(ChatEncoder, GoldensFromReferenceEncoders) {
  int prompts = 0, rejections = 0;
  for (const char* fam_name : {"v4", "v4_0731", "v41"}) {
    const ChatFamily fam = *parse_family(fam_name);
    for (const auto& entry : fs::directory_iterator(kData / "expected" / fam_name)) {
      const std::string name = entry.path().stem().string();
      SCOPED_TRACE(std::string(fam_name) + "/" + name);
      const Case c = load_case(name);
      if (entry.path().extension() == ".txt") {
        std::string got;
        ASSERT_NO_THROW(got = encode_messages(fam, c.messages, c.options));
        const std::string want = slurp(entry.path());
        EXPECT_TRUE(got == want) << first_difference(got, want);
        ++prompts;
      } else {
        EXPECT_THROW(encode_messages(fam, c.messages, c.options), std::invalid_argument)
            << "reference raised " << slurp(entry.path());
        ++rejections;
      }
    }
  }
  // Every case exists for every family (75 cases x 3).
  EXPECT_EQ(prompts + rejections, 225);
  EXPECT_GE(prompts, 170);
}

TEST(ChatEncoder, ReadmeExample) {
  Json m = Json::parse(R"([{"role":"system","content":"You are a helpful assistant."},
                           {"role":"user","content":"What is 2+2?"}])");
  EncodeOptions o;
  o.thinking_mode = "thinking";
  EXPECT_EQ(encode_messages(ChatFamily::V4, m, o),
            "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜><think>");
  o.thinking_mode = "chat";
  EXPECT_EQ(encode_messages(ChatFamily::V41, m, o),
            "<｜begin▁of▁sentence｜><｜System｜>You are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜></think>");
  // The nlohmann::json overload (keys sorted, values identical).
  nlohmann::json plain = nlohmann::json::parse(m.dump());
  EXPECT_EQ(encode_messages(ChatFamily::V41, plain, o), encode_messages(ChatFamily::V41, m, o));
}

TEST(ChatEncoder, OptionsMirrorKeywordArguments) {
  EXPECT_THROW(options_from_json(Json::parse(R"({"reasoning_effort":"high"})")), std::invalid_argument);
  EXPECT_THROW(options_from_json(Json::parse(R"({"thinking_mode":"chat","temperature":1})")), std::invalid_argument);
  EncodeOptions o = options_from_json(Json::parse(R"({"thinking_mode":"thinking","drop_thinking":0})"));
  EXPECT_EQ(o.thinking_mode, "thinking");
  EXPECT_FALSE(py_truthy(o.drop_thinking));
}

TEST(ChatPyJson, MatchesPythonJsonDumps) {
  // Expected strings are what CPython 3.11 json.dumps(..., ensure_ascii=False) prints.
  const Json v = Json::parse(R"({"b": [1, -2, 3.0, 0.1, 1e-05, 1e16, 1e15, 123.456, -0.0, 2.5e-300, 1.7976931348623157e308],
                                 "a": {"é": "ü\u0001\t\n\"\\/"}, "t": true, "n": null, "e": [], "o": {}})");
  EXPECT_EQ(py_json_dumps(v),
            "{\"b\": [1, -2, 3.0, 0.1, 1e-05, 1e+16, 1000000000000000.0, 123.456, -0.0, 2.5e-300, "
            "1.7976931348623157e+308], \"a\": {\"é\": \"ü\\u0001\\t\\n\\\"\\\\/\"}, \"t\": true, \"n\": null, "
            "\"e\": [], \"o\": {}}");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(123456789.0), "123456789.0");
  EXPECT_EQ(py_float_repr(1.5e16), "1.5e+16");
  EXPECT_EQ(py_float_repr(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(py_float_repr(1e22), "1e+22");
  EXPECT_EQ(py_float_repr(5e-324), "5e-324");
  EXPECT_EQ(py_str(Json(true), "x"), "True");
  EXPECT_EQ(py_str(Json(nullptr), "x"), "None");
  EXPECT_THROW(py_str(Json::array(), "x"), std::invalid_argument);
}

// Expectations stated by the V4.1 release's own encoder tests (encoding/test_encoding.py):
// numeric effort budgets, the mid-conversation system turn, images, spaced DSML.
TEST(ChatEncoder, V41ReleaseTestExpectations) {
  const std::string head = "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: ";
  const std::string tail = " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
  const Json q = Json::parse(R"([{"role": "user", "content": "question"}])");
  EncodeOptions o;
  o.thinking_mode = "thinking";
  for (auto [effort, budget] : std::vector<std::pair<Json, int>>{
           {nullptr, 75}, {"low", 50}, {"high", 75}, {"max", 100}, {1, 1}, {42, 42}, {100, 100}}) {
    o.reasoning_effort = effort;
    EXPECT_EQ(encode_messages(ChatFamily::V41, q, o),
              head + std::to_string(budget) + tail + "<｜User｜>question<｜Assistant｜><think>");
  }
  for (const Json& bad : {Json(-1), Json(0), Json(101), Json("medium"), Json(true), Json(false), Json(1.5)}) {
    o.reasoning_effort = bad;
    EXPECT_THROW(encode_messages(ChatFamily::V41, q, o), std::invalid_argument) << bad.dump();
  }
  o.thinking_mode = "chat";
  o.reasoning_effort = "max";
  EXPECT_EQ(encode_messages(ChatFamily::V41, Json::parse(R"([{"role": "user", "content": "hello"}])"), o),
            "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>");

  o.thinking_mode = "thinking";
  o.reasoning_effort = 88;
  EXPECT_EQ(encode_messages(ChatFamily::V41, Json::parse(R"([{"role": "system", "content": "sys"},
              {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
              {"role": "system", "content": "mid sys"}])"), o),
            head + "88" + tail +
                "sys<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜><｜System｜>mid sys<｜Assistant｜><think>");

  o = EncodeOptions{};
  EXPECT_EQ(encode_messages(ChatFamily::V41, Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "inspect"},
              {"type": "image_url", "image_url": {"url": "/unused/image.png"}}]}])"), o),
            "<｜begin▁of▁sentence｜><｜User｜>inspect\n\n<｜deepseek_image｜><｜Assistant｜></think>");
  EXPECT_EQ(encode_messages(ChatFamily::V41, Json::parse(R"([{"role": "user", "content": "classify me", "task": "query"}])"), o),
            "<｜begin▁of▁sentence｜><｜User｜>classify me<｜query｜>");

  // An assistant tool-call turn renders to the completion text the release test pins,
  // and re-encoding it after the user turn as context gives the same text.
  const std::string completion =
      "  reason  </think>summary\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"lookup\">\n"
      "<｜DSML｜ parameter name=\"query\" string=\"true\">value</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"limit\" string=\"false\">2</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls><｜end▁of▁sentence｜>";
  const Json assistant = Json::parse(R"([{"role": "assistant", "reasoning_content": "  reason  ", "content": "summary",
      "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{\"query\":\"value\",\"limit\":2}"}}]}])");
  o.thinking_mode = "thinking";
  o.context = Json::parse(R"([{"role": "user", "content": "question"}])");
  EXPECT_EQ(encode_messages(ChatFamily::V41, assistant, o), completion);
}

// Tool-call arguments are a client's JSON text inside a string: nested past the limits of a
// request body they are refused with a clear error in every family, never parsed into a value
// whose copies recurse 100k levels deep (that crashed the server).
TEST(ChatEncoder, DeeplyNestedArgumentsAreRefusedNotRecursed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (ChatFamily family : {ChatFamily::V4, ChatFamily::V4_0731, ChatFamily::V41}) {
    // The text itself, and (for V4.1, which unwraps a string twice) the text inside a JSON string.
    const bool twice = family == ChatFamily::V41;
    for (const Json& args : twice ? std::vector<Json>{Json(deep), Json(Json(deep).dump())} : std::vector<Json>{Json(deep)}) {
      const Json call = {{"type", "function"}, {"function", {{"name", "f"}, {"arguments", args}}}};
      const Json messages = Json::array({Json{{"role", "user"}, {"content", "hi"}},
                                         Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}}});
      try {
        (void)encode_messages(family, messages, EncodeOptions{});
        ADD_FAILURE() << family_name(family) << ": accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
      }
    }
  }
  // Moderate nesting still renders.
  const Json call = {{"type", "function"}, {"function", {{"name", "f"}, {"arguments", R"({"a": [[[1]]]})"}}}};
  const Json ok = Json::array({Json{{"role", "user"}, {"content", "hi"}},
                               Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}}});
  for (ChatFamily family : {ChatFamily::V4, ChatFamily::V4_0731, ChatFamily::V41})
    EXPECT_NE(encode_messages(family, ok, EncodeOptions{}).find("[[[1]]]"), std::string::npos);
}
