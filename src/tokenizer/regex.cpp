#include "tokenizer/regex.h"

#include <algorithm>
#include <limits>
#include <span>
#include <stdexcept>

#include "regex/syntax.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

namespace {

using regex::AssertKind;
using regex::CharSet;
using regex::kInfinite;
using regex::Node;

constexpr std::size_t kNoMatch = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kMaxProgramSize = 200000;
// Oniguruma's default retry limit per match attempt: a pattern such as (?:a??){40}b backtracks
// exponentially, and past this many backtracking steps one attempt is an error, not a hang.
constexpr uint64_t kDefaultBacktrackLimit = 10'000'000;

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
  std::vector<CharSet> classes;
  FirstSet first;
  bool can_be_empty = false;

  int emit(Inst in) {
    if (code.size() >= kMaxProgramSize) throw std::runtime_error("regex: pattern too large after expanding repetitions");
    code.push_back(in);
    return static_cast<int>(code.size() - 1);
  }

  int class_of_char(char32_t ch) {
    CharSet c;
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
        in.x = n.set;
        emit(in);
        return;
      }
      case Node::Kind::kConcat:
        for (const auto& k : n.kids) compile(k);
        return;
      case Node::Kind::kAlt: {
        std::vector<int> jumps;
        for (std::size_t b = 0; b < n.kids.size(); ++b) {
          if (b + 1 < n.kids.size()) {
            const int split = emit(Inst{Op::kSplit});
            code[split].x = split + 1;
            compile(n.kids[b]);
            jumps.push_back(emit(Inst{Op::kJmp}));
            code[split].y = static_cast<int>(code.size());
          } else {
            compile(n.kids[b]);
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
        compile(n.kids[0]);
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
    const Node& body = n.kids[0];
    if (body.kind == Node::Kind::kChar || body.kind == Node::Kind::kClass) {
      Inst in{Op::kRep};
      in.x = body.kind == Node::Kind::kClass ? body.set : class_of_char(body.ch);
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
      if (regex::nullable(body)) {
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
        const CharSet& c = classes[n.set];
        f.ascii[0] |= c.ascii[0];
        f.ascii[1] |= c.ascii[1];
        f.cats |= c.non_ascii_categories();
        return false;
      }
      case Node::Kind::kConcat:
        for (const auto& k : n.kids) {
          if (!first_of(k, f)) return false;
        }
        return true;
      case Node::Kind::kAlt: {
        bool any = false;
        for (const auto& k : n.kids) any = first_of(k, f) || any;
        return any;
      }
      case Node::Kind::kRepeat: {
        const bool inner = first_of(n.kids[0], f);
        return inner || n.min == 0;
      }
      case Node::Kind::kAtomic:
        return first_of(n.kids[0], f);
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
                           regex::quoted_pattern(P.pattern));
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
        const CharSet& c = P.classes[in.x];
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
  regex::Syntax syntax;
  try {
    syntax = regex::parse(pattern, regex::Dialect::kOniguruma);
  } catch (const regex::SyntaxError& e) {
    if (e.offset == regex::SyntaxError::kNoOffset) throw std::runtime_error(std::string("regex: ") + e.what());
    throw std::runtime_error(std::string("regex: ") + e.what() + " at offset " + std::to_string(e.offset) +
                             " in pattern " + regex::quoted_pattern(pattern));
  }
  prog_->classes = std::move(syntax.sets);
  prog_->compile(syntax.root);
  prog_->emit(Inst{Op::kMatch});
  FirstSet f;
  prog_->can_be_empty = prog_->first_of(syntax.root, f);
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
