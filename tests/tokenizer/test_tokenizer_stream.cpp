// Streaming output: incremental detokenizer (complete UTF-8 characters only) and stop
// strings spanning token boundaries.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

// ---- test helpers (test_tokenizer_util.cpp) ----
namespace deepinfer::tokenizer::testing {
struct CorpusCase {
  std::string name;
  std::string text;
};
nlohmann::json read_json(const std::string& rel);
std::string from_hex(const std::string& hex);
const std::vector<CorpusCase>& corpus();
const Tokenizer& test_tokenizer(const std::string& name);
}  // namespace deepinfer::tokenizer::testing

namespace {

using namespace deepinfer::tokenizer;
using namespace deepinfer::tokenizer::testing;

const std::string kFffd = "\xEF\xBF\xBD";

// Id of the single-byte token for byte b (the byte-level character of b).
int32_t byte_token(const Tokenizer& tok, unsigned char b) {
  // The byte tokens are the ones that decode to exactly that one byte.
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_added_token(id) && tok.token_bytes(id) == std::string(1, static_cast<char>(b))) return id;
  }
  return -1;
}

TEST(IncrementalDetokenizer, HoldsSplitMultiByteCharacters) {
  const Tokenizer& tok = test_tokenizer("tiny");
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, four byte tokens in the tiny vocab
  std::vector<int32_t> ids;
  for (unsigned char b : emoji) ids.push_back(byte_token(tok, b));
  for (int32_t id : ids) ASSERT_GE(id, 0);
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.push(ids[1]), "");
  EXPECT_EQ(d.push(ids[2]), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(ids[3]), emoji);
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");

  // A character split across tokens of the real V4 vocabulary.
  const Tokenizer& v4 = test_tokenizer("v4");
  const std::string text = "ok 😀👍🏽 中文 ok";
  const std::vector<int32_t> v4ids = v4.encode(text);
  IncrementalDetokenizer d4(v4);
  std::string out;
  bool saw_partial_token = false;
  for (int32_t id : v4ids) {
    const std::string piece = d4.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << id;
    if (!is_valid_utf8(v4.token_bytes(id))) saw_partial_token = true;
    out += piece;
  }
  out += d4.flush();
  EXPECT_TRUE(saw_partial_token) << "the sample should contain a token that splits a character";
  EXPECT_EQ(out, text);
}

TEST(IncrementalDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer& tok = test_tokenizer("tiny");
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(byte_token(tok, 0xFF)), kFffd);  // never valid: replaced at once
  EXPECT_EQ(d.push(byte_token(tok, 0xE4)), "");     // could still become a character
  EXPECT_EQ(d.push(byte_token(tok, 'a')), kFffd + "a");
  EXPECT_EQ(d.push(byte_token(tok, 0xE4)), "");
  EXPECT_EQ(d.push(byte_token(tok, 0xB8)), "");
  EXPECT_EQ(d.flush(), kFffd);  // a truncated character at the end is one U+FFFD
  EXPECT_EQ(d.push(byte_token(tok, 0xED)), "");
  EXPECT_EQ(d.push(byte_token(tok, 0xA0)), kFffd + kFffd);  // surrogates are ill-formed
  EXPECT_EQ(d.push(byte_token(tok, 0x80)), kFffd);
}

TEST(IncrementalDetokenizer, StreamingEqualsHuggingFaceDecodeOnCorpus) {
  for (const char* name : {"tiny", "v4"}) {
    const Tokenizer& tok = test_tokenizer(name);
    const nlohmann::json exp = read_json(std::string("expected_") + name + ".json");
    const auto& cases = corpus();
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto& e = exp["cases"][i];
      const std::vector<int32_t> ids = e["ids"].get<std::vector<int32_t>>();
      const std::string want =
          e.contains("decode_hex") ? from_hex(e["decode_hex"].get<std::string>()) : utf8_lossy(cases[i].text);
      IncrementalDetokenizer d(tok);
      std::string got;
      for (int32_t id : ids) {
        const std::string piece = d.push(id);
        ASSERT_TRUE(is_valid_utf8(piece)) << name << " " << cases[i].name;
        got += piece;
      }
      got += d.flush();
      EXPECT_EQ(got, want) << name << " " << cases[i].name;
    }
  }
}

TEST(IncrementalDetokenizer, SkipsSpecialTokensWhenAsked) {
  const Tokenizer& tok = test_tokenizer("v4");
  const std::vector<int32_t> ids = tok.encode("<｜begin▁of▁sentence｜>Hi<｜User｜>");
  IncrementalDetokenizer keep(tok), skip(tok, /*skip_special_tokens=*/true);
  std::string a, b;
  for (int32_t id : ids) {
    a += keep.push(id);
    b += skip.push(id);
  }
  EXPECT_EQ(a, "<｜begin▁of▁sentence｜>Hi<｜User｜>");
  EXPECT_EQ(b, "Hi<｜User｜>");  // <｜User｜> is not special in the V4 file
}

TEST(StopStringMatcher, DetectsStopAcrossChunksAndHoldsBackPrefixes) {
  StopStringMatcher m({"world", "<|end|>"});
  auto r = m.push("Hello wo");
  EXPECT_EQ(r.text, "Hello ");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.held_bytes(), 2u);
  r = m.push("r");
  EXPECT_EQ(r.text, "");
  r = m.push("ld and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.push("x").stopped);
  EXPECT_EQ(m.push("x").text, "");
  EXPECT_EQ(m.flush(), "");

  StopStringMatcher h({"<|end|>"});
  EXPECT_EQ(h.push("abc<").text, "abc");
  EXPECT_EQ(h.push("|e").text, "");
  EXPECT_EQ(h.push("x").text, "<|ex");  // the prefix broke: released
  EXPECT_EQ(h.push("tail<|").text, "tail");
  EXPECT_EQ(h.flush(), "<|");  // end of stream without a stop releases the rest
}

TEST(StopStringMatcher, EarliestEndingStopWins) {
  StopStringMatcher m({"abc", "b"});
  const auto r = m.push("xabc");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 1);  // "b" completes before "abc" does
  EXPECT_EQ(r.text, "xa");

  StopStringMatcher n({"", "bc", "abc"});  // empty stops are ignored; indices refer to the list
  const auto r2 = n.push("zabcd");
  EXPECT_TRUE(r2.stopped);
  EXPECT_EQ(r2.stop_index, 2);  // same end: the longer one (earlier start)
  EXPECT_EQ(r2.text, "z");

  StopStringMatcher first({"END"});
  const auto r3 = first.push("END");
  EXPECT_TRUE(r3.stopped);
  EXPECT_EQ(r3.text, "");
}

// Reference: stop at the earliest end (ties: earliest start) in the whole text.
std::pair<std::string, int> reference_stop(const std::string& text, const std::vector<std::string>& stops) {
  for (std::size_t end = 1; end <= text.size(); ++end) {
    int best = -1;
    std::size_t best_len = 0;
    for (std::size_t k = 0; k < stops.size(); ++k) {
      const std::string& s = stops[k];
      if (s.empty() || s.size() > end) continue;
      if (text.compare(end - s.size(), s.size(), s) == 0 && s.size() > best_len) {
        best = static_cast<int>(k);
        best_len = s.size();
      }
    }
    if (best >= 0) return {text.substr(0, end - best_len), best};
  }
  return {text, -1};
}

TEST(StopStringMatcher, RandomChunkingAgreesWithReference) {
  std::mt19937 rng(123);
  const std::string alphabet = "ab<|>";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text(rng() % 40, 'a');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops(1 + rng() % 3);
    for (auto& s : stops) {
      s.resize(1 + rng() % 4);
      for (char& c : s) c = alphabet[rng() % alphabet.size()];
    }
    const auto [want_text, want_idx] = reference_stop(text, stops);
    StopStringMatcher m(stops);
    std::string got;
    int got_idx = -1;
    std::size_t pos = 0;
    while (pos < text.size() && got_idx < 0) {
      const std::size_t n = 1 + rng() % 5;
      const auto r = m.push(text.substr(pos, n));
      got += r.text;
      if (r.stopped) got_idx = r.stop_index;
      pos += n;
    }
    if (got_idx < 0) got += m.flush();
    ASSERT_EQ(got, want_text) << "text=" << text << " iter=" << iter;
    ASSERT_EQ(got_idx, want_idx) << "text=" << text << " iter=" << iter;
  }
}

TEST(StreamingDecoder, StopsOnAStopStringSplitAcrossTokens) {
  const Tokenizer& tok = test_tokenizer("v4");
  const std::string text = "The answer is 42.\n\nUser: what else?";
  const std::vector<int32_t> ids = tok.encode(text);
  StreamingDecoder dec(tok, {"\n\nUser:"});
  std::string out;
  bool stopped = false;
  std::size_t used = 0;
  for (int32_t id : ids) {
    ++used;
    const auto r = dec.push(id);
    out += r.text;
    if (r.stopped) {
      stopped = true;
      EXPECT_EQ(r.stop_index, 0);
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "The answer is 42.");
  EXPECT_LT(used, ids.size());

  // Without a stop, finish() releases held text and the incomplete character.
  StreamingDecoder plain(tok, {"zzz"});
  std::string all;
  for (int32_t id : tok.encode("abc zz")) all += plain.push(id).text;
  all += plain.finish().text;
  EXPECT_EQ(all, "abc zz");
}

TEST(StreamingDecoder, StopStringInsideAMultiByteCharacterSequence) {
  // The stop string is a CJK word; the emoji before it is split over byte tokens.
  const Tokenizer& tok = test_tokenizer("tiny");
  const std::string text = "x😀停止y";
  std::vector<int32_t> ids;
  for (unsigned char b : text) ids.push_back(byte_token(tok, b));
  StreamingDecoder dec(tok, {"停止"});
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    const auto r = dec.push(id);
    EXPECT_TRUE(is_valid_utf8(r.text));
    out += r.text;
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "x😀");
}

}  // namespace
