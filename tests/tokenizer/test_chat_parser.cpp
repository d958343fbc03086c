// Output parser: reference parse results, streaming at every byte boundary, DSML
// round trips through the encoders, and malformed / truncated markup.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/chat/encoder.h"
#include "tokenizer/chat/output_parser.h"

namespace fs = std::filesystem;
using namespace deepinfer::chat;

namespace {

const fs::path kData = fs::path(DI_TEST_DATA_DIR) / "chat";
const std::string EOS = "<｜end▁of▁sentence｜>";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Adjacent deltas of the same kind and call merged, so that chunkings compare.
std::vector<ChatEvent> normalize(const std::vector<ChatEvent>& in) {
  std::vector<ChatEvent> out;
  for (const auto& e : in) {
    const bool delta = e.kind == ChatEventKind::Content || e.kind == ChatEventKind::Reasoning ||
                       e.kind == ChatEventKind::ToolCallArguments;
    if (delta && !out.empty() && out.back().kind == e.kind && out.back().tool_index == e.tool_index)
      out.back().text += e.text;
    else
      out.push_back(e);
  }
  return out;
}

std::string describe(const std::vector<ChatEvent>& ev) {
  std::string s;
  for (const auto& e : ev) s += std::to_string(int(e.kind)) + "/" + std::to_string(e.tool_index) + ":[" + e.text + "] ";
  return s;
}

bool same(const std::vector<ChatEvent>& a, const std::vector<ChatEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind || a[i].text != b[i].text || a[i].tool_index != b[i].tool_index) return false;
  return true;
}

std::vector<ChatEvent> run_chunks(ChatFamily f, bool thinking, const std::vector<std::string_view>& chunks) {
  OutputParser p(f, thinking);
  std::vector<ChatEvent> ev;
  for (auto c : chunks) p.feed(c, ev);
  p.finish(ev);
  return ev;
}

// Every split into two chunks, and byte-by-byte feeding, give the one-shot events.
void expect_chunking_invariant(ChatFamily f, bool thinking, const std::string& text) {
  const auto whole = normalize(run_chunks(f, thinking, {text}));
  for (size_t k = 0; k <= text.size(); ++k) {
    const std::string_view t(text);
    const auto split = normalize(run_chunks(f, thinking, {t.substr(0, k), t.substr(k)}));
    ASSERT_TRUE(same(split, whole)) << "split at byte " << k << "\n  split: " << describe(split)
                                    << "\n  whole: " << describe(whole);
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  const auto bytewise = run_chunks(f, thinking, bytes);
  ASSERT_TRUE(same(normalize(bytewise), whole)) << describe(bytewise);
  // No delta splits a UTF-8 character (each one is valid UTF-8 on its own).
  for (const auto& e : bytewise) {
    size_t i = 0;
    while (i < e.text.size()) {
      const unsigned char c = static_cast<unsigned char>(e.text[i]);
      const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      ASSERT_LE(i + n, e.text.size()) << "delta ends inside a character: " << e.text;
      i += n;
    }
  }
}

void expect_no_markup(const ParsedOutput& p) {
  for (const std::string* s : {&p.content, &p.reasoning_content}) {
    EXPECT_EQ(s->find("｜DSML｜"), std::string::npos) << *s;
    EXPECT_EQ(s->find("<think>"), std::string::npos) << *s;
    EXPECT_EQ(s->find("</think>"), std::string::npos) << *s;
    EXPECT_EQ(s->find(EOS), std::string::npos) << *s;
  }
}

std::string dsml(ChatFamily f, const std::string& body_calls) {
  const std::string b = f == ChatFamily::V41 ? " calls" : "tool_calls";
  return "\n\n<｜DSML｜" + b + ">\n" + body_calls + "</｜DSML｜" + b + ">";
}

const std::string kGoodV4 =
    "Thinking about it.</think>Let me look.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">東京 \"x\"\n</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"noop\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS;

}  // namespace

TEST(ChatParser, MatchesReferenceParser) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(kData / "completions")) {
    SCOPED_TRACE(entry.path().filename().string());
    const Json c = Json::parse(slurp(entry.path()));
    const Json want = Json::parse(slurp(kData / "expected_parse" / entry.path().filename()));
    const ChatFamily f = *parse_family(c["family"].get<std::string>());
    const ParsedOutput p = parse_output(f, c["text"].get<std::string>(), c["thinking"].get<bool>());
    EXPECT_TRUE(p.errors.empty()) << p.errors[0];
    EXPECT_EQ(p.content, want["content"].get<std::string>());
    EXPECT_EQ(p.reasoning_content, want["reasoning_content"].get<std::string>());
    ASSERT_EQ(p.tool_calls.size(), want["tool_calls"].size());
    for (size_t i = 0; i < p.tool_calls.size(); ++i) {
      EXPECT_EQ(p.tool_calls[i].name, want["tool_calls"][i]["name"].get<std::string>());
      EXPECT_EQ(p.tool_calls[i].arguments, want["tool_calls"][i]["arguments"].get<std::string>());
    }
    expect_chunking_invariant(f, c["thinking"].get<bool>(), c["text"].get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 9);
}

TEST(ChatParser, StreamsArgumentsBeforeTheParameterCloses) {
  OutputParser p(ChatFamily::V4, false);
  std::vector<ChatEvent> ev;
  p.feed("Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write\">\n<｜DSML｜parameter name=\"text\" string=\"true\">Hello", ev);
  auto n = normalize(ev);
  ASSERT_EQ(n.size(), 3u) << describe(n);
  EXPECT_EQ(n[0].kind, ChatEventKind::Content);
  EXPECT_EQ(n[0].text, "Sure.");
  EXPECT_EQ(n[1].kind, ChatEventKind::ToolCallBegin);
  EXPECT_EQ(n[1].text, "write");
  EXPECT_EQ(n[2].kind, ChatEventKind::ToolCallArguments);
  EXPECT_EQ(n[2].text, "{\"text\": \"Hello");
  ev.clear();
  p.feed(" world\n</｜DSML｜param", ev);
  n = normalize(ev);
  ASSERT_EQ(n.size(), 1u) << describe(n);
  EXPECT_EQ(n[0].text, " world\\n");
  ev.clear();
  p.feed("eter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", ev);
  p.finish(ev);
  n = normalize(ev);
  ASSERT_EQ(n.size(), 2u) << describe(n);
  EXPECT_EQ(n[0].text, "\"}");
  EXPECT_EQ(n[1].kind, ChatEventKind::ToolCallEnd);
}

TEST(ChatParser, HoldsBackPartialMarkupAndCharacters) {
  OutputParser p(ChatFamily::V4, true);
  auto ev = p.feed("abc</thi");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "abc");
  ev = p.feed("nk>x\xE6\x9D");  // "x" then 2 of the 3 bytes of 東
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ChatEventKind::Content);
  EXPECT_EQ(ev[0].text, "x");
  ev = p.feed("\xB1\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\xE6\x9D\xB1");  // the newline may start a DSML block: held
  ev = p.finish();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\n");
}

TEST(ChatParser, ChunkingInvariantOnGoodAndBadText) {
  const std::vector<std::string> texts = {
      kGoodV4,
      "plain <b>html</b> with < and </ and \n\n and <｜User｜> tokens" + EOS,
      "</think>x<think>y</think>z" + EOS,
      "Reasoning then calls without end\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n",
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">not json</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"b\" string=\"true\">ok</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
      "text\n<｜DSML｜invoke name=\"h\">\n</｜DSML｜invoke>\nafter",
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"s\">\n<｜DSML｜ parameter name=\"q\" string=\"true\">v</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + EOS + "junk",
  };
  for (const auto& t : texts) {
    SCOPED_TRACE(t);
    for (bool thinking : {false, true}) {
      expect_chunking_invariant(ChatFamily::V4, thinking, t);
      expect_no_markup(parse_output(ChatFamily::V4, t, thinking));
    }
  }
}

TEST(ChatParser, EveryTruncationReportsOrStaysClean) {
  // Cut kGoodV4 at every byte: markup never leaks, and a cut strictly inside the
  // tool-calls block (after its opener is complete) is reported.
  const size_t block_start = kGoodV4.find("<｜DSML｜tool_calls>");
  const size_t opener_end = block_start + std::string("<｜DSML｜tool_calls>").size();
  const size_t block_end = kGoodV4.find("</｜DSML｜tool_calls>") + std::string("</｜DSML｜tool_calls>").size();
  for (size_t k = 0; k <= kGoodV4.size(); ++k) {
    SCOPED_TRACE(k);
    const ParsedOutput p = parse_output(ChatFamily::V4, kGoodV4.substr(0, k), true);
    expect_no_markup(p);
    if (k > opener_end && k < block_end) {
      EXPECT_FALSE(p.errors.empty());
    }
    if (k >= block_end) {
      EXPECT_TRUE(p.errors.empty());
      EXPECT_EQ(p.tool_calls.size(), 2u);
    }
  }
}

TEST(ChatParser, MalformedDsmlIsReported) {
  struct Bad {
    std::string text;
    size_t good_calls;  // calls that survive
  };
  const std::string I = "<｜DSML｜invoke name=\"f\">\n", EI = "</｜DSML｜invoke>\n";
  auto P = [](const std::string& k, const std::string& s, const std::string& v) {
    return "<｜DSML｜parameter name=\"" + k + "\" string=\"" + s + "\">" + v + "</｜DSML｜parameter>\n";
  };
  const std::vector<Bad> bad = {
      {dsml(ChatFamily::V4, I + P("a", "true", "1") + P("a", "true", "2") + EI), 0},           // duplicate
      {dsml(ChatFamily::V4, I + P("a", "maybe", "1") + EI), 0},                                 // bad string attr
      {dsml(ChatFamily::V4, I + P("a", "false", "{oops") + EI + I + EI), 1},                    // non-JSON value
      {dsml(ChatFamily::V4, I + "<｜DSML｜parameter name=\"a\" string=\"true\">v\n" + EI), 0},   // unclosed parameter
      {dsml(ChatFamily::V4, I + "stray text\n" + EI), 0},                                        // text in invoke
      {dsml(ChatFamily::V4, "<｜DSML｜invoke>\n" + EI), 0},                                      // invoke without name
      {dsml(ChatFamily::V4, I + "<｜DSML｜bogus x=\"1\">\n" + EI), 0},                           // unknown tag
      {dsml(ChatFamily::V4, P("a", "true", "1") + I + EI), 1},                                   // parameter outside
      {dsml(ChatFamily::V4, I + P("a", "true", "1") + I + EI), 1},                               // missing </invoke>
      {"\n\n<｜DSML｜tool_calls>\n" + I + P("a", "true", "1") + EOS, 0},                          // EOS inside
      {"\n\n<｜DSML｜tool_calls>\n" + I + P("a", "true", "1") + EI, 1},                           // block never closed
      {"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f", 0},                                  // truncated tag
      {"text <｜｜DSML｜ calls> more", 0},                                                        // token without '<'
      {dsml(ChatFamily::V4, I + "<｜DSML｜parameter name=\"a\" strin🙂g=\"true\">v</｜DSML｜parameter>\n" + EI + I + EI), 1},  // junk in tag
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.text);
    const ParsedOutput p = parse_output(ChatFamily::V4, b.text, false);
    EXPECT_FALSE(p.errors.empty());
    EXPECT_EQ(p.tool_calls.size(), b.good_calls);
    expect_no_markup(p);
    expect_chunking_invariant(ChatFamily::V4, false, b.text);
  }
}

TEST(ChatParser, ToleratedVariants) {
  // Missing block opener, V3.2 block name, other family's spelling, DSML inside reasoning.
  const std::vector<std::pair<std::string, bool>> ok = {
      {"Calling.\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n", false},
      {"\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", false},
      {"\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>", false},
      {"thinking...\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", true},
  };
  for (const auto& [text, thinking] : ok) {
    SCOPED_TRACE(text);
    const ParsedOutput p = parse_output(ChatFamily::V4, text, thinking);
    EXPECT_TRUE(p.errors.empty()) << p.errors[0];
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "f");
    EXPECT_EQ(p.tool_calls[0].arguments, "{}");
    expect_no_markup(p);
  }
  // A model that opens <think> itself in chat mode.
  const ParsedOutput p = parse_output(ChatFamily::V41, "<think>hmm</think>Hi" + EOS, false);
  EXPECT_EQ(p.reasoning_content, "hmm");
  EXPECT_EQ(p.content, "Hi");
}

TEST(ChatParser, RoundTripThroughEncoders) {
  // An assistant message rendered by the encoder parses back to the same structure.
  const Json calls = Json::parse(R"([
    {"id":"1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Zürich\\n\\\"HQ\\\"\", \"days\": 3, \"opts\": {\"a\": [1.5, null, true]}, \"note\": \"\"}"}},
    {"id":"2","type":"function","function":{"name":"noargs","arguments":"{}"}},
    {"id":"3","type":"function","function":{"name":"raw","arguments":"not json"}}])");
  for (ChatFamily f : {ChatFamily::V4, ChatFamily::V4_0731, ChatFamily::V41}) {
    for (bool thinking : {false, true}) {
      SCOPED_TRACE(std::string(family_name(f)) + (thinking ? " thinking" : " chat"));
      Json msgs = Json::array();
      msgs.push_back(Json{{"role", "user"}, {"content", "go"}});
      msgs.push_back(Json{{"role", "assistant"}, {"content", "On it."}, {"reasoning_content", "Plan."}, {"tool_calls", calls}});
      EncodeOptions o;
      o.thinking_mode = thinking ? "thinking" : "chat";
      o.drop_thinking = false;
      const std::string prompt = encode_messages(f, msgs, o);
      const std::string head = std::string(kAssistant) + (thinking ? kThinkStart : kThinkEnd);
      const std::string completion = prompt.substr(prompt.find(head) + head.size());
      const ParsedOutput p = parse_output(f, completion, thinking);
      EXPECT_TRUE(p.errors.empty()) << p.errors[0];
      EXPECT_EQ(p.content, "On it.");
      EXPECT_EQ(p.reasoning_content, thinking ? "Plan." : "");
      ASSERT_EQ(p.tool_calls.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(p.tool_calls[i].name, calls[i]["function"]["name"].get<std::string>());
        const std::string args = calls[i]["function"]["arguments"].get<std::string>();
        const Json want = Json::accept(args) ? Json::parse(args) : Json{{"arguments", args}};
        EXPECT_EQ(Json::parse(p.tool_calls[i].arguments), want);
      }
      expect_chunking_invariant(f, thinking, completion);
    }
  }
}
