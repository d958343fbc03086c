// The regular-expression subset of JSON Schema `pattern` (and the `format` values written as
// patterns) compiled to byte DFAs over UTF-8: the shared front end parses (regex/syntax.h,
// ECMA-262 dialect), this back end builds an NFA over byte ranges -> subset construction;
// intersection with length bounds and other patterns; pruning of dead states. The schema
// compiler (json_schema.cpp) is its only user.
#include "server/json_regex.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "regex/syntax.h"

namespace deepinfer::server::json_regex {

namespace {

[[noreturn]] void pattern_error(const std::string& why) { throw SchemaError("pattern: " + why); }

using regex::CodeRanges;
using regex::Node;
constexpr uint32_t kMaxCp = regex::kMaxCodePoint;

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

  // Appends the automaton of `r` after state `from`; returns its end state. sets: the code
  // points of each of the syntax's sets.
  int32_t emit(const Node& r, int32_t from, const std::vector<CodeRanges>& sets) {
    switch (r.kind) {
      case Node::Kind::kChar:
      case Node::Kind::kClass: {
        const int32_t end = add();
        const CodeRanges one = {{r.ch, r.ch}};
        for (const auto& [lo, hi] : r.kind == Node::Kind::kChar ? one : sets[size_t(r.set)])
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
      case Node::Kind::kConcat: {
        int32_t cur = from;
        for (const Node& k : r.kids) cur = emit(k, cur, sets);
        return cur;
      }
      case Node::Kind::kAlt: {
        const int32_t end = add();
        for (const Node& k : r.kids) {
          const int32_t s = add();
          eps[size_t(from)].push_back(s);
          eps[size_t(emit(k, s, sets))].push_back(end);
        }
        return end;
      }
      case Node::Kind::kRepeat: {
        int32_t cur = from;
        for (int i = 0; i < r.min; ++i) {
          const int32_t s = add();
          eps[size_t(cur)].push_back(s);
          cur = emit(r.kids[0], s, sets);
        }
        if (r.max == regex::kInfinite) {
          const int32_t s = add(), end = add();
          eps[size_t(cur)].push_back(s);
          eps[size_t(emit(r.kids[0], s, sets))].push_back(s);
          eps[size_t(s)].push_back(end);
          return end;
        }
        for (int i = r.min; i < r.max; ++i) {
          const int32_t s = add(), end = add();
          eps[size_t(cur)].push_back(s);
          eps[size_t(cur)].push_back(end);
          eps[size_t(emit(r.kids[0], s, sets))].push_back(end);
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

// The DFA of a parsed ECMA-262 pattern: each top-level alternative with its own anchors; an
// unanchored side matches anything.
ByteDfa regex_dfa(regex::Syntax syntax) {
  std::vector<CodeRanges> sets;
  for (const regex::CharSet& c : syntax.sets) sets.push_back(c.ranges());
  sets.push_back({{0, kMaxCp}});
  Node any;
  any.kind = Node::Kind::kRepeat;
  any.max = regex::kInfinite;
  any.kids.resize(1);
  any.kids[0].kind = Node::Kind::kClass;
  any.kids[0].set = int(sets.size() - 1);
  auto is_assert = [](const Node& n, regex::AssertKind k) { return n.kind == Node::Kind::kAssert && n.assert_kind == k; };
  for (Node& cat : syntax.root.kids) {
    const bool begin = !cat.kids.empty() && is_assert(cat.kids.front(), regex::AssertKind::kTextStart);
    if (begin) cat.kids.erase(cat.kids.begin());
    const bool end = !cat.kids.empty() && is_assert(cat.kids.back(), regex::AssertKind::kTextEnd);
    if (end) cat.kids.pop_back();
    if (!begin) cat.kids.insert(cat.kids.begin(), any);
    if (!end) cat.kids.push_back(any);
  }
  Nfa nfa;
  const int32_t start = nfa.add();
  const int32_t end = nfa.emit(syntax.root, start, sets);
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

ByteDfa pattern_dfa(std::string_view pattern) {
  regex::Syntax syntax;
  try {
    syntax = regex::parse(pattern, regex::Dialect::kEcma262);
  } catch (const regex::SyntaxError& e) {
    pattern_error(e.what());
  }
  return regex_dfa(std::move(syntax));
}

}  // namespace deepinfer::server::json_regex
