// The one regular-expression front end: a parser for two dialects into one syntax tree over
// code-point sets, which two back ends compile on their own terms:
//   * Oniguruma (Ruby) syntax, as Hugging Face tokenizers runs the tokenizer.json Split
//     patterns: the tokenizer's backtracking matcher (tokenizer/regex.cpp) compiles it;
//   * ECMA-262, as JSON Schema's `pattern` uses it: the grammar's byte DFA
//     (server/json_regex.cpp) compiles it.
// The dialect decides what the escapes and '.' mean, which constructs exist and which are
// errors; the tree and the character sets are shared.
//
// Oniguruma (no extended mode): literals, escapes \t \n \r \f \v \a \e \xHH \x{H..} \uHHHH \0oo
//   and escaped punctuation; '.' (any character but \n); classes [...] / [^...] with ranges and
//   escapes; \d \D \s \S \w \W \h \H, \p{..} \P{..} \p{^..} with general categories (L, Lu,
//   Letter, Uppercase_Letter, LC, Punct, ...), scripts (Han, Latin, ...), Any, Alphabetic,
//   White_Space/Space, Word, Digit, ASCII; anchors ^ $ (line), \A \z \Z, \b \B; groups (...)
//   (?:...) (?<name>...) (?i:...) (?-i:...) (?i) (?>...); look-ahead (?=...) (?!...);
//   quantifiers ? * + {n} {n,} {,m} {n,m}, lazy (??, *?, ...) and possessive (?+, *+, ++).
//   Case-insensitive sets fold ASCII letters plus U+017F (long s) and U+212A (Kelvin sign), the
//   only non-ASCII characters whose simple case folding is ASCII. Errors: back-references,
//   look-behind, options other than i, POSIX brackets, class intersection, nested classes,
//   groups nested more than 128 deep, more than 8 stacked quantifiers.
// ECMA-262 (JSON Schema): literals, escapes \t \n \r \f \v \0 \xHH \uHHHH (surrogate pairs
//   joined) and escaped punctuation; '.' (any but \n \r U+2028 U+2029); classes with ranges,
//   [] (empty) and [^] (anything); \d \w (ASCII) and \s (ECMA's white space) with their
//   negations; ^ $ (the input's edges); groups (...) (?:...) (?<name>...) (?P<name>...);
//   quantifiers ? * + {n} {n,} {n,m} up to 1000, lazy forms accepted (a DFA has one
//   language). Errors: look-around, inline flags, \b, back-references, other letter escapes,
//   groups nested more than 64 deep.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "regex/unicode.h"

namespace deepinfer::regex {

enum class Dialect : uint8_t { kOniguruma, kEcma262 };

constexpr int kInfinite = -1;  // Node::max of an unbounded repetition
constexpr CategoryMask kAllCategories = (CategoryMask{1} << unicode_tables::kCategoryCount) - 1;

// Inclusive code-point ranges.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Sorted, with overlapping and adjacent ranges merged.
CodeRanges normalized(CodeRanges r);
// The code points (0..U+10FFFF) not in r, normalized.
CodeRanges complement(const CodeRanges& r);

// ---- character sets ----------------------------------------------------------------------

enum class Prop : uint8_t { kSpace, kWord, kAlpha, kHexDigit, kAny };

// One item of a set: a range, a script or a property, possibly negated on its own (\S, \P{..}).
struct ClassAtom {
  enum class Kind : uint8_t { kRange, kScript, kProp } kind = Kind::kRange;
  bool negated = false;
  char32_t lo = 0, hi = 0;
  std::span<const unicode_tables::CodeRange> script;
  Prop prop = Prop::kAny;

  bool matches(char32_t c) const;
};

// A set of code points: general categories plus atoms, the whole possibly negated. Membership
// of ASCII is precomputed (finalize()) so the matcher's common case is one bit test.
struct CharSet {
  uint64_t ascii[2] = {0, 0};  // final membership of U+0000..U+007F (negation applied)
  bool negated = false;
  CategoryMask cats = 0;  // categories in the (un-negated) set
  std::vector<ClassAtom> atoms;

  // Membership before the set's own negation; `cat` is c's general category.
  bool raw_contains(char32_t c, uint8_t cat) const {
    if ((cats >> cat) & 1u) return true;
    for (const ClassAtom& a : atoms) {
      if (a.matches(c)) return true;
    }
    return false;
  }
  bool matches(char32_t c, uint8_t cat) const {
    if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1u;
    return raw_contains(c, cat) != negated;
  }
  void add_range(char32_t lo, char32_t hi);
  void add_prop(Prop p, bool neg);
  // Adds the case variants of everything already in the set (ASCII letters, long s, Kelvin).
  void fold_case();
  // Computes the ASCII bitmap; call after the last change.
  void finalize();
  // Categories of the non-ASCII characters the set can match (a superset).
  CategoryMask non_ascii_categories() const;
  // The set as normalized code-point ranges (for automata over bytes).
  CodeRanges ranges() const;
};

inline bool ClassAtom::matches(char32_t c) const {
  bool in = false;
  switch (kind) {
    case Kind::kRange:
      in = c >= lo && c <= hi;
      break;
    case Kind::kScript: {
      auto it = std::upper_bound(script.begin(), script.end(), c,
                                 [](char32_t v, const unicode_tables::CodeRange& r) { return v < r.first; });
      in = it != script.begin() && c <= (it - 1)->last;
      break;
    }
    case Kind::kProp:
      switch (prop) {
        case Prop::kSpace: in = is_white_space(c); break;
        case Prop::kWord: in = is_regex_word(c); break;
        case Prop::kAlpha: in = is_alphabetic(c); break;
        case Prop::kHexDigit: in = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); break;
        case Prop::kAny: in = true; break;
      }
      break;
  }
  return in != negated;
}

// ---- syntax tree -------------------------------------------------------------------------

// kTextStart / kTextEnd are also ECMA-262's ^ and $ (no multiline mode).
enum class AssertKind : uint8_t { kLineStart, kLineEnd, kTextStart, kTextEnd, kTextEndNewline, kWordBoundary, kNotWordBoundary };

struct Node {
  enum class Kind : uint8_t { kEmpty, kChar, kClass, kConcat, kAlt, kRepeat, kLook, kAtomic, kAssert } kind = Kind::kEmpty;
  char32_t ch = 0;  // kChar
  int set = -1;     // kClass: index into Syntax::sets
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRepeat; max kInfinite: unbounded
  bool greedy = true;    // kRepeat
  bool possessive = false;
  bool negative = false;  // kLook
  AssertKind assert_kind = AssertKind::kTextStart;
};

// Whether n can match the empty string.
bool nullable(const Node& n);

// A parsed pattern. Oniguruma trees are simplified (a one-branch alternation or one-item
// concatenation is its item); ECMA-262 trees keep their shape: the root and every group are
// a kAlt of kConcat branches.
struct Syntax {
  Node root;
  std::vector<CharSet> sets;
};

// A pattern the dialect rejects. what() is the reason alone ("missing ')'"); offset is where
// the parser stood, in code points, or kNoOffset (the pattern is not UTF-8).
struct SyntaxError : std::runtime_error {
  static constexpr std::size_t kNoOffset = static_cast<std::size_t>(-1);
  SyntaxError(const std::string& why, std::size_t at) : std::runtime_error(why), offset(at) {}
  std::size_t offset;
};

// Parses a UTF-8 pattern; throws SyntaxError.
Syntax parse(std::string_view pattern, Dialect dialect);

// A pattern for an error message: quoted, and cut short when long (a hostile one can be huge).
std::string quoted_pattern(std::string_view p);

}  // namespace deepinfer::regex
