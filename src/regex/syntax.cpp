#include "regex/syntax.h"

#include <algorithm>
#include <optional>

namespace deepinfer::regex {

namespace {

// The parser recurses once per nesting level, so a hostile pattern could exhaust the stack
// with "((((...": nesting and stacked quantifiers (a?????) are capped far above real use.
constexpr int kMaxGroupNestingOniguruma = 128;
constexpr int kMaxGroupNestingEcma = 64;
constexpr int kMaxStackedQuantifiers = 8;  // Oniguruma
constexpr int kMaxEcmaRepeatCount = 1000;

// ECMA-262's \d \w \s (ASCII digits and word characters; its own white space list).
const CodeRanges kEcmaDigit = {{'0', '9'}};
const CodeRanges kEcmaWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodeRanges kEcmaSpace = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                               {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

unsigned hex_digit(char32_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 16;
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

Node make(Node::Kind k) {
  Node n;
  n.kind = k;
  return n;
}

// ---- parser ------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view utf8, Dialect dialect) : onig_(dialect == Dialect::kOniguruma) {
    const auto* p = reinterpret_cast<const unsigned char*>(utf8.data());
    for (std::size_t i = 0; i < utf8.size();) {
      std::size_t len;
      char32_t cp;
      if (utf8_step(p + i, utf8.size() - i, len, cp) != Utf8Step::kValid) {
        throw SyntaxError(onig_ ? "pattern is not valid UTF-8" : "invalid UTF-8", SyntaxError::kNoOffset);
      }
      p_.push_back(cp);
      i += len;
    }
  }

  Syntax parse() {
    Node root = parse_alt();
    if (i_ < p_.size()) fail(onig_ ? "unmatched ')'" : "unbalanced ')'");
    return Syntax{std::move(root), std::move(sets_)};
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw SyntaxError(why, i_); }
  bool eof() const { return i_ >= p_.size(); }
  char32_t peek(std::size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0; }

  // ---- structure (both dialects) ----

  Node parse_alt() {
    const bool saved_icase = icase_;
    Node n = make(Node::Kind::kAlt);
    n.kids.push_back(parse_concat());
    while (!eof() && peek() == '|') {
      ++i_;
      n.kids.push_back(parse_concat());
    }
    icase_ = saved_icase;
    if (onig_ && n.kids.size() == 1) return std::move(n.kids[0]);
    return n;
  }

  Node parse_concat() {
    Node n = make(Node::Kind::kConcat);
    while (!eof() && peek() != '|' && peek() != ')') {
      if (!onig_) {
        n.kids.push_back(parse_ecma_quantifiers(parse_ecma_atom()));
        continue;
      }
      std::optional<Node> atom = parse_atom();
      if (!atom) continue;  // an inline option such as (?i)
      n.kids.push_back(parse_quantifiers(std::move(*atom)));
    }
    if (onig_) {
      if (n.kids.size() == 1) return std::move(n.kids[0]);
      if (n.kids.empty()) return make(Node::Kind::kEmpty);
    }
    return n;
  }

  void expect_close() {
    if (eof() || peek() != ')') fail("missing ')'");
    ++i_;
  }

  int add_set(CharSet c) {
    if (icase_) c.fold_case();
    c.finalize();
    sets_.push_back(std::move(c));
    return static_cast<int>(sets_.size() - 1);
  }

  Node set_node(CharSet c) {
    Node n = make(Node::Kind::kClass);
    n.set = add_set(std::move(c));
    return n;
  }

  Node ranges_node(const CodeRanges& r) {
    CharSet c;
    for (const auto& [lo, hi] : r) c.add_range(lo, hi);
    return set_node(std::move(c));
  }

  Node char_node(char32_t ch) {
    const bool foldable = (ch < 128 && ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')) || ch == 0x17F || ch == 0x212A;
    if (icase_ && foldable) {
      CharSet c;
      c.add_range(ch, ch);
      return set_node(std::move(c));
    }
    Node n = make(Node::Kind::kChar);
    n.ch = ch;
    return n;
  }

  Node assert_node(AssertKind k) {
    Node n = make(Node::Kind::kAssert);
    n.assert_kind = k;
    return n;
  }

  // ---- Oniguruma ----

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

  Node parse_quantifiers(Node atom) {
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
      Node r = make(Node::Kind::kRepeat);
      r.min = lo;
      r.max = hi;
      if (!eof() && peek() == '?') {
        r.greedy = false;
        ++i_;
      } else if (!interval && !eof() && peek() == '+') {
        r.possessive = true;
        ++i_;
      }
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
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
            const unsigned h = hex_digit(peek());
            if (h > 15 || ++digits > 8) fail("bad \\x{...} escape");
            v = v * 16 + h;
            ++i_;
          }
          if (eof() || digits == 0) fail("bad \\x{...} escape");
          ++i_;
        } else {
          int digits = 0;
          while (digits < 2 && !eof() && hex_digit(peek()) < 16) {
            v = v * 16 + hex_digit(peek());
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
          const unsigned h = eof() ? 16 : hex_digit(peek());
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
  bool escape_set(char32_t e, CharSet& c) {
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

  void add_property(const std::string& name, bool neg, CharSet& c) {
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

  Node parse_class() {
    // i_ is just past '['.
    CharSet c;
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
          CharSet probe;
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
    return set_node(std::move(c));
  }

  std::optional<Node> parse_group() {
    // i_ is just past '('.
    if (++depth_ > kMaxGroupNestingOniguruma) fail("groups nested more than " + std::to_string(kMaxGroupNestingOniguruma) + " deep");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (peek() != '?') {
      Node n = parse_alt();
      expect_close();
      return n;
    }
    ++i_;
    const char32_t k = peek();
    if (k == ':') {
      ++i_;
      Node n = parse_alt();
      expect_close();
      return n;
    }
    if (k == '=' || k == '!' || k == '>') {
      ++i_;
      Node n = make(k == '>' ? Node::Kind::kAtomic : Node::Kind::kLook);
      n.negative = k == '!';
      n.kids.push_back(parse_alt());
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
      Node n = parse_alt();
      expect_close();
      return n;
    }
    // Options: (?i) (?-i) (?i:...); only i is supported.
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
      return std::nullopt;
    }
    ++i_;  // ':'
    const bool saved = icase_;
    icase_ = new_icase;
    Node n = parse_alt();
    icase_ = saved;
    expect_close();
    return n;
  }

  std::optional<Node> parse_atom() {
    const char32_t c = peek();
    ++i_;
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return parse_class();
      case '.': {
        CharSet cc;
        cc.negated = true;
        cc.add_range('\n', '\n');
        return set_node(std::move(cc));
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
        CharSet cc;
        if (escape_set(e, cc)) return set_node(std::move(cc));
        return char_node(escape_char(e));
      }
      default:
        return char_node(c);
    }
  }

  // ---- ECMA-262 ----

  uint32_t ecma_hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const unsigned h = eof() ? 16 : hex_digit(peek());
      if (h > 15) fail("bad hex escape");
      v = v * 16 + h;
      ++i_;
    }
    return v;
  }

  // After a backslash: a set (\d ...) or one character (a one-range set). in_class: \b is a
  // backspace.
  CodeRanges ecma_escape(bool in_class) {
    if (eof()) fail("trailing backslash");
    const char32_t c = p_[i_++];
    switch (c) {
      case 'd': return kEcmaDigit;
      case 'D': return complement(kEcmaDigit);
      case 'w': return kEcmaWord;
      case 'W': return complement(kEcmaWord);
      case 's': return kEcmaSpace;
      case 'S': return complement(kEcmaSpace);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': {
        const uint32_t v = ecma_hex(2);
        return {{v, v}};
      }
      case 'u': {
        uint32_t v = ecma_hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && i_ + 1 < p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
          i_ += 2;
          const uint32_t low = ecma_hex(4);
          if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate escape");
          v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
        }
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{8, 8}};
        fail("\\b (word boundary) is not supported");
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9'))
          fail(std::string("the escape \\") + static_cast<char>(c) + " is not supported");
        return {{c, c}};
    }
  }

  static bool one_char(const CodeRanges& r) { return r.size() == 1 && r[0].first == r[0].second; }

  // i_ is just past '['. "[]" is the empty set, "[^]" any character.
  Node parse_ecma_class() {
    CharSet c;
    if (!eof() && peek() == '^') c.negated = true, ++i_;
    for (;;) {
      if (eof()) fail("unterminated [");
      if (peek() == ']') break;
      CodeRanges low;
      if (peek() == '\\') {
        ++i_;
        low = ecma_escape(true);
      } else {
        low = {{p_[i_], p_[i_]}};
        ++i_;
      }
      if (one_char(low) && i_ + 1 < p_.size() && peek() == '-' && peek(1) != ']') {
        ++i_;
        CodeRanges high;
        if (peek() == '\\') {
          ++i_;
          high = ecma_escape(true);
        } else {
          high = {{p_[i_], p_[i_]}};
          ++i_;
        }
        if (!one_char(high) || high[0].first < low[0].first) fail("bad character range");
        c.add_range(low[0].first, high[0].first);
      } else {
        for (const auto& [lo, hi] : low) c.add_range(lo, hi);
      }
    }
    ++i_;  // ']'
    return set_node(std::move(c));
  }

  Node parse_ecma_atom() {
    const char32_t c = peek();
    if (c == '{') {  // a '{' that does not start a quantifier is a literal
      int lo, hi;
      if (ecma_quantifier(lo, hi)) fail("nothing to repeat before '{'");
      ++i_;
      return char_node('{');
    }
    if (c == '(') {
      ++i_;
      if (!eof() && peek() == '?') {
        ++i_;
        if (!eof() && peek() == ':') {
          ++i_;
        } else if (!eof() && (peek() == '<' || peek() == 'P') && i_ + 1 < p_.size() && peek(1) != '=' && peek(1) != '!') {
          if (peek() == 'P') ++i_;
          while (!eof() && peek() != '>') ++i_;
          if (eof()) fail("bad group name");
          ++i_;
        } else {
          fail("lookaround and inline flags are not supported");
        }
      }
      if (++depth_ > kMaxGroupNestingEcma) fail("groups nested too deeply");
      Node inner = parse_alt();
      --depth_;
      if (eof() || peek() != ')') fail("missing ')'");
      ++i_;
      return inner;
    }
    ++i_;
    switch (c) {
      case '[': return parse_ecma_class();
      case '.': {
        CharSet any_but_newline;
        any_but_newline.negated = true;
        for (const auto& [lo, hi] : CodeRanges{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}) any_but_newline.add_range(lo, hi);
        return set_node(std::move(any_but_newline));
      }
      case '^': return assert_node(AssertKind::kTextStart);
      case '$': return assert_node(AssertKind::kTextEnd);
      case '\\': {
        const CodeRanges r = ecma_escape(false);
        return one_char(r) ? char_node(r[0].first) : ranges_node(r);
      }
      case '*':
      case '+':
      case '?': fail(std::string("nothing to repeat before '") + static_cast<char>(c) + "'");
      default: return char_node(c);
    }
  }

  // A quantifier at i_: true (i_ past it, and past a lazy '?') or false (i_ unchanged; a '{'
  // that is no quantifier is a literal).
  bool ecma_quantifier(int& lo, int& hi) {
    const char32_t c = peek();
    if (c == '*') lo = 0, hi = kInfinite;
    else if (c == '+') lo = 1, hi = kInfinite;
    else if (c == '?') lo = 0, hi = 1;
    else if (c == '{') {
      std::size_t j = i_ + 1;
      auto number = [&](int& v) {
        const std::size_t s = j;
        v = 0;
        while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && v <= 100000) v = v * 10 + static_cast<int>(p_[j++] - '0');
        return j > s;
      };
      if (!number(lo)) return false;
      hi = lo;
      if (j < p_.size() && p_[j] == ',') {
        ++j;
        if (!number(hi)) hi = kInfinite;
      }
      if (j >= p_.size() || p_[j] != '}') return false;
      if (hi != kInfinite && hi < lo) fail("bad repetition bounds");
      if (lo > kMaxEcmaRepeatCount || hi > kMaxEcmaRepeatCount) fail("repetition counts above 1000 are not supported");
      i_ = j;
    } else {
      return false;
    }
    ++i_;
    if (!eof() && peek() == '?') ++i_;  // lazy: the same language
    return true;
  }

  Node parse_ecma_quantifiers(Node atom) {
    int lo, hi;
    while (!eof() && ecma_quantifier(lo, hi)) {
      if (atom.kind == Node::Kind::kAssert) fail("a quantifier after an anchor");
      Node r = make(Node::Kind::kRepeat);
      r.min = lo;
      r.max = hi;
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  const bool onig_;
  std::u32string p_;
  std::size_t i_ = 0;
  bool icase_ = false;  // Oniguruma (?i)
  int depth_ = 0;       // groups open at i_
  std::vector<CharSet> sets_;
};

}  // namespace

CodeRanges normalized(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  return out;
}

CodeRanges complement(const CodeRanges& r) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& x : normalized(r)) {
    if (x.first > next) out.push_back({next, x.first - 1});
    next = x.second + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

void CharSet::add_range(char32_t lo, char32_t hi) {
  ClassAtom a;
  a.kind = ClassAtom::Kind::kRange;
  a.lo = lo;
  a.hi = hi;
  atoms.push_back(a);
}

void CharSet::add_prop(Prop p, bool neg) {
  ClassAtom a;
  a.kind = ClassAtom::Kind::kProp;
  a.prop = p;
  a.negated = neg;
  atoms.push_back(a);
}

void CharSet::fold_case() {
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

void CharSet::finalize() {
  ascii[0] = ascii[1] = 0;
  for (char32_t c = 0; c < 128; ++c) {
    if (raw_contains(c, static_cast<uint8_t>(general_category(c))) != negated) ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
}

CategoryMask CharSet::non_ascii_categories() const {
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

CodeRanges CharSet::ranges() const {
  CodeRanges r;
  const bool plain_ranges = cats == 0 && std::all_of(atoms.begin(), atoms.end(), [](const ClassAtom& a) {
                              return a.kind == ClassAtom::Kind::kRange && !a.negated;
                            });
  if (plain_ranges) {
    for (const ClassAtom& a : atoms) r.push_back({a.lo, a.hi});
    r = normalized(std::move(r));
  } else {  // categories, scripts or properties: test every code point
    for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
      if (!raw_contains(c, static_cast<uint8_t>(general_category(c)))) continue;
      if (!r.empty() && r.back().second + 1 == c) r.back().second = c;
      else r.push_back({c, c});
    }
  }
  return negated ? complement(r) : r;
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
        if (!nullable(k)) return false;
      }
      return true;
    case Node::Kind::kAlt:
      for (const auto& k : n.kids) {
        if (nullable(k)) return true;
      }
      return false;
    case Node::Kind::kRepeat:
      return n.min == 0 || nullable(n.kids[0]);
    case Node::Kind::kAtomic:
      return nullable(n.kids[0]);
  }
  return true;
}

Syntax parse(std::string_view pattern, Dialect dialect) { return Parser(pattern, dialect).parse(); }

std::string quoted_pattern(std::string_view p) {
  constexpr std::size_t kShown = 160;
  std::size_t cut = p.size();
  if (p.size() > kShown) {
    cut = kShown;
    while (cut > 0 && (static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80) --cut;  // not inside a code point
  }
  // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) about "\"" + std::string(...).
  std::string out(1, '"');
  out.append(p.substr(0, cut));
  out.push_back('"');
  if (cut < p.size()) out += "... (" + std::to_string(p.size()) + " bytes)";
  return out;
}

}  // namespace deepinfer::regex
