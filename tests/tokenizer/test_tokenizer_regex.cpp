// The tokenizer's code-point regex engine and Unicode tables.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace {

using namespace deepinfer::tokenizer;

struct Decoded {
  std::vector<char32_t> cps;
  std::vector<uint8_t> cats;
  std::vector<std::size_t> offs;  // byte offset of each code point, plus the total
  std::string text;
};

Decoded decode(const std::string& s) {
  Decoded d;
  d.text = s;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t len;
    char32_t cp;
    EXPECT_EQ(utf8_step(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i, len, cp), Utf8Step::kValid);
    d.cps.push_back(cp);
    d.cats.push_back(static_cast<uint8_t>(general_category(cp)));
    d.offs.push_back(i);
    i += len;
  }
  d.offs.push_back(s.size());
  return d;
}

// All matches, iterated like tokenizers' find_iter (non-empty ones only).
std::vector<std::string> find_all(const std::string& pattern, const std::string& text) {
  const Regex re(pattern);
  const Decoded d = decode(text);
  RegexSubject s{d.cps.data(), d.cats.data(), 0, d.cps.size()};
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= d.cps.size()) {
    std::size_t b, e;
    if (!re.search(s, pos, b, e)) break;
    if (e > b) out.push_back(text.substr(d.offs[b], d.offs[e] - d.offs[b]));
    pos = e > b ? e : b + 1;
  }
  return out;
}

using V = std::vector<std::string>;

TEST(TokenizerRegex, LiteralsAlternationAndQuantifiers) {
  EXPECT_EQ(find_all("a|ab", "ab ab"), (V{"a", "a"}));  // leftmost-first, not longest
  EXPECT_EQ(find_all("ab|a", "ab a"), (V{"ab", "a"}));
  EXPECT_EQ(find_all("\\p{N}{1,3}", "12345 6"), (V{"123", "45", "6"}));
  EXPECT_EQ(find_all("a{2}", "aaaaa"), (V{"aa", "aa"}));
  EXPECT_EQ(find_all("a{2,}", "aaaaa a"), (V{"aaaaa"}));
  EXPECT_EQ(find_all("a{,2}", "aaaaa"), (V{"aa", "aa", "a"}));
  EXPECT_EQ(find_all("a{3,2}", "aaaaa"), (V{"aaa", "aa"}));  // Oniguruma swaps the bounds
  EXPECT_EQ(find_all("a{", "a{b"), (V{"a{"}));  // not an interval: literal brace
  EXPECT_EQ(find_all("a+?", "aaa"), (V{"a", "a", "a"}));
  EXPECT_EQ(find_all("a{2,3}?", "aaaaa"), (V{"aa", "aa"}));
  EXPECT_EQ(find_all("a*?b", "aaab"), (V{"aaab"}));
  EXPECT_EQ(find_all("(?:ab)+", "ababab abx"), (V{"ababab", "ab"}));
  EXPECT_EQ(find_all("(ab|cd){2}", "abcdab cd"), (V{"abcd"}));
  EXPECT_EQ(find_all("x*", "abxxc"), (V{"xx"}));
  EXPECT_EQ(find_all("colou?r", "color colour"), (V{"color", "colour"}));
}

TEST(TokenizerRegex, LookAheadAtomicAndPossessive) {
  EXPECT_EQ(find_all("\\s+(?!\\S)", "a   b  "), (V{"  ", "  "}));
  EXPECT_EQ(find_all("a(?=b)", "ab ac ab"), (V{"a", "a"}));
  EXPECT_EQ(find_all("(?>a+)a", "aaaa"), V{});
  EXPECT_EQ(find_all("a++a", "aaaa"), V{});
  EXPECT_EQ(find_all("(?>a+)b", "aab"), (V{"aab"}));
  EXPECT_EQ(find_all("(?:ab)*+c", "ababc"), (V{"ababc"}));
}

TEST(TokenizerRegex, AnchorsAndWordBoundaries) {
  EXPECT_EQ(find_all("^a", "a\na ba"), (V{"a", "a"}));
  EXPECT_EQ(find_all("a$", "a\nba"), (V{"a", "a"}));
  EXPECT_EQ(find_all("\\Aa", "aaa"), (V{"a"}));
  EXPECT_EQ(find_all("a\\z", "aaa"), (V{"a"}));
  EXPECT_EQ(find_all("a\\Z", "aa\n"), (V{"a"}));
  EXPECT_EQ(find_all("\\ba\\w*", "a ba ab"), (V{"a", "ab"}));
  EXPECT_EQ(find_all("\\Ba", "a ba"), (V{"a"}));
}

TEST(TokenizerRegex, ClassesAndEscapes) {
  EXPECT_EQ(find_all("[]a]+", "]a]b"), (V{"]a]"}));
  EXPECT_EQ(find_all("[a-]+", "a-b"), (V{"a-"}));
  EXPECT_EQ(find_all("[\\]\\\\]+", "x]\\y"), (V{"]\\"}));
  EXPECT_EQ(find_all("[^]]+", "ab]c"), (V{"ab", "c"}));
  EXPECT_EQ(find_all("\\x41\\x{1F600}\\u4e00", "A😀一"), (V{"A😀一"}));
  EXPECT_EQ(find_all(".+", "ab\ncd\re"), (V{"ab", "cd\re"}));
  EXPECT_EQ(find_all("\\d+", "1٣²5"), (V{"1٣", "5"}));         // \d is Nd
  EXPECT_EQ(find_all("\\w+", "a²b ⓐy _z \u200dq"), (V{"a²b", "ⓐy", "_z", "q"}));  // Oniguruma's \w
  EXPECT_EQ(find_all("\\h+", "0x1fZ"), (V{"0", "1f"}));
  EXPECT_EQ(find_all("\\s+", "a\u00a0b\u200bc\u3000d\x1c"), (V{"\u00a0", "\u3000"}));
  EXPECT_EQ(find_all("\\p{Lu}+", "abCDe"), (V{"CD"}));
  EXPECT_EQ(find_all("\\p{^L}+", "ab12cd"), (V{"12"}));
  EXPECT_EQ(find_all("\\P{L}+", "ab12cd"), (V{"12"}));
  EXPECT_EQ(find_all("[\\P{L}x]+", "ab1x2cd"), (V{"1x2"}));
  EXPECT_EQ(find_all("\\p{Letter}+", "héllo wörld"), (V{"héllo", "wörld"}));
  EXPECT_EQ(find_all("\\p{Greek}+", "abc αβγ def"), (V{"αβγ"}));
  EXPECT_EQ(find_all("\\p{Han}+|\\p{Hiragana}+", "漢字かなカナ"), (V{"漢字", "かな"}));
  EXPECT_EQ(find_all("\\p{LC}+", "aBc ǅ ʰ"), (V{"aBc", "ǅ"}));
  EXPECT_EQ(find_all("\\p{Cased_Letter}+", "aB ʰ"), (V{"aB"}));
  EXPECT_EQ(find_all("\\p{Punct}+", "a!$b"), (V{"!"}));
  EXPECT_EQ(find_all("[一-龥぀-ゟ゠-ヿ]+", "中文かなカナ한국"), (V{"中文かなカナ"}));
}

TEST(TokenizerRegex, CaseInsensitiveGroups) {
  EXPECT_EQ(find_all("(?i:'s|k)", "'S 'ſ K k 's"), (V{"'S", "'ſ", "K", "k", "'s"}));
  EXPECT_EQ(find_all("(?i)ab|c", "AB C"), (V{"AB", "C"}));
  EXPECT_EQ(find_all("(?i:[a-c]+)d", "ABCd abcD"), (V{"ABCd"}));
  EXPECT_EQ(find_all("(?i:[^a])+", "xAay"), (V{"x", "y"}));
}

TEST(TokenizerRegex, RejectsUnsupportedOrBrokenPatterns) {
  for (const char* p : {"(a", "a)", "[a", "\\1", "(?<=a)b", "(?<!a)b", "[[:alpha:]]", "[a&&b]", "(a*)*", "\\p{Nope}",
                        "*a", "[z-a]", "\\k<n>", "\\p{L&}", "(?x)a", "\\"}) {
    EXPECT_THROW(Regex{p}, std::runtime_error) << p;
  }
}

// A tokenizer.json is checkpoint input: a hostile pattern must fail with an error, never
// overflow the stack (the parser, compiler and look-ahead recurse once per nesting level).
TEST(TokenizerRegex, HostileNestingIsAnErrorNotACrash) {
  const auto nest = [](const std::string& open, int depth) {
    return [&] {
      std::string p;
      for (int i = 0; i < depth; ++i) p += open;
      return p + "a" + std::string(depth, ')');
    }();
  };
  for (const std::string open : {"(", "(?:", "(?=", "(?>", "(?i:"}) {
    EXPECT_NO_THROW(Regex{nest(open, 128)}) << open;
    EXPECT_THROW(Regex{nest(open, 129)}, std::runtime_error) << open;
    EXPECT_THROW(Regex{nest(open, 100000)}, std::runtime_error) << open;
  }
  EXPECT_EQ(find_all(nest("(?:", 128) + "+", "aa b"), (V{"aa"}));
  // Stacked quantifiers: a?? is one (lazy ?), a??? two, ... up to 8.
  EXPECT_NO_THROW(Regex{"a" + std::string(16, '?')});
  EXPECT_THROW(Regex{"a" + std::string(17, '?')}, std::runtime_error);
  EXPECT_THROW(Regex{"a" + std::string(200000, '?')}, std::runtime_error);
  try {
    Regex{std::string(5000, '(')};
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << "the message quotes a long pattern in full";
  }
}

// Exponential backtracking (as in Oniguruma) ends at the per-attempt limit with an error.
TEST(TokenizerRegex, ExponentialBacktrackingStopsAtTheLimit) {
  const std::string text(30, 'a');
  const uint64_t before = regex_work();
  EXPECT_THROW(find_all("(?:a|a){40}b", text), std::runtime_error);
  const uint64_t spent = regex_work() - before;
  EXPECT_GT(spent, 10'000'000u);  // it ran up to the default limit...
  EXPECT_LT(spent, 100'000'000u);  // ...and stopped there (2^30 attempts otherwise)
  // The pattern the fuzzer found (a 492-fold repeat of a nullable lazy body behind \s+).
  EXPECT_THROW(find_all("\\s+(?!\\Sb{2 )p?????{492} \u00b1p4", "=b    cd \u4e00"), std::runtime_error);
  // A lower limit is per thread and per attempt; 0 restores the default.
  EXPECT_EQ(set_regex_backtrack_limit(1000), 10'000'000u);
  const uint64_t before_low = regex_work();
  EXPECT_THROW(find_all("(?:a|a){40}b", text), std::runtime_error);
  EXPECT_LT(regex_work() - before_low, 20'000u);
  // Linear patterns are untouched by it: every attempt backtracks a few steps at most.
  EXPECT_EQ(find_all("(?:a|b)+c|a", std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(set_regex_backtrack_limit(0), 1000u);
  EXPECT_THROW(find_all("(?:a|a){40}b", text), std::runtime_error);
}

TEST(TokenizerRegex, DeepSeekPatternSplitsLikeTokenizers) {
  const std::string p3 =
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
  EXPECT_EQ(find_all(p3, "Hello, world!  How's it?\n\n"),
            (V{"Hello", ",", " world", "!", " ", " How", "'s", " it", "?\n\n"}));
  EXPECT_EQ(find_all(p3, "a\u3000 b"), (V{"a", "\u3000", " b"}));
  EXPECT_EQ(find_all(p3, "\u0301\u0301x"), (V{"\u0301\u0301x"}));
}

TEST(TokenizerUnicode, TablesAndProperties) {
  EXPECT_STREQ(unicode_version(), "16.0.0");
  const char* names[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
                         "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  for (std::size_t i = 0; i < unicode_tables::kCategoryCount; ++i) EXPECT_STREQ(unicode_tables::kCategoryNames[i], names[i]);
  EXPECT_EQ(general_category(U'A'), GeneralCategory::Lu);
  EXPECT_EQ(general_category(U'a'), GeneralCategory::Ll);
  EXPECT_EQ(general_category(U'5'), GeneralCategory::Nd);
  EXPECT_EQ(general_category(U' '), GeneralCategory::Zs);
  EXPECT_EQ(general_category(U'\n'), GeneralCategory::Cc);
  EXPECT_EQ(general_category(0x4E00), GeneralCategory::Lo);
  EXPECT_EQ(general_category(0x0301), GeneralCategory::Mn);
  EXPECT_EQ(general_category(0x1F600), GeneralCategory::So);
  EXPECT_EQ(general_category(0xD800), GeneralCategory::Cs);
  EXPECT_EQ(general_category(0xE000), GeneralCategory::Co);
  EXPECT_EQ(general_category(0x1C89), GeneralCategory::Lu);   // new in Unicode 16.0
  EXPECT_EQ(general_category(0x323B0), GeneralCategory::Cn);  // new in 17.0: unassigned here
  EXPECT_EQ(general_category(0x110000), GeneralCategory::Cn);
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_FALSE(is_white_space(0x200B));
  EXPECT_TRUE(is_regex_word(0xB2));
  EXPECT_FALSE(is_rust_word(0xB2));
  EXPECT_TRUE(is_rust_word(0x200D));
  EXPECT_FALSE(is_regex_word(0x200D));
  EXPECT_TRUE(is_alphabetic(0x24D0));  // circled small a (So, Other_Alphabetic)
  ASSERT_TRUE(script_ranges("Han").has_value());
  EXPECT_EQ(script_ranges("Han")->size(), script_ranges("hani")->size());
  EXPECT_TRUE(script_ranges("Old_Italic").has_value());
  EXPECT_FALSE(script_ranges("Klingon").has_value());
}

TEST(TokenizerUnicode, Utf8StepAndByteLevelMapping) {
  std::size_t len;
  char32_t cp;
  auto step = [&](const std::string& s) {
    return utf8_step(reinterpret_cast<const unsigned char*>(s.data()), s.size(), len, cp);
  };
  EXPECT_EQ(step("\xE4\xB8\x80"), Utf8Step::kValid);
  EXPECT_EQ(cp, 0x4E00u);
  EXPECT_EQ(step("\xE4\xB8"), Utf8Step::kIncomplete);
  EXPECT_EQ(step("\xE4\x41"), Utf8Step::kInvalid);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(step("\xF0\x9F\x98\x41"), Utf8Step::kInvalid);
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(step("\xC1\x81"), Utf8Step::kInvalid);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(byte_level_encode(" the\n"), "ĠtheĊ");
  EXPECT_EQ(byte_level_decode("ĠtheĊ"), std::optional<std::string>(" the\n"));
  EXPECT_FALSE(byte_level_decode("<｜User｜>").has_value());
  for (int b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<uint8_t>(b))), b);
}

}  // namespace
