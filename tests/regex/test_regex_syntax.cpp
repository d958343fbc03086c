// The shared regex front end (src/regex/syntax.h): one tree for both dialects, and what each
// dialect makes of the same text. The back ends are tested through their users
// (tests/tokenizer/test_tokenizer_regex.cpp, tests/server/test_json_grammar.cpp).
#include <gtest/gtest.h>

#include <string>

#include "regex/syntax.h"

namespace {

using deepinfer::regex::CharSet;
using deepinfer::regex::CodeRanges;
using deepinfer::regex::Dialect;
using deepinfer::regex::general_category;
using deepinfer::regex::Node;
using deepinfer::regex::parse;
using deepinfer::regex::Syntax;
using deepinfer::regex::SyntaxError;

bool set_has(const Syntax& s, const Node& n, char32_t c) {
  EXPECT_EQ(n.kind, Node::Kind::kClass);
  return s.sets.at(static_cast<size_t>(n.set)).matches(c, static_cast<uint8_t>(general_category(c)));
}

// The error a pattern raises in a dialect ("" if it parses).
std::string error_of(const std::string& pattern, Dialect d, size_t* offset = nullptr) {
  try {
    parse(pattern, d);
  } catch (const SyntaxError& e) {
    if (offset) *offset = e.offset;
    return e.what();
  }
  return "";
}

TEST(RegexSyntax, OnigurumaTreesAreSimplifiedEcmaTreesKeepTheirShape) {
  const Syntax onig = parse("ab", Dialect::kOniguruma);
  EXPECT_EQ(onig.root.kind, Node::Kind::kConcat);
  ASSERT_EQ(onig.root.kids.size(), 2u);
  EXPECT_EQ(onig.root.kids[0].kind, Node::Kind::kChar);
  EXPECT_EQ(onig.root.kids[0].ch, U'a');

  // The byte-DFA back end reads the anchors of each top-level branch: root kAlt of kConcat.
  const Syntax ecma = parse("^a|b$", Dialect::kEcma262);
  ASSERT_EQ(ecma.root.kind, Node::Kind::kAlt);
  ASSERT_EQ(ecma.root.kids.size(), 2u);
  for (const Node& branch : ecma.root.kids) EXPECT_EQ(branch.kind, Node::Kind::kConcat);
  EXPECT_EQ(ecma.root.kids[0].kids[0].kind, Node::Kind::kAssert);
  EXPECT_EQ(ecma.root.kids[1].kids[1].kind, Node::Kind::kAssert);
}

TEST(RegexSyntax, DialectsDifferInWhatEscapesAndDotMean) {
  // \d: any decimal digit (Nd) in Oniguruma, ASCII digits in ECMA-262.
  const Syntax onig_d = parse("\\d", Dialect::kOniguruma);
  const Syntax ecma_d = parse("\\d", Dialect::kEcma262);
  EXPECT_TRUE(set_has(onig_d, onig_d.root, U'7'));
  EXPECT_TRUE(set_has(onig_d, onig_d.root, 0x0663));  // ARABIC-INDIC DIGIT THREE
  const Node& ecma_digit = ecma_d.root.kids[0].kids[0];
  EXPECT_TRUE(set_has(ecma_d, ecma_digit, U'7'));
  EXPECT_FALSE(set_has(ecma_d, ecma_digit, 0x0663));
  EXPECT_EQ(ecma_d.sets[0].ranges(), (CodeRanges{{'0', '9'}}));

  // '.': all but \n in Oniguruma; ECMA-262 also leaves out \r and the line / paragraph separators.
  const Syntax onig_dot = parse(".", Dialect::kOniguruma);
  const Syntax ecma_dot = parse(".", Dialect::kEcma262);
  EXPECT_TRUE(set_has(onig_dot, onig_dot.root, U'\r'));
  EXPECT_TRUE(set_has(onig_dot, onig_dot.root, 0x2028));
  EXPECT_FALSE(set_has(onig_dot, onig_dot.root, U'\n'));
  EXPECT_EQ(ecma_dot.sets[0].ranges(), (CodeRanges{{0, 9}, {11, 12}, {14, 0x2027}, {0x202A, 0x10FFFF}}));

  // \s: Oniguruma's is White_Space (U+0085, no U+FEFF), ECMA-262's has U+FEFF and not U+0085.
  const Syntax onig_s = parse("\\s", Dialect::kOniguruma);
  const Syntax ecma_s = parse("[\\s]", Dialect::kEcma262);
  const Node& ecma_space = ecma_s.root.kids[0].kids[0];
  EXPECT_TRUE(set_has(onig_s, onig_s.root, 0x85));
  EXPECT_FALSE(set_has(onig_s, onig_s.root, 0xFEFF));
  EXPECT_FALSE(set_has(ecma_s, ecma_space, 0x85));
  EXPECT_TRUE(set_has(ecma_s, ecma_space, 0xFEFF));
}

TEST(RegexSyntax, CategorySetsBecomeCodePointRanges) {
  // A set built from categories (Oniguruma \p{..}) also yields ranges, for byte automata.
  const Syntax s = parse("[\\p{Nd}x]", Dialect::kOniguruma);
  const CodeRanges r = s.sets[0].ranges();
  auto has = [&](uint32_t c) {
    for (const auto& [lo, hi] : r) {
      if (c >= lo && c <= hi) return true;
    }
    return false;
  };
  EXPECT_TRUE(has('0') && has('9') && has('x') && has(0x0660) && has(0xFF19));
  EXPECT_FALSE(has('a') || has('y') || has(0x41));
  const CodeRanges neg = parse("[^a-c]", Dialect::kOniguruma).sets[0].ranges();
  EXPECT_EQ(neg, (CodeRanges{{0, 'a' - 1}, {'d', 0x10FFFF}}));
}

TEST(RegexSyntax, EachDialectRejectsWhatItDoesNotHave) {
  // Look-ahead, atomic groups and \p exist in Oniguruma only.
  EXPECT_EQ(error_of("(?=a)", Dialect::kOniguruma), "");
  EXPECT_EQ(error_of("(?=a)", Dialect::kEcma262), "lookaround and inline flags are not supported");
  EXPECT_EQ(error_of("\\p{L}", Dialect::kOniguruma), "");
  EXPECT_EQ(error_of("\\p{L}", Dialect::kEcma262), "the escape \\p is not supported");
  EXPECT_EQ(error_of("a\\b", Dialect::kOniguruma), "");
  EXPECT_EQ(error_of("a\\b", Dialect::kEcma262), "\\b (word boundary) is not supported");
  // {3,2}: Oniguruma swaps the bounds, ECMA-262 refuses them.
  EXPECT_EQ(error_of("a{3,2}", Dialect::kOniguruma), "");
  EXPECT_EQ(error_of("a{3,2}", Dialect::kEcma262), "bad repetition bounds");
  // [] is the empty set in ECMA-262; in Oniguruma ']' first is a literal and the class is open.
  EXPECT_EQ(error_of("[]", Dialect::kEcma262), "");
  EXPECT_EQ(error_of("[]", Dialect::kOniguruma), "unterminated character class");
  // Where the parser stood, in code points.
  size_t at = 0;
  EXPECT_EQ(error_of("\xC3\xA9(", Dialect::kOniguruma, &at), "missing ')'");
  EXPECT_EQ(at, 2u);
  EXPECT_EQ(error_of("\xFF", Dialect::kOniguruma, &at), "pattern is not valid UTF-8");
  EXPECT_EQ(at, SyntaxError::kNoOffset);
  EXPECT_EQ(error_of("\xFF", Dialect::kEcma262), "invalid UTF-8");
}

TEST(RegexSyntax, NestingIsCappedPerDialect) {
  auto nest = [](int n) { return std::string(size_t(n), '(') + "a" + std::string(size_t(n), ')'); };
  EXPECT_EQ(error_of(nest(128), Dialect::kOniguruma), "");
  EXPECT_EQ(error_of(nest(129), Dialect::kOniguruma), "groups nested more than 128 deep");
  EXPECT_EQ(error_of(nest(64), Dialect::kEcma262), "");
  EXPECT_EQ(error_of(nest(65), Dialect::kEcma262), "groups nested too deeply");
}

}  // namespace
