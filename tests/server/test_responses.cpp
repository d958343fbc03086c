// The Responses API (src/server/responses.cpp) on the tiny model: the prompt a Responses
// request renders equals the prompt of the chat request it means (compared through
// usage.input_tokens and greedy output), previous_response_id continues a stored
// conversation, the stream's events come in a consistent order, errors are OpenAI-shaped.
#include <gtest/gtest.h>

#include "server_harness.h"

namespace deepinfer::testing {
namespace {

class Responses : public TinyServerSuite<Responses> {
 protected:
  // Greedy text of a response's message items.
  static std::string output_text(const json& r) {
    std::string s;
    for (const json& item : r["output"])
      if (item["type"] == "message")
        for (const json& part : item["content"]) s += part["text"].get<std::string>();
    return s;
  }
};

TEST_F(Responses, SameTokensAndTextAsTheChatRequestItMeans) {
  const json resp = post_ok(srv(), "/v1/responses", {{"input", "Hello there"}, {"instructions", "Be brief."},
                                              {"max_output_tokens", 6}, {"temperature", 0}});
  const json chat = post_ok(srv(), "/v1/chat/completions",
                            {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello there"}}}},
                             {"max_tokens", 6},
                             {"temperature", 0}});
  EXPECT_EQ(resp["object"], "response");
  EXPECT_EQ(resp["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(resp["usage"]["output_tokens"], 6);
  EXPECT_EQ(output_text(resp), chat["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(resp["status"], "incomplete");  // six tokens of a random model: cut by max_output_tokens
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
}

TEST_F(Responses, PreviousResponseIdContinuesTheConversation) {
  const json first = post_ok(srv(), "/v1/responses", {{"input", "First question"}, {"max_output_tokens", 4}, {"temperature", 0}});
  const json second = post_ok(srv(), "/v1/responses", {{"input", "Second question"},
                                                {"previous_response_id", first["id"]},
                                                {"max_output_tokens", 4},
                                                {"temperature", 0}});
  EXPECT_EQ(second["previous_response_id"], first["id"]);
  // The same conversation spelled out as chat messages renders the same prompt.
  const json chat = post_ok(srv(), "/v1/chat/completions",
                            {{"messages",
                              {{{"role", "user"}, {"content", "First question"}},
                               {{"role", "assistant"}, {"content", output_text(first)}},
                               {{"role", "user"}, {"content", "Second question"}}}},
                             {"max_tokens", 4},
                             {"temperature", 0}});
  EXPECT_EQ(second["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(output_text(second), chat["choices"][0]["message"]["content"].get<std::string>());
  // Stored responses can be read back and deleted.
  auto c = srv().client();
  auto got = c.Get(("/v1/responses/" + first["id"].get<std::string>()).c_str());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body)["id"], first["id"]);
  auto del = c.Delete(("/v1/responses/" + first["id"].get<std::string>()).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  int st = 0;
  json gone = post(srv(), "/v1/responses", json{{"input", "x"}, {"previous_response_id", first["id"]}}.dump(), &st);
  EXPECT_EQ(st, 404);
  EXPECT_EQ(gone["error"]["param"], "previous_response_id");
}

TEST_F(Responses, FunctionCallItemsBecomeToolTurns) {
  const json tools = json::array({{{"type", "function"},
                                   {"name", "get_weather"},
                                   {"description", "Weather of a city"},
                                   {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
  const json input = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                                  {{"type", "function_call"}, {"call_id", "c1"}, {"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}},
                                  {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}}});
  const json resp = post_ok(srv(), "/v1/responses", {{"input", input}, {"tools", tools}, {"max_output_tokens", 3}, {"temperature", 0}});
  const json chat_tools = json::array({{{"type", "function"},
                                        {"function",
                                         {{"name", "get_weather"},
                                          {"description", "Weather of a city"},
                                          {"parameters", tools[0]["parameters"]}}}}});
  const json messages = json::array(
      {{{"role", "user"}, {"content", "Weather in Paris?"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}});
  const json chat = post_ok(srv(), "/v1/chat/completions", {{"messages", messages}, {"tools", chat_tools}, {"max_tokens", 3}, {"temperature", 0}});
  EXPECT_EQ(resp["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
}

TEST_F(Responses, StreamEventsAreOrderedAndComplete) {
  Sse s = stream_post(srv().port, "/v1/responses", {{"input", "Hi"}, {"max_output_tokens", 5}, {"temperature", 0}, {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.body;
  ASSERT_GE(s.chunks.size(), 6u);
  EXPECT_EQ(s.chunks.front()["type"], "response.created");
  EXPECT_EQ(s.chunks[1]["type"], "response.in_progress");
  const json last = s.chunks.back();
  EXPECT_TRUE(last["type"] == "response.completed" || last["type"] == "response.incomplete") << last.dump();
  std::string deltas;
  int64_t seq = -1;
  for (const json& ev : s.chunks) {
    EXPECT_EQ(ev["sequence_number"].get<int64_t>(), seq + 1);
    seq = ev["sequence_number"];
    if (ev["type"] == "response.output_text.delta") deltas += ev["delta"].get<std::string>();
  }
  // The deltas add up to the final text, which equals the non-streamed answer.
  const json& final_response = last["response"];
  EXPECT_EQ(deltas, output_text(final_response));
  const json plain = post_ok(srv(), "/v1/responses", {{"input", "Hi"}, {"max_output_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(output_text(plain), deltas);
  EXPECT_EQ(final_response["usage"]["output_tokens"], plain["usage"]["output_tokens"]);
}

TEST_F(Responses, BadRequestsAreNamed) {
  int st = 0;
  json e = post(srv(), "/v1/responses", R"({"max_output_tokens": 3})", &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(e["error"]["param"], "input");
  e = post(srv(), "/v1/responses", R"({"input": "x", "tools": [{"type": "web_search"}]})", &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(e["error"]["param"], "tools");
  e = post(srv(), "/v1/responses", R"({"input": [{"type": "mystery"}]})", &st);
  EXPECT_EQ(st, 400);
  e = post(srv(), "/v1/responses", R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})", &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("input_image"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::testing
