#include "tokenizer/pretokenizer.h"

#include <stdexcept>

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

namespace {

// The split pattern of GPT-2 that ByteLevel applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Segment {
  uint32_t begin, end;
  bool is_match;
};

// Applies a split behavior to the segments of one piece (as tokenizers'
// NormalizedString::split does) and appends the non-empty results to `out`.
void apply_behavior(std::vector<Segment>& segs, SplitBehavior behavior, bool invert, std::vector<Piece>& out) {
  if (invert) {
    for (Segment& s : segs) s.is_match = !s.is_match;
  }
  auto push = [&](uint32_t b, uint32_t e) {
    if (e > b) out.push_back(Piece{b, e});
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segs) {
        if (!s.is_match) push(s.begin, s.end);
      }
      return;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segs) push(s.begin, s.end);
      return;
    case SplitBehavior::kMergedWithPrevious: {
      std::vector<Segment> acc;
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !acc.empty()) {
          acc.back().end = s.end;
        } else {
          acc.push_back(s);
        }
        previous_match = s.is_match;
      }
      for (const Segment& s : acc) push(s.begin, s.end);
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      std::vector<Segment> acc;  // built back to front
      bool previous_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !acc.empty()) {
          acc.back().begin = it->begin;
        } else {
          acc.push_back(*it);
        }
        previous_match = it->is_match;
      }
      for (auto it = acc.rbegin(); it != acc.rend(); ++it) push(it->begin, it->end);
      return;
    }
    case SplitBehavior::kContiguous: {
      std::vector<Segment> acc;
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.is_match == previous_match && !acc.empty()) {
          acc.back().end = s.end;
        } else {
          acc.push_back(s);
        }
        previous_match = s.is_match;
      }
      for (const Segment& s : acc) push(s.begin, s.end);
      return;
    }
  }
}

// Turns a list of matches inside [b, e) into match / gap segments.
void matches_to_segments(const std::vector<Segment>& matches, uint32_t b, uint32_t e, std::vector<Segment>& segs) {
  segs.clear();
  uint32_t prev = b;
  for (const Segment& m : matches) {
    if (prev != m.begin) segs.push_back(Segment{prev, m.begin, false});
    segs.push_back(Segment{m.begin, m.end, true});
    prev = m.end;
  }
  if (prev != e) segs.push_back(Segment{prev, e, false});
}

}  // namespace

SplitBehavior split_behavior_from_name(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw std::runtime_error("tokenizer.json: unknown split behavior \"" + std::string(name) + "\"");
}

void PreTokText::assign(std::string_view utf8) {
  bytes = utf8;
  const std::size_t n = utf8.size();
  cps.resize(n);
  cats.resize(n);
  byte_off.resize(n + 1);
  const auto* p = reinterpret_cast<const unsigned char*>(utf8.data());
  std::size_t i = 0, k = 0;
  while (i < n) {
    const unsigned char b = p[i];
    char32_t cp;
    std::size_t len;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if (utf8_step(p + i, n - i, len, cp) != Utf8Step::kValid) {
      throw std::logic_error("PreTokText::assign: invalid UTF-8 (sanitise first)");
    }
    cps[k] = cp;
    cats[k] = static_cast<uint8_t>(general_category(cp));
    byte_off[k] = static_cast<uint32_t>(i);
    ++k;
    i += len;
  }
  cps.resize(k);
  cats.resize(k);
  byte_off.resize(k + 1);
  byte_off[k] = static_cast<uint32_t>(n);
}

void PreTokText::assign_owned(std::string utf8) {
  owned = std::move(utf8);
  assign(owned);
}

struct PreTokenizer::Step {
  enum class Kind { kSplitRegex, kDigits, kByteLevel } kind;
  std::unique_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool individual_digits = false;
  bool add_prefix_space = false;
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::add_split_regex(std::string_view pattern, SplitBehavior behavior, bool invert) {
  auto s = std::make_unique<Step>();
  s->kind = Step::Kind::kSplitRegex;
  s->regex = std::make_unique<Regex>(pattern);
  s->behavior = behavior;
  s->invert = invert;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_split_literal(std::string_view literal, SplitBehavior behavior, bool invert) {
  // Escape every character so the literal compiles as itself.
  std::string pattern;
  const auto* p = reinterpret_cast<const unsigned char*>(literal.data());
  std::size_t i = 0;
  while (i < literal.size()) {
    std::size_t len;
    char32_t cp;
    if (utf8_step(p + i, literal.size() - i, len, cp) != Utf8Step::kValid) {
      throw std::runtime_error("tokenizer.json: split string pattern is not valid UTF-8");
    }
    const bool alnum = cp < 128 && ((cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'));
    if (cp < 128 && !alnum) {
      pattern += "\\x{";
      static const char* kHex = "0123456789ABCDEF";
      pattern += kHex[(cp >> 4) & 15];
      pattern += kHex[cp & 15];
      pattern += "}";
    } else {
      pattern.append(literal.substr(i, len));
    }
    i += len;
  }
  add_split_regex(pattern, behavior, invert);
}

void PreTokenizer::add_digits(bool individual_digits) {
  auto s = std::make_unique<Step>();
  s->kind = Step::Kind::kDigits;
  s->individual_digits = individual_digits;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  auto s = std::make_unique<Step>();
  s->kind = Step::Kind::kByteLevel;
  s->add_prefix_space = add_prefix_space;
  if (use_regex) s->regex = std::make_unique<Regex>(kGpt2Pattern);
  steps_.push_back(std::move(s));
  has_byte_level_ = true;
}

namespace {

void split_with_regex(const Regex& re, const PreTokText& text, const std::vector<Piece>& in, SplitBehavior behavior,
                      bool invert, std::vector<Piece>& out) {
  std::vector<Segment> matches, segs;
  for (const Piece& pc : in) {
    RegexSubject subj{text.cps.data(), text.cats.data(), pc.begin, pc.end};
    matches.clear();
    // Iterate like the onig crate's find_iter: an empty match right after the previous
    // match is skipped by advancing one character.
    std::size_t last_end = pc.begin;
    bool have_last = false;
    std::size_t last_match_end = 0;
    while (last_end <= pc.end) {
      std::size_t mb, me;
      if (!re.search(subj, last_end, mb, me)) break;
      if (mb == me && have_last && last_match_end == me) {
        ++last_end;
        continue;
      }
      last_end = me;
      last_match_end = me;
      have_last = true;
      matches.push_back(Segment{static_cast<uint32_t>(mb), static_cast<uint32_t>(me), true});
      if (mb == me && me == pc.end) break;
    }
    if (behavior == SplitBehavior::kIsolated && !invert) {
      // Fast path: matches and gaps are all kept as they are.
      uint32_t prev = pc.begin;
      for (const Segment& m : matches) {
        if (m.begin > prev) out.push_back(Piece{prev, m.begin});
        if (m.end > m.begin) out.push_back(Piece{m.begin, m.end});
        prev = m.end;
      }
      if (pc.end > prev) out.push_back(Piece{prev, pc.end});
      continue;
    }
    matches_to_segments(matches, pc.begin, pc.end, segs);
    apply_behavior(segs, behavior, invert, out);
  }
}

void split_digits(bool individual, const PreTokText& text, const std::vector<Piece>& in, std::vector<Piece>& out) {
  std::vector<Segment> segs;
  for (const Piece& pc : in) {
    segs.clear();
    uint32_t last = pc.begin;
    for (uint32_t i = pc.begin; i < pc.end; ++i) {
      if ((kMaskN >> text.cats[i]) & 1u) {
        if (last < i) segs.push_back(Segment{last, i, false});
        segs.push_back(Segment{i, i + 1, true});
        last = i + 1;
      }
    }
    if (pc.end > last) segs.push_back(Segment{last, pc.end, false});
    apply_behavior(segs, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false, out);
  }
}

// Rebuilds the pieces into `dst` with a space in front of every piece that does not start
// with one; `pieces` is rewritten to index `dst`.
void prepend_spaces(const PreTokText& src, std::vector<Piece>& pieces, PreTokText& dst) {
  std::string s;
  for (const Piece& pc : pieces) {
    if (src.cps[pc.begin] != ' ') s.push_back(' ');
    s.append(src.slice(pc.begin, pc.end));
  }
  std::vector<Piece> rebuilt;
  rebuilt.reserve(pieces.size());
  uint32_t pos = 0;
  for (const Piece& pc : pieces) {
    const uint32_t len = pc.end - pc.begin + (src.cps[pc.begin] != ' ' ? 1 : 0);
    rebuilt.push_back(Piece{pos, pos + len});
    pos += len;
  }
  dst.assign_owned(std::move(s));  // after all reads of src (it may be dst)
  pieces = std::move(rebuilt);
}

}  // namespace

const PreTokText* PreTokenizer::run(const PreTokText* text, std::vector<Piece>& pieces, PreTokText& scratch) const {
  std::vector<Piece> next;
  for (const auto& step : steps_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    switch (step->kind) {
      case Step::Kind::kSplitRegex:
        split_with_regex(*step->regex, *text, pieces, step->behavior, step->invert, next);
        pieces.swap(next);
        break;
      case Step::Kind::kDigits:
        split_digits(step->individual_digits, *text, pieces, next);
        pieces.swap(next);
        break;
      case Step::Kind::kByteLevel:
        if (step->add_prefix_space && !pieces.empty()) {
          prepend_spaces(*text, pieces, scratch);
          text = &scratch;
        }
        if (step->regex) {
          next.clear();
          split_with_regex(*step->regex, *text, pieces, SplitBehavior::kIsolated, false, next);
          pieces.swap(next);
        }
        break;
    }
  }
  return text;
}

}  // namespace deepinfer::tokenizer
