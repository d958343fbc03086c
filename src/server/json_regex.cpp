// The regular-expression subset of JSON Schema `pattern` (and the `format` values written as
// patterns) compiled to byte DFAs over UTF-8: parse (ReParser) -> NFA over byte ranges ->
// subset construction; intersection with length bounds and other patterns; pruning of dead
// states. json_grammar.cpp's schema compiler is its only user.
#include "server/json_regex.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace deepinfer::server::json_regex {

namespace {

[[noreturn]] void pattern_error(const std::string& why) { throw SchemaError("pattern: " + why); }

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges
constexpr uint32_t kMaxCp = 0x10FFFF;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  return out;
}
Ranges negated(const Ranges& r) {
  Ranges n = normalized(r), out;
  uint32_t next = 0;
  for (const auto& x : n) {
    if (x.first > next) out.push_back({next, x.first - 1});
    next = x.second + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}
const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                       {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kDot = negated({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});
const Ranges kAll = {{0, kMaxCp}};

struct Re {
  enum Kind { kSet, kCat, kAlt, kRep, kBegin, kEnd } kind = kCat;
  Ranges set;
  std::vector<Re> kids;
  int min = 0, max = -1;  // kRep; max -1: unbounded
};

class ReParser {
 public:
  explicit ReParser(std::string_view p) : p_(p) {}

  // The pattern as alternatives, each with its anchors.
  Re parse() {
    Re top = alt();
    if (i_ < p_.size()) pattern_error("unbalanced ')'");
    return top;
  }

 private:
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  uint32_t code_point() {
    const uint8_t c = uint8_t(p_[i_++]);
    if (c < 0x80) return c;
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0 || i_ + size_t(n) > p_.size()) pattern_error("invalid UTF-8");
    uint32_t cp = c & (0x3F >> n);
    while (n-- > 0) cp = (cp << 6) | (uint8_t(p_[i_++]) & 0x3F);
    return cp;
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const int h = more() ? hex_value(uint8_t(p_[i_])) : -1;
      if (h < 0) pattern_error("bad hex escape");
      v = v * 16 + uint32_t(h);
      ++i_;
    }
    return v;
  }

  // After a backslash: a class (\d ...) or one character. in_class: \b is a backspace.
  Ranges escape(bool in_class) {
    if (!more()) pattern_error("trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': return kDigit;
      case 'D': return negated(kDigit);
      case 'w': return kWord;
      case 'W': return negated(kWord);
      case 's': return kSpace;
      case 'S': return negated(kSpace);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': {
        const uint32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && i_ + 1 < p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
          i_ += 2;
          const uint32_t lo = hex(4);
          if (lo < 0xDC00 || lo > 0xDFFF) pattern_error("unpaired surrogate escape");
          v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        }
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{8, 8}};
        pattern_error("\\b (word boundary) is not supported");
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9'))
          pattern_error(std::string("the escape \\") + c + " is not supported");
        --i_;
        const uint32_t cp = code_point();
        return {{cp, cp}};
    }
  }

  Ranges char_class() {
    bool neg = false;
    if (more() && peek() == '^') neg = true, ++i_;
    Ranges r;
    while (true) {
      if (!more()) pattern_error("unterminated [");
      if (peek() == ']') break;  // ([] is the empty class)
      Ranges lo_set;
      if (peek() == '\\') {
        ++i_;
        lo_set = escape(true);
      } else {
        const uint32_t cp = code_point();
        lo_set = {{cp, cp}};
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && i_ + 1 < p_.size() && peek() == '-' &&
          p_[i_ + 1] != ']') {
        ++i_;
        Ranges hi_set;
        if (peek() == '\\') {
          ++i_;
          hi_set = escape(true);
        } else {
          const uint32_t cp = code_point();
          hi_set = {{cp, cp}};
        }
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second || hi_set[0].first < lo_set[0].first)
          pattern_error("bad character range");
        r.push_back({lo_set[0].first, hi_set[0].first});
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    ++i_;  // ']'
    return neg ? negated(r) : normalized(r);
  }

  Re atom() {
    Re r;
    r.kind = Re::kSet;
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        ++i_;
        if (more() && peek() == ':') {
          ++i_;
        } else if (more() && (peek() == '<' || peek() == 'P') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' &&
                   p_[i_ + 1] != '!') {
          if (peek() == 'P') ++i_;
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) pattern_error("bad group name");
          i_ = close + 1;
        } else {
          pattern_error("lookaround and inline flags are not supported");
        }
      }
      if (++depth_ > 64) pattern_error("groups nested too deeply");
      Re inner = alt();
      --depth_;
      if (!more() || peek() != ')') pattern_error("missing ')'");
      ++i_;
      return inner;
    }
    ++i_;
    switch (c) {
      case '[': r.set = char_class(); return r;
      case '.': r.set = kDot; return r;
      case '^': r.kind = Re::kBegin; return r;
      case '$': r.kind = Re::kEnd; return r;
      case '\\': r.set = escape(false); return r;
      case '*':
      case '+':
      case '?':
      case '{': pattern_error(std::string("nothing to repeat before '") + c + "'");
      default: {
        --i_;
        const uint32_t cp = code_point();
        r.set = {{cp, cp}};
        return r;
      }
    }
  }

  bool quantifier(int& lo, int& hi) {
    const char c = peek();
    if (c == '*') lo = 0, hi = -1;
    else if (c == '+') lo = 1, hi = -1;
    else if (c == '?') lo = 0, hi = 1;
    else if (c == '{') {
      size_t j = i_ + 1;
      auto number = [&](int& v) {
        const size_t s = j;
        v = 0;
        while (j < p_.size() && is_digit(uint8_t(p_[j])) && v <= 100000) v = v * 10 + (p_[j++] - '0');
        return j > s;
      };
      if (!number(lo)) return false;  // a literal '{'
      hi = lo;
      if (j < p_.size() && p_[j] == ',') {
        ++j;
        if (!number(hi)) hi = -1;
      }
      if (j >= p_.size() || p_[j] != '}') return false;
      if (hi >= 0 && hi < lo) pattern_error("bad repetition bounds");
      if (lo > 1000 || hi > 1000) pattern_error("repetition counts above 1000 are not supported");
      i_ = j;
    } else {
      return false;
    }
    ++i_;
    if (more() && peek() == '?') ++i_;  // lazy: the same language
    return true;
  }

  Re concat() {
    Re r;
    r.kind = Re::kCat;
    while (more() && peek() != '|' && peek() != ')') {
      Re a;
      if (peek() == '{') {  // a '{' that does not start a quantifier is a literal
        int lo, hi;
        if (quantifier(lo, hi)) pattern_error("nothing to repeat before '{'");
        ++i_;
        a.kind = Re::kSet;
        a.set = {{'{', '{'}};
      } else {
        a = atom();
      }
      int lo, hi;
      while (more() && quantifier(lo, hi)) {
        if (a.kind == Re::kBegin || a.kind == Re::kEnd) pattern_error("a quantifier after an anchor");
        Re rep;
        rep.kind = Re::kRep;
        rep.min = lo;
        rep.max = hi;
        rep.kids.push_back(std::move(a));
        a = std::move(rep);
      }
      r.kids.push_back(std::move(a));
    }
    return r;
  }

  Re alt() {
    Re r;
    r.kind = Re::kAlt;
    r.kids.push_back(concat());
    while (more() && peek() == '|') {
      ++i_;
      r.kids.push_back(concat());
    }
    return r;
  }

  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
};

// The UTF-8 byte-range sequences of the code points [lo, hi] (surrogates skipped).
void utf8_sequences(uint32_t lo, uint32_t hi, const std::function<void(const std::vector<std::pair<uint8_t, uint8_t>>&)>& f) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, f);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, f);
    return;
  }
  static const uint32_t kLenMax[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t m : kLenMax)
    if (lo <= m && hi > m) {
      utf8_sequences(lo, m, f);
      utf8_sequences(m + 1, hi, f);
      return;
    }
  if (hi < 0x80) {
    f({{uint8_t(lo), uint8_t(hi)}});
    return;
  }
  // Split until lo and hi differ only where every continuation byte in between is allowed.
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, f);
        utf8_sequences((lo | m) + 1, hi, f);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, f);
        utf8_sequences(hi & ~m, hi, f);
        return;
      }
    }
  }
  auto encode = [](uint32_t cp, uint8_t* out) {
    if (cp < 0x800) {
      out[0] = uint8_t(0xC0 | (cp >> 6));
      out[1] = uint8_t(0x80 | (cp & 0x3F));
      return 2;
    }
    if (cp < 0x10000) {
      out[0] = uint8_t(0xE0 | (cp >> 12));
      out[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
      out[2] = uint8_t(0x80 | (cp & 0x3F));
      return 3;
    }
    out[0] = uint8_t(0xF0 | (cp >> 18));
    out[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F));
    out[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
    out[3] = uint8_t(0x80 | (cp & 0x3F));
    return 4;
  };
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < n; ++k) seq.push_back({a[k], b[k]});
  f(seq);
}

constexpr size_t kMaxNfaStates = 50000;
constexpr size_t kMaxDfaStates = 10000;

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int32_t to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<std::vector<int32_t>> eps;

  int32_t add() {
    if (edges.size() >= kMaxNfaStates) pattern_error("too large");
    edges.emplace_back();
    eps.emplace_back();
    return int32_t(edges.size() - 1);
  }

  // Appends the automaton of `r` after state `from`; returns its end state.
  int32_t emit(const Re& r, int32_t from) {
    switch (r.kind) {
      case Re::kSet: {
        const int32_t end = add();
        for (const auto& [lo, hi] : r.set)
          utf8_sequences(lo, hi, [&](const std::vector<std::pair<uint8_t, uint8_t>>& seq) {
            int32_t cur = from;
            for (size_t k = 0; k < seq.size(); ++k) {
              const int32_t to = k + 1 == seq.size() ? end : add();
              edges[size_t(cur)].push_back({seq[k].first, seq[k].second, to});
              cur = to;
            }
          });
        return end;
      }
      case Re::kCat: {
        int32_t cur = from;
        for (const Re& k : r.kids) cur = emit(k, cur);
        return cur;
      }
      case Re::kAlt: {
        const int32_t end = add();
        for (const Re& k : r.kids) {
          const int32_t s = add();
          eps[size_t(from)].push_back(s);
          eps[size_t(emit(k, s))].push_back(end);
        }
        return end;
      }
      case Re::kRep: {
        int32_t cur = from;
        for (int i = 0; i < r.min; ++i) {
          const int32_t s = add();
          eps[size_t(cur)].push_back(s);
          cur = emit(r.kids[0], s);
        }
        if (r.max < 0) {
          const int32_t s = add(), end = add();
          eps[size_t(cur)].push_back(s);
          eps[size_t(emit(r.kids[0], s))].push_back(s);
          eps[size_t(s)].push_back(end);
          return end;
        }
        for (int i = r.min; i < r.max; ++i) {
          const int32_t s = add(), end = add();
          eps[size_t(cur)].push_back(s);
          eps[size_t(cur)].push_back(end);
          eps[size_t(emit(r.kids[0], s))].push_back(end);
          cur = end;
        }
        return cur;
      }
      default: pattern_error("^ and $ are only supported at the start and end of the pattern");
    }
  }
};

ByteDfa determinize(const Nfa& nfa, int32_t start, int32_t final_state) {
  ByteDfa d;
  bool boundary[257] = {};
  for (const auto& es : nfa.edges)
    for (const auto& e : es) boundary[e.lo] = boundary[e.hi + 1] = true;
  std::vector<uint8_t> rep;
  int cls = -1;
  for (int b = 0; b < 256; ++b) {
    if (b == 0 || boundary[b]) {
      ++cls;
      rep.push_back(uint8_t(b));
    }
    d.cls[size_t(b)] = uint8_t(cls);
  }
  d.n_class = cls + 1;
  auto closure = [&](std::vector<int32_t> set) {
    std::vector<uint8_t> in(nfa.edges.size(), 0);
    std::vector<int32_t> stack = set;
    for (int32_t s : set) in[size_t(s)] = 1;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (int32_t t : nfa.eps[size_t(s)])
        if (!in[size_t(t)]) {
          in[size_t(t)] = 1;
          set.push_back(t);
          stack.push_back(t);
        }
    }
    std::sort(set.begin(), set.end());
    return set;
  };
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) {
    auto [it, fresh] = ids.emplace(set, int32_t(sets.size()));
    if (fresh) {
      if (sets.size() >= kMaxDfaStates) pattern_error("too complex (more than 10000 automaton states)");
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  intern(closure({start}));
  for (size_t i = 0; i < sets.size(); ++i) {
    d.accept.push_back(std::binary_search(sets[i].begin(), sets[i].end(), final_state));
    for (int c = 0; c < d.n_class; ++c) {
      std::vector<int32_t> to;
      for (int32_t s : sets[i])
        for (const auto& e : nfa.edges[size_t(s)])
          if (e.lo <= rep[size_t(c)] && rep[size_t(c)] <= e.hi) to.push_back(e.to);
      d.trans.push_back(to.empty() ? -1 : intern(closure(std::move(to))));
    }
  }
  return d;
}

}  // namespace

// Strings both accept (state 0 of each is the start).
ByteDfa intersect(const ByteDfa& a, const ByteDfa& b) {
  ByteDfa d;
  std::map<std::pair<int, int>, int> cls;
  for (int x = 0; x < 256; ++x) {
    auto [it, fresh] = cls.emplace(std::make_pair(a.cls[size_t(x)], b.cls[size_t(x)]), int(cls.size()));
    d.cls[size_t(x)] = uint8_t(it->second);
  }
  d.n_class = int32_t(cls.size());
  std::vector<std::pair<int, int>> rep(cls.size());
  for (const auto& [k, v] : cls) rep[size_t(v)] = k;
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> states;
  auto intern = [&](std::pair<int32_t, int32_t> p) {
    auto [it, fresh] = ids.emplace(p, int32_t(states.size()));
    if (fresh) {
      if (states.size() >= kMaxDfaStates) pattern_error("too complex together with the string's length bounds");
      states.push_back(p);
    }
    return it->second;
  };
  intern({0, 0});
  for (size_t i = 0; i < states.size(); ++i) {
    const auto [x, y] = states[i];
    d.accept.push_back(a.accept[size_t(x)] && b.accept[size_t(y)]);
    for (int c = 0; c < d.n_class; ++c) {
      const int32_t nx = a.trans[size_t(x) * size_t(a.n_class) + size_t(rep[size_t(c)].first)];
      const int32_t ny = b.trans[size_t(y) * size_t(b.n_class) + size_t(rep[size_t(c)].second)];
      d.trans.push_back(nx < 0 || ny < 0 ? -1 : intern({nx, ny}));
    }
  }
  return d;
}

// Strings of [lo, hi] code points (counted at UTF-8 lead bytes).
ByteDfa length_dfa(uint32_t lo, uint32_t hi) {
  ByteDfa d;
  for (int b = 0; b < 256; ++b) d.cls[size_t(b)] = (b >= 0x80 && b < 0xC0) ? 1 : 0;
  d.n_class = 2;
  const uint32_t top = hi == UINT32_MAX ? lo : hi;
  if (top >= kMaxDfaStates) pattern_error("minLength / maxLength above 10000 with a pattern are not supported");
  for (uint32_t n = 0; n <= top; ++n) {
    d.accept.push_back(n >= lo);
    d.trans.push_back(n < top ? int32_t(n + 1) : hi == UINT32_MAX ? int32_t(n) : -1);
    d.trans.push_back(int32_t(n));
  }
  return d;
}

// Drops the states from which nothing is accepted (their transitions become -1).
ByteDfa pruned(ByteDfa d) {
  const size_t n = d.size();
  std::vector<std::vector<int32_t>> back(n);
  for (size_t s = 0; s < n; ++s)
    for (int c = 0; c < d.n_class; ++c)
      if (int32_t t = d.trans[s * size_t(d.n_class) + size_t(c)]; t >= 0) back[size_t(t)].push_back(int32_t(s));
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> stack;
  for (size_t s = 0; s < n; ++s)
    if (d.accept[s]) live[s] = 1, stack.push_back(int32_t(s));
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : back[size_t(s)])
      if (!live[size_t(p)]) live[size_t(p)] = 1, stack.push_back(p);
  }
  if (n == 0 || !live[0]) pattern_error("no string satisfies it (with the string's length bounds)");
  for (auto& t : d.trans)
    if (t >= 0 && !live[size_t(t)]) t = -1;
  return d;
}

namespace {

ByteDfa regex_dfa(const Re& top) {
  // Each top-level alternative with its own anchors; an unanchored side matches anything.
  Re all;
  all.kind = Re::kAlt;
  Re any;
  any.kind = Re::kRep;
  any.kids.push_back(Re{Re::kSet, kAll, {}, 0, -1});
  for (const Re& branch : top.kids) {
    Re cat = branch;
    const bool begin = !cat.kids.empty() && cat.kids.front().kind == Re::kBegin;
    if (begin) cat.kids.erase(cat.kids.begin());
    const bool end = !cat.kids.empty() && cat.kids.back().kind == Re::kEnd;
    if (end) cat.kids.pop_back();
    if (!begin) cat.kids.insert(cat.kids.begin(), any);
    if (!end) cat.kids.push_back(any);
    all.kids.push_back(std::move(cat));
  }
  Nfa nfa;
  const int32_t start = nfa.add();
  const int32_t end = nfa.emit(all, start);
  return determinize(nfa, start, end);
}

}  // namespace

// The `format` values as anchored patterns, each a subset of its RFC that a validator accepts:
//   date       RFC 3339 full-date; the day exists in its month (February 29 in Gregorian leap
//              years only: divisible by 4, centuries only when divisible by 400).
//   time       RFC 3339 full-time: hh 00-23, mm 00-59, ss 00-59 (no leap second: 60 is valid only
//              at the UTC minute 23:59, which an offset moves), optional fraction of 1-9 digits,
//              Z or an offset of +-hh:mm in the same ranges.
//   date-time  date "T" time (T and Z in either case, as RFC 3339 allows).
//   ipv4       dotted quad, octets 0-255 in decimal without leading zeros.
//   email      dot-atom local part (RFC 5322 atext, dots only between atoms) "@" a hostname
//              (labels of 1-63 letters, digits and hyphens, no hyphen first or last); quoted
//              local parts and address literals are never produced.
const char* format_pattern(const std::string& f) {
  // Any month to day 28; days 29 and 30 outside February; day 31 in the long months; February 29
  // in a leap year (the last two digits a non-zero multiple of 4, or a multiple of 400).
  static const std::string date =
      "(\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])|\\d{4}-(0[13-9]|1[0-2])-(29|30)|\\d{4}-(0[13578]|1[02])-31|"
      "(\\d\\d(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00|0000)-02-29)";
  static const std::string time = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,9})?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  static const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
  static const std::string label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  static const std::string date_re = "^" + date + "$", time_re = "^" + time + "$",
                           date_time_re = "^" + date + "[Tt]" + time + "$",
                           email_re = "^" + atext + "+(\\." + atext + "+)*@" + label + "(\\." + label + ")*$";
  if (f == "date") return date_re.c_str();
  if (f == "time") return time_re.c_str();
  if (f == "date-time") return date_time_re.c_str();
  if (f == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  if (f == "ipv4") return "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$";
  if (f == "email") return email_re.c_str();
  return nullptr;
}

// Runs a DFA over a string's bytes.
bool dfa_accepts(const ByteDfa& d, std::string_view s) {
  int32_t st = 0;
  for (char c : s)
    if ((st = d.next(st, uint8_t(c))) < 0) return false;
  return d.accept[size_t(st)];
}

ByteDfa pattern_dfa(std::string_view pattern) { return regex_dfa(ReParser(pattern).parse()); }

}  // namespace deepinfer::server::json_regex
