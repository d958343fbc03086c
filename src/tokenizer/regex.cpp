#include "tokenizer/regex.h"

#include <algorithm>
#include <limits>
#include <span>
#include <stdexcept>

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

namespace {

constexpr std::size_t kNoMatch = std::numeric_limits<std::size_t>::max();
constexpr int kInfinite = -1;
constexpr std::size_t kMaxProgramSize = 200000;
// The parser, the compiler and the matcher's look-ahead recurse once per nesting level, so a
// hostile tokenizer.json could exhaust the stack with "((((...": group nesting and stacked
// quantifiers (a?????) are capped far above what any real pre-tokenizer pattern uses.
constexpr int kMaxGroupNesting = 128;
constexpr int kMaxStackedQuantifiers = 8;
// Oniguruma's default retry limit per match attempt: a pattern such as (?:a??){40}b backtracks
// exponentially, and past this many backtracking steps one attempt is an error, not a hang.
constexpr uint64_t kDefaultBacktrackLimit = 10'000'000;
constexpr CategoryMask kAllCategories = (CategoryMask{1} << unicode_tables::kCategoryCount) - 1;

// ---- character classes ----------------------------------------------------------------

enum class Prop : uint8_t { kSpace, kWord, kAlpha, kHexDigit, kAny };

struct ClassAtom {
  enum class Kind : uint8_t { kRange, kScript, kProp } kind = Kind::kRange;
  bool negated = false;
  char32_t lo = 0, hi = 0;
  std::span<const unicode_tables::CodeRange> script;
  Prop prop = Prop::kAny;

  bool matches(char32_t c) const {
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
          case Prop::kHexDigit:
            in = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
            break;
          case Prop::kAny: in = true; break;
        }
        break;
    }
    return in != negated;
  }
};

struct CharClass {
  uint64_t ascii[2] = {0, 0};  // final membership of U+0000..U+007F (negation applied)
  bool negated = false;
  CategoryMask cats = 0;       // categories in the (un-negated) set
  std::vector<ClassAtom> atoms;

  bool raw_contains(char32_t c, uint8_t cat) const {
    if ((cats >> cat) & 1u) return true;
    for (const ClassAtom& a : atoms) {
      if (a.matches(c)) return true;
    }
    return false;
  }
  void add_range(char32_t lo, char32_t hi) {
    ClassAtom a;
    a.kind = ClassAtom::Kind::kRange;
    a.lo = lo;
    a.hi = hi;
    atoms.push_back(a);
  }
  void add_prop(Prop p, bool neg) {
    ClassAtom a;
    a.kind = ClassAtom::Kind::kProp;
    a.prop = p;
    a.negated = neg;
    atoms.push_back(a);
  }
  // Adds the case variants of everything already in the set (ASCII letters, long s, Kelvin).
  void fold_case() {
    static constexpr char32_t kGroups[][3] = {{U's', U'S', 0x17F}, {U'k', U'K', 0x212A}};
    std::vector<char32_t> extra;
    for (char32_t c = 'a'; c <= 'z'; ++c) {
      const char32_t u = c - 'a' + 'A';
      const bool has_l = raw_contains(c, static_cast<uint8_t>(general_category(c)));
      const bool has_u = raw_contains(u, static_cast<uint8_t>(general_category(u)));
      if (has_l != has_u) extra.push_back(has_l ? u : c);
    }
    for (const auto& g : kGroups) {
      bool any = false;
      for (char32_t c : g) any = any || raw_contains(c, static_cast<uint8_t>(general_category(c)));
      if (any) extra.insert(extra.end(), std::begin(g), std::end(g));
    }
    for (char32_t c : extra) add_range(c, c);
  }
  void finalize() {
    ascii[0] = ascii[1] = 0;
    for (char32_t c = 0; c < 128; ++c) {
      if (raw_contains(c, static_cast<uint8_t>(general_category(c))) != negated) ascii[c >> 6] |= uint64_t{1} << (c & 63);
    }
  }
  bool matches(char32_t c, uint8_t cat) const {
    if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1u;
    return raw_contains(c, cat) != negated;
  }
  // Categories of the non-ASCII characters the class can match (a superset).
  CategoryMask non_ascii_categories() const {
    if (negated) return kAllCategories;
    CategoryMask m = cats;
    for (const ClassAtom& a : atoms) {
      auto add_span = [&](char32_t lo, char32_t hi) {
        lo = std::max<char32_t>(lo, 128);
        if (lo > hi) return true;
        if (hi - lo > 0x40000) return false;
        for (char32_t c = lo; c <= hi; ++c) m |= category_bit(general_category(c));
        return true;
      };
      if (a.negated || a.kind == ClassAtom::Kind::kProp) return kAllCategories;
      if (a.kind == ClassAtom::Kind::kRange) {
        if (!add_span(a.lo, a.hi)) return kAllCategories;
      } else {
        for (const auto& r : a.script) {
          if (!add_span(r.first, r.last)) return kAllCategories;
        }
      }
    }
    return m;
  }
};

// ---- syntax tree -------------------------------------------------------------------------

enum class AssertKind : uint8_t { kLineStart, kLineEnd, kTextStart, kTextEnd, kTextEndNewline, kWordBoundary, kNotWordBoundary };

struct Node {
  enum class Kind : uint8_t { kEmpty, kChar, kClass, kConcat, kAlt, kRepeat, kLook, kAtomic, kAssert } kind = Kind::kEmpty;
  char32_t ch = 0;
  int cls = -1;
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = 0;
  bool greedy = true;
  bool possessive = false;
  bool negative = false;
  AssertKind assert_kind = AssertKind::kTextStart;
};
using NodeP = std::unique_ptr<Node>;

// A pattern for an error message: quoted, and cut short when long (a hostile one can be huge).
std::string quoted_pattern(std::string_view p) {
  constexpr std::size_t kShown = 160;
  if (p.size() <= kShown) return "\"" + std::string(p) + "\"";
  std::size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80) --cut;  // not inside a code point
  return "\"" + std::string(p.substr(0, cut)) + "\"... (" + std::to_string(p.size()) + " bytes)";
}

NodeP make(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  return n;
}

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
    case Node::Kind::kLook:
    case Node::Kind::kAssert:
      return true;
    case Node::Kind::kChar:
    case Node::Kind::kClass:
      return false;
    case Node::Kind::kConcat:
      for (const auto& k : n.kids) {
        if (!nullable(*k)) return false;
      }
      return true;
    case Node::Kind::kAlt:
      for (const auto& k : n.kids) {
        if (nullable(*k)) return true;
      }
      return false;
    case Node::Kind::kRepeat:
      return n.min == 0 || nullable(*n.kids[0]);
    case Node::Kind::kAtomic:
      return nullable(*n.kids[0]);
  }
  return true;
}

std::u32string decode_pattern(std::string_view pattern) {
  std::u32string out;
  const auto* p = reinterpret_cast<const unsigned char*>(pattern.data());
  std::size_t i = 0;
  while (i < pattern.size()) {
    std::size_t len;
    char32_t cp;
    if (utf8_step(p + i, pattern.size() - i, len, cp) != Utf8Step::kValid) {
      throw std::runtime_error("regex: pattern is not valid UTF-8");
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string normalise_name(std::u32string_view name) {
  std::string out;
  for (char32_t c : name) {
    if (c == '_' || c == ' ' || c == '-') continue;
    if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
    if (c < 128) out.push_back(static_cast<char>(c));
    else out.push_back('?');
  }
  return out;
}

bool category_mask_by_name(const std::string& n, CategoryMask& m) {
  using G = GeneralCategory;
  struct Entry {
    const char* a;
    const char* b;
    CategoryMask mask;
  };
  static const Entry kTable[] = {
      {"l", "letter", kMaskL},
      {"lu", "uppercaseletter", category_bit(G::Lu)},
      {"ll", "lowercaseletter", category_bit(G::Ll)},
      {"lt", "titlecaseletter", category_bit(G::Lt)},
      {"lm", "modifierletter", category_bit(G::Lm)},
      {"lo", "otherletter", category_bit(G::Lo)},
      {"lc", "casedletter", category_bit(G::Lu) | category_bit(G::Ll) | category_bit(G::Lt)},
      {"m", "mark", kMaskM},
      {"mn", "nonspacingmark", category_bit(G::Mn)},
      {"mc", "spacingmark", category_bit(G::Mc)},
      {"me", "enclosingmark", category_bit(G::Me)},
      {"n", "number", kMaskN},
      {"nd", "decimalnumber", category_bit(G::Nd)},
      {"nl", "letternumber", category_bit(G::Nl)},
      {"no", "othernumber", category_bit(G::No)},
      {"p", "punctuation", kMaskP},
      {"punct", "punct", kMaskP},  // Oniguruma's Unicode \p{Punct} is P only
      {"pc", "connectorpunctuation", category_bit(G::Pc)},
      {"pd", "dashpunctuation", category_bit(G::Pd)},
      {"ps", "openpunctuation", category_bit(G::Ps)},
      {"pe", "closepunctuation", category_bit(G::Pe)},
      {"pi", "initialpunctuation", category_bit(G::Pi)},
      {"pf", "finalpunctuation", category_bit(G::Pf)},
      {"po", "otherpunctuation", category_bit(G::Po)},
      {"s", "symbol", kMaskS},
      {"sm", "mathsymbol", category_bit(G::Sm)},
      {"sc", "currencysymbol", category_bit(G::Sc)},
      {"sk", "modifiersymbol", category_bit(G::Sk)},
      {"so", "othersymbol", category_bit(G::So)},
      {"z", "separator", kMaskZ},
      {"zs", "spaceseparator", category_bit(G::Zs)},
      {"zl", "lineseparator", category_bit(G::Zl)},
      {"zp", "paragraphseparator", category_bit(G::Zp)},
      {"c", "other", kMaskC},
      {"cc", "control", category_bit(G::Cc)},
      {"cf", "format", category_bit(G::Cf)},
      {"cs", "surrogate", category_bit(G::Cs)},
      {"co", "privateuse", category_bit(G::Co)},
      {"cn", "unassigned", category_bit(G::Cn)},
  };
  for (const Entry& e : kTable) {
    if (n == e.a || n == e.b) {
      m = e.mask;
      return true;
    }
  }
  return false;
}

// ---- parser -----------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view utf8, std::vector<CharClass>& classes)
      : src_(utf8), p_(decode_pattern(utf8)), classes_(classes) {}

  NodeP parse() {
    NodeP n = parse_alt();
    if (i_ < p_.size()) fail("unmatched ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("regex: " + what + " at offset " + std::to_string(i_) + " in pattern " +
                             quoted_pattern(src_));
  }
  bool eof() const { return i_ >= p_.size(); }
  char32_t peek(std::size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0; }

  NodeP parse_alt() {
    const bool saved_icase = icase_;
    std::vector<NodeP> branches;
    branches.push_back(parse_concat());
    while (!eof() && peek() == '|') {
      ++i_;
      branches.push_back(parse_concat());
    }
    icase_ = saved_icase;
    if (branches.size() == 1) return std::move(branches[0]);
    NodeP n = make(Node::Kind::kAlt);
    n->kids = std::move(branches);
    return n;
  }

  NodeP parse_concat() {
    NodeP n = make(Node::Kind::kConcat);
    while (!eof() && peek() != '|' && peek() != ')') {
      NodeP atom = parse_atom();
      if (!atom) continue;  // an inline option such as (?i)
      atom = parse_quantifiers(std::move(atom));
      n->kids.push_back(std::move(atom));
    }
    if (n->kids.size() == 1) return std::move(n->kids[0]);
    if (n->kids.empty()) return make(Node::Kind::kEmpty);
    return n;
  }

  // Parses {n}, {n,}, {,m}, {n,m} at i_ (which points at '{'); false (i_ unchanged) if the
  // text is not an interval, in which case '{' is a literal, as in Oniguruma.
  bool parse_interval(int& lo, int& hi) {
    std::size_t j = i_ + 1;
    auto number = [&](int& out) {
      std::size_t start = j;
      long v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        v = v * 10 + (p_[j] - '0');
        if (v > 100000) return false;
        ++j;
      }
      out = static_cast<int>(v);
      return j > start;
    };
    int a = 0, b = 0;
    const bool has_a = number(a);
    if (j < p_.size() && p_[j] == '}') {
      if (!has_a) return false;
      lo = hi = a;
      i_ = j + 1;
      return true;
    }
    if (j >= p_.size() || p_[j] != ',') return false;
    ++j;
    const bool has_b = number(b);
    if (j >= p_.size() || p_[j] != '}') return false;
    if (!has_a && !has_b) return false;
    lo = has_a ? a : 0;
    hi = has_b ? b : kInfinite;
    if (hi != kInfinite && hi < lo) std::swap(lo, hi);  // Oniguruma reads {3,2} as {2,3}
    i_ = j + 1;
    return true;
  }

  NodeP parse_quantifiers(NodeP atom) {
    for (int stacked = 0;; ++stacked) {
      if (eof()) return atom;
      int lo, hi;
      bool interval = false;
      const char32_t c = peek();
      if (c == '?') {
        lo = 0, hi = 1, ++i_;
      } else if (c == '*') {
        lo = 0, hi = kInfinite, ++i_;
      } else if (c == '+') {
        lo = 1, hi = kInfinite, ++i_;
      } else if (c == '{' && parse_interval(lo, hi)) {
        interval = true;
      } else {
        return atom;
      }
      if (stacked == kMaxStackedQuantifiers) fail("more than " + std::to_string(kMaxStackedQuantifiers) + " stacked quantifiers");
      NodeP r = make(Node::Kind::kRepeat);
      r->min = lo;
      r->max = hi;
      if (!eof() && peek() == '?') {
        r->greedy = false;
        ++i_;
      } else if (!interval && !eof() && peek() == '+') {
        r->possessive = true;
        ++i_;
      }
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  int add_class(CharClass c) {
    if (icase_) c.fold_case();
    c.finalize();
    classes_.push_back(std::move(c));
    return static_cast<int>(classes_.size() - 1);
  }

  NodeP class_node(CharClass c) {
    NodeP n = make(Node::Kind::kClass);
    n->cls = add_class(std::move(c));
    return n;
  }

  NodeP char_node(char32_t ch) {
    const bool foldable = (ch < 128 && ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')) || ch == 0x17F || ch == 0x212A;
    if (icase_ && foldable) {
      CharClass c;
      c.add_range(ch, ch);
      return class_node(std::move(c));
    }
    NodeP n = make(Node::Kind::kChar);
    n->ch = ch;
    return n;
  }

  NodeP assert_node(AssertKind k) {
    NodeP n = make(Node::Kind::kAssert);
    n->assert_kind = k;
    return n;
  }

  unsigned hex_value(char32_t c) const {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 16;
  }

  // After a backslash: parses an escape that denotes one character. i_ points just past
  // the escape letter `e`.
  char32_t escape_char(char32_t e) {
    switch (e) {
      case 't': return 0x09;
      case 'n': return 0x0A;
      case 'r': return 0x0D;
      case 'f': return 0x0C;
      case 'v': return 0x0B;
      case 'a': return 0x07;
      case 'e': return 0x1B;
      case 'x': {
        char32_t v = 0;
        if (peek() == '{') {
          ++i_;
          int digits = 0;
          while (!eof() && peek() != '}') {
            const unsigned h = hex_value(peek());
            if (h > 15 || ++digits > 8) fail("bad \\x{...} escape");
            v = v * 16 + h;
            ++i_;
          }
          if (eof() || digits == 0) fail("bad \\x{...} escape");
          ++i_;
        } else {
          int digits = 0;
          while (digits < 2 && !eof() && hex_value(peek()) < 16) {
            v = v * 16 + hex_value(peek());
            ++i_;
            ++digits;
          }
          if (digits == 0) fail("bad \\x escape");
        }
        if (v > 0x10FFFF) fail("code point out of range");
        return v;
      }
      case 'u': {
        char32_t v = 0;
        for (int k = 0; k < 4; ++k) {
          const unsigned h = eof() ? 16 : hex_value(peek());
          if (h > 15) fail("bad \\u escape");
          v = v * 16 + h;
          ++i_;
        }
        return v;
      }
      case '0': {
        char32_t v = 0;
        for (int k = 0; k < 2 && !eof() && peek() >= '0' && peek() <= '7'; ++k) {
          v = v * 8 + (peek() - '0');
          ++i_;
        }
        return v;
      }
      default:
        break;
    }
    if (e >= '1' && e <= '9') fail("back-references are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) fail(std::string("unsupported escape \\") + static_cast<char>(e));
    return e;  // escaped punctuation or any other character stands for itself
  }

  // Tries the set escapes (\d \s \w \h \p ...); true if `e` was one, with the items added.
  bool escape_set(char32_t e, CharClass& c) {
    switch (e) {
      case 'd': c.cats |= category_bit(GeneralCategory::Nd); return true;
      case 'D': c.cats |= kAllCategories & ~category_bit(GeneralCategory::Nd); return true;
      case 's': c.add_prop(Prop::kSpace, false); return true;
      case 'S': c.add_prop(Prop::kSpace, true); return true;
      case 'w': c.add_prop(Prop::kWord, false); return true;
      case 'W': c.add_prop(Prop::kWord, true); return true;
      case 'h': c.add_prop(Prop::kHexDigit, false); return true;
      case 'H': c.add_prop(Prop::kHexDigit, true); return true;
      case 'p':
      case 'P': {
        if (peek() != '{') fail("expected '{' after \\p");
        ++i_;
        bool neg = e == 'P';
        if (peek() == '^') {
          neg = !neg;
          ++i_;
        }
        const std::size_t start = i_;
        while (!eof() && peek() != '}') ++i_;
        if (eof()) fail("unterminated \\p{...}");
        const std::string name = normalise_name(std::u32string_view(p_).substr(start, i_ - start));
        ++i_;
        add_property(name, neg, c);
        return true;
      }
      default:
        return false;
    }
  }

  void add_property(const std::string& name, bool neg, CharClass& c) {
    CategoryMask m;
    if (category_mask_by_name(name, m)) {
      c.cats |= neg ? (kAllCategories & ~m) : m;
      return;
    }
    if (name == "any") return c.add_prop(Prop::kAny, neg);
    if (name == "alphabetic" || name == "alpha") return c.add_prop(Prop::kAlpha, neg);
    if (name == "whitespace" || name == "space") return c.add_prop(Prop::kSpace, neg);
    if (name == "word") return c.add_prop(Prop::kWord, neg);
    if (name == "digit") {
      const CategoryMask d = category_bit(GeneralCategory::Nd);
      c.cats |= neg ? (kAllCategories & ~d) : d;
      return;
    }
    if (name == "ascii") {
      ClassAtom a;
      a.kind = ClassAtom::Kind::kRange;
      a.lo = 0;
      a.hi = 0x7F;
      a.negated = neg;
      c.atoms.push_back(a);
      return;
    }
    if (auto s = script_ranges(name)) {
      ClassAtom a;
      a.kind = ClassAtom::Kind::kScript;
      a.script = *s;
      a.negated = neg;
      c.atoms.push_back(a);
      return;
    }
    fail("unknown Unicode property \\p{" + name + "}");
  }

  NodeP parse_class() {
    // i_ is just past '['.
    CharClass c;
    if (peek() == '^') {
      c.negated = true;
      ++i_;
    }
    bool first = true;
    for (;;) {
      if (eof()) fail("unterminated character class");
      char32_t ch = peek();
      if (ch == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (ch == '[') fail(peek(1) == ':' ? "POSIX bracket expressions are not supported" : "nested character classes are not supported");
      if (ch == '&' && peek(1) == '&') fail("character class intersection is not supported");
      ++i_;
      char32_t lo;
      if (ch == '\\') {
        if (eof()) fail("trailing backslash");
        const char32_t e = peek();
        ++i_;
        if (escape_set(e, c)) continue;
        lo = escape_char(e);
      } else {
        lo = ch;
      }
      // A range?
      if (peek() == '-' && i_ + 1 < p_.size() && peek(1) != ']') {
        ++i_;
        char32_t hi = peek();
        ++i_;
        if (hi == '\\') {
          if (eof()) fail("trailing backslash");
          const char32_t e = peek();
          ++i_;
          CharClass probe;
          if (escape_set(e, probe)) fail("a class escape cannot end a range");
          hi = escape_char(e);
        } else if (hi == '[') {
          fail("nested character classes are not supported");
        }
        if (hi < lo) fail("empty range in character class");
        c.add_range(lo, hi);
      } else {
        c.add_range(lo, lo);
      }
    }
    return class_node(std::move(c));
  }

  NodeP parse_group() {
    // i_ is just past '('.
    if (++depth_ > kMaxGroupNesting) fail("groups nested more than " + std::to_string(kMaxGroupNesting) + " deep");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (peek() != '?') {
      NodeP n = parse_alt();
      expect_close();
      return n;
    }
    ++i_;
    const char32_t k = peek();
    if (k == ':') {
      ++i_;
      NodeP n = parse_alt();
      expect_close();
      return n;
    }
    if (k == '=' || k == '!') {
      ++i_;
      NodeP n = make(Node::Kind::kLook);
      n->negative = k == '!';
      n->kids.push_back(parse_alt());
      expect_close();
      return n;
    }
    if (k == '>') {
      ++i_;
      NodeP n = make(Node::Kind::kAtomic);
      n->kids.push_back(parse_alt());
      expect_close();
      return n;
    }
    if (k == '<' && (peek(1) == '=' || peek(1) == '!')) fail("look-behind is not supported");
    if (k == '<' || k == '\'') {
      const char32_t close = k == '<' ? '>' : '\'';
      ++i_;
      while (!eof() && peek() != close) ++i_;
      if (eof()) fail("unterminated group name");
      ++i_;
      NodeP n = parse_alt();
      expect_close();
      return n;
    }
    // Options: (?i) (?-i) (?i:...) (?i-m:...); only i has an effect (m and x are rejected).
    bool on = true;
    bool new_icase = icase_;
    while (!eof() && peek() != ':' && peek() != ')') {
      const char32_t o = peek();
      if (o == '-') {
        on = false;
      } else if (o == 'i') {
        new_icase = on;
      } else {
        fail(std::string("unsupported group option '") + static_cast<char>(o < 128 ? o : '?') + "'");
      }
      ++i_;
    }
    if (eof()) fail("unterminated group");
    if (peek() == ')') {  // (?i): applies to the rest of the enclosing group
      ++i_;
      icase_ = new_icase;
      return nullptr;
    }
    ++i_;  // ':'
    const bool saved = icase_;
    icase_ = new_icase;
    NodeP n = parse_alt();
    icase_ = saved;
    expect_close();
    return n;
  }

  void expect_close() {
    if (eof() || peek() != ')') fail("missing ')'");
    ++i_;
  }

  NodeP parse_atom() {
    const char32_t c = peek();
    ++i_;
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return parse_class();
      case '.': {
        CharClass cc;
        cc.negated = true;
        cc.add_range('\n', '\n');
        return class_node(std::move(cc));
      }
      case '^':
        return assert_node(AssertKind::kLineStart);
      case '$':
        return assert_node(AssertKind::kLineEnd);
      case '*':
      case '+':
      case '?':
        fail("quantifier without a target");
      case '\\': {
        if (eof()) fail("trailing backslash");
        const char32_t e = peek();
        ++i_;
        switch (e) {
          case 'A': return assert_node(AssertKind::kTextStart);
          case 'z': return assert_node(AssertKind::kTextEnd);
          case 'Z': return assert_node(AssertKind::kTextEndNewline);
          case 'b': return assert_node(AssertKind::kWordBoundary);
          case 'B': return assert_node(AssertKind::kNotWordBoundary);
          default: break;
        }
        CharClass cc;
        if (escape_set(e, cc)) return class_node(std::move(cc));
        return char_node(escape_char(e));
      }
      default:
        return char_node(c);
    }
  }

  std::string_view src_;
  std::u32string p_;
  std::size_t i_ = 0;
  bool icase_ = false;
  int depth_ = 0;  // groups open at i_
  std::vector<CharClass>& classes_;
};

// ---- program ----------------------------------------------------------------------------

enum class Op : uint8_t { kChar, kClass, kRep, kSplit, kJmp, kLook, kAtomic, kAssert, kMatch };

struct Inst {
  Op op;
  bool flag = false;  // kRep: greedy; kLook: negative
  bool possessive = false;
  AssertKind assert_kind = AssertKind::kTextStart;
  char32_t ch = 0;
  int32_t x = 0;  // kClass/kRep: class; kSplit/kJmp: preferred target; kLook/kAtomic: continuation
  int32_t y = 0;  // kSplit: alternative target
  int32_t min = 0, max = 0;
};

struct FirstSet {
  uint64_t ascii[2] = {0, 0};
  CategoryMask cats = 0;
  void add(const FirstSet& o) {
    ascii[0] |= o.ascii[0];
    ascii[1] |= o.ascii[1];
    cats |= o.cats;
  }
};

}  // namespace

struct Regex::Program {
  std::string pattern;  // as given (also for error messages)
  std::vector<Inst> code;
  std::vector<CharClass> classes;
  FirstSet first;
  bool can_be_empty = false;

  int emit(Inst in) {
    if (code.size() >= kMaxProgramSize) throw std::runtime_error("regex: pattern too large after expanding repetitions");
    code.push_back(in);
    return static_cast<int>(code.size() - 1);
  }

  int class_of_char(char32_t ch) {
    CharClass c;
    c.add_range(ch, ch);
    c.finalize();
    classes.push_back(std::move(c));
    return static_cast<int>(classes.size() - 1);
  }

  void compile(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kEmpty:
        return;
      case Node::Kind::kChar: {
        Inst in{Op::kChar};
        in.ch = n.ch;
        emit(in);
        return;
      }
      case Node::Kind::kClass: {
        Inst in{Op::kClass};
        in.x = n.cls;
        emit(in);
        return;
      }
      case Node::Kind::kConcat:
        for (const auto& k : n.kids) compile(*k);
        return;
      case Node::Kind::kAlt: {
        std::vector<int> jumps;
        for (std::size_t b = 0; b < n.kids.size(); ++b) {
          if (b + 1 < n.kids.size()) {
            const int split = emit(Inst{Op::kSplit});
            code[split].x = split + 1;
            compile(*n.kids[b]);
            jumps.push_back(emit(Inst{Op::kJmp}));
            code[split].y = static_cast<int>(code.size());
          } else {
            compile(*n.kids[b]);
          }
        }
        for (int j : jumps) code[j].x = static_cast<int>(code.size());
        return;
      }
      case Node::Kind::kRepeat:
        compile_repeat(n);
        return;
      case Node::Kind::kLook:
      case Node::Kind::kAtomic: {
        Inst in{n.kind == Node::Kind::kLook ? Op::kLook : Op::kAtomic};
        in.flag = n.negative;
        const int at = emit(in);
        compile(*n.kids[0]);
        emit(Inst{Op::kMatch});
        code[at].x = static_cast<int>(code.size());
        return;
      }
      case Node::Kind::kAssert: {
        Inst in{Op::kAssert};
        in.assert_kind = n.assert_kind;
        emit(in);
        return;
      }
    }
  }

  void compile_repeat(const Node& n) {
    const Node& body = *n.kids[0];
    if (body.kind == Node::Kind::kChar || body.kind == Node::Kind::kClass) {
      Inst in{Op::kRep};
      in.x = body.kind == Node::Kind::kClass ? body.cls : class_of_char(body.ch);
      in.min = n.min;
      in.max = n.max;
      in.flag = n.greedy;
      in.possessive = n.possessive;
      emit(in);
      return;
    }
    if (n.possessive) {  // X*+ is (?>X*)
      const int at = emit(Inst{Op::kAtomic});
      compile_counted(body, n.min, n.max, true);
      emit(Inst{Op::kMatch});
      code[at].x = static_cast<int>(code.size());
      return;
    }
    compile_counted(body, n.min, n.max, n.greedy);
  }

  void compile_counted(const Node& body, int min, int max, bool greedy) {
    for (int k = 0; k < min; ++k) compile(body);
    if (max == kInfinite) {
      if (nullable(body)) {
        throw std::runtime_error("regex: unbounded repetition of a sub-expression that can match empty is not supported");
      }
      const int split = emit(Inst{Op::kSplit});
      compile(body);
      Inst j{Op::kJmp};
      j.x = split;
      emit(j);
      const int out = static_cast<int>(code.size());
      code[split].x = greedy ? split + 1 : out;
      code[split].y = greedy ? out : split + 1;
      return;
    }
    std::vector<int> splits;
    for (int k = min; k < max; ++k) {
      splits.push_back(emit(Inst{Op::kSplit}));
      compile(body);
    }
    const int out = static_cast<int>(code.size());
    for (int s : splits) {
      code[s].x = greedy ? s + 1 : out;
      code[s].y = greedy ? out : s + 1;
    }
  }

  // First-character superset and nullability, for skipping hopeless start positions.
  bool first_of(const Node& n, FirstSet& f) const {  // returns nullable
    switch (n.kind) {
      case Node::Kind::kEmpty:
      case Node::Kind::kAssert:
      case Node::Kind::kLook:
        return true;
      case Node::Kind::kChar:
        if (n.ch < 128) f.ascii[n.ch >> 6] |= uint64_t{1} << (n.ch & 63);
        else f.cats |= category_bit(general_category(n.ch));
        return false;
      case Node::Kind::kClass: {
        const CharClass& c = classes[n.cls];
        f.ascii[0] |= c.ascii[0];
        f.ascii[1] |= c.ascii[1];
        f.cats |= c.non_ascii_categories();
        return false;
      }
      case Node::Kind::kConcat:
        for (const auto& k : n.kids) {
          if (!first_of(*k, f)) return false;
        }
        return true;
      case Node::Kind::kAlt: {
        bool any = false;
        for (const auto& k : n.kids) any = first_of(*k, f) || any;
        return any;
      }
      case Node::Kind::kRepeat: {
        const bool inner = first_of(*n.kids[0], f);
        return inner || n.min == 0;
      }
      case Node::Kind::kAtomic:
        return first_of(*n.kids[0], f);
    }
    return true;
  }
};

namespace {

struct Frame {
  enum Kind : uint8_t { kPlain, kRepGreedy, kRepLazy } kind;
  int32_t pc;
  std::size_t pos;    // kPlain: resume position; kRep*: base (greedy) / current end (lazy)
  std::size_t count;  // kRepGreedy: next count to try; kRepLazy: count matched so far
  std::size_t min;
};

thread_local std::vector<Frame> tl_stack;
thread_local uint64_t tl_work = 0;  // regex_work(): instructions run + characters tested
thread_local uint64_t tl_backtrack_limit = kDefaultBacktrackLimit;
thread_local uint64_t tl_backtracks_left = 0;  // of the current match attempt

[[noreturn]] void backtrack_limit_exceeded(const Regex::Program& P) {
  throw std::runtime_error("regex: a match attempt took more than " + std::to_string(tl_backtrack_limit) +
                           " backtracking steps (the pattern backtracks exponentially on this text): " +
                           quoted_pattern(P.pattern));
}

inline bool word_at(const RegexSubject& s, std::size_t pos) {
  return pos >= s.begin && pos < s.end && is_regex_word(s.cps[pos]);
}

std::size_t run(const Regex::Program& P, const RegexSubject& s, int32_t pc, std::size_t pos, std::vector<Frame>& st) {
  const std::size_t base = st.size();
  const char32_t* cps = s.cps;
  const uint8_t* cats = s.cats;
  uint64_t work = 0;  // added to tl_work on the way out
  struct Flush {
    uint64_t& w;
    ~Flush() { tl_work += w; }
  } flush{work};
  for (;;) {
    ++work;
    const Inst& in = P.code[pc];
    switch (in.op) {
      case Op::kChar:
        if (pos < s.end && cps[pos] == in.ch) {
          ++pos;
          ++pc;
          continue;
        }
        goto fail;
      case Op::kClass:
        if (pos < s.end && P.classes[in.x].matches(cps[pos], cats[pos])) {
          ++pos;
          ++pc;
          continue;
        }
        goto fail;
      case Op::kRep: {
        const CharClass& c = P.classes[in.x];
        const std::size_t limit =
            in.max == kInfinite ? s.end : std::min<std::size_t>(s.end, pos + static_cast<std::size_t>(in.max));
        const std::size_t min = static_cast<std::size_t>(in.min);
        if (in.flag) {
          std::size_t k = 0;
          while (pos + k < limit && c.matches(cps[pos + k], cats[pos + k])) ++k;
          work += k;
          if (k < min) goto fail;
          if (!in.possessive && k > min) st.push_back(Frame{Frame::kRepGreedy, pc + 1, pos, k - 1, min});
          pos += k;
          ++pc;
          continue;
        }
        std::size_t k = 0;
        while (k < min && pos + k < limit && c.matches(cps[pos + k], cats[pos + k])) ++k;
        work += k;
        if (k < min) goto fail;
        pos += k;
        if (!in.possessive && (in.max == kInfinite || k < static_cast<std::size_t>(in.max))) {
          st.push_back(Frame{Frame::kRepLazy, pc, pos, k, 0});
        }
        ++pc;
        continue;
      }
      case Op::kSplit:
        st.push_back(Frame{Frame::kPlain, in.y, pos, 0, 0});
        pc = in.x;
        continue;
      case Op::kJmp:
        pc = in.x;
        continue;
      case Op::kLook: {
        const std::size_t r = run(P, s, pc + 1, pos, st);
        if ((r != kNoMatch) == in.flag) goto fail;
        pc = in.x;
        continue;
      }
      case Op::kAtomic: {
        const std::size_t r = run(P, s, pc + 1, pos, st);
        if (r == kNoMatch) goto fail;
        pos = r;
        pc = in.x;
        continue;
      }
      case Op::kAssert: {
        bool ok = false;
        switch (in.assert_kind) {
          case AssertKind::kLineStart: ok = pos == s.begin || cps[pos - 1] == '\n'; break;
          case AssertKind::kLineEnd: ok = pos == s.end || cps[pos] == '\n'; break;
          case AssertKind::kTextStart: ok = pos == s.begin; break;
          case AssertKind::kTextEnd: ok = pos == s.end; break;
          case AssertKind::kTextEndNewline: ok = pos == s.end || (pos + 1 == s.end && cps[pos] == '\n'); break;
          case AssertKind::kWordBoundary: ok = word_at(s, pos - 1) != word_at(s, pos); break;
          case AssertKind::kNotWordBoundary: ok = word_at(s, pos - 1) == word_at(s, pos); break;
        }
        if (!ok) goto fail;
        ++pc;
        continue;
      }
      case Op::kMatch:
        st.resize(base);
        return pos;
    }
  fail:
    for (;;) {
      ++work;
      if (st.size() == base) return kNoMatch;
      if (--tl_backtracks_left == 0) backtrack_limit_exceeded(P);
      Frame& f = st.back();
      if (f.kind == Frame::kPlain) {
        pc = f.pc;
        pos = f.pos;
        st.pop_back();
        break;
      }
      if (f.kind == Frame::kRepGreedy) {
        pc = f.pc;
        pos = f.pos + f.count;
        if (f.count > f.min) --f.count;
        else st.pop_back();
        break;
      }
      // Lazy: take one more character if possible.
      const Inst& ri = P.code[f.pc];
      const std::size_t p = f.pos;
      if (p < s.end && P.classes[ri.x].matches(cps[p], cats[p]) &&
          (ri.max == kInfinite || f.count < static_cast<std::size_t>(ri.max))) {
        f.pos = p + 1;
        ++f.count;
        pos = p + 1;
        pc = f.pc + 1;
        if (ri.max != kInfinite && f.count >= static_cast<std::size_t>(ri.max)) st.pop_back();
        break;
      }
      st.pop_back();
    }
  }
}

}  // namespace

Regex::Regex(std::string_view pattern) : prog_(std::make_unique<Program>()) {
  prog_->pattern = pattern;
  Parser parser(pattern, prog_->classes);
  NodeP root = parser.parse();
  prog_->compile(*root);
  prog_->emit(Inst{Op::kMatch});
  FirstSet f;
  prog_->can_be_empty = prog_->first_of(*root, f);
  prog_->first = f;
}

const std::string& Regex::pattern() const { return prog_->pattern; }

uint64_t regex_work() { return tl_work; }

uint64_t set_regex_backtrack_limit(uint64_t limit) {
  const uint64_t old = tl_backtrack_limit;
  tl_backtrack_limit = limit == 0 ? kDefaultBacktrackLimit : limit;
  return old;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::size_t Regex::match_at(const RegexSubject& s, std::size_t pos) const {
  std::vector<Frame>& st = tl_stack;
  st.clear();
  tl_backtracks_left = tl_backtrack_limit;
  const std::size_t r = run(*prog_, s, 0, pos, st);
  return r;
}

bool Regex::search(const RegexSubject& s, std::size_t from, std::size_t& match_begin, std::size_t& match_end) const {
  const Program& P = *prog_;
  std::vector<Frame>& st = tl_stack;
  st.clear();
  const bool filter = !P.can_be_empty;
  for (std::size_t start = from; start <= s.end; ++start) {
    ++tl_work;
    if (start == s.end) {
      if (!P.can_be_empty) return false;
    } else if (filter) {
      const char32_t c = s.cps[start];
      const bool maybe = c < 128 ? ((P.first.ascii[c >> 6] >> (c & 63)) & 1u) : ((P.first.cats >> s.cats[start]) & 1u);
      if (!maybe) continue;
    }
    tl_backtracks_left = tl_backtrack_limit;
    const std::size_t e = run(P, s, 0, start, st);
    if (e != kNoMatch) {
      match_begin = start;
      match_end = e;
      return true;
    }
  }
  return false;
}

}  // namespace deepinfer::tokenizer
