// The tokenizer's regex matcher, for the Split patterns of Hugging Face tokenizer.json
// pre-tokenizers (which `tokenizers` runs with Oniguruma): the Oniguruma dialect of the shared
// front end (regex/syntax.h lists what it accepts) compiled to a backtracking program over
// code points. Errors are std::runtime_error naming the pattern, at compile time for the
// syntax and for an unbounded repetition of a sub-expression that can match the empty string.
//
// Matching semantics are Perl-style leftmost-first with backtracking, like Oniguruma.
// Character tests are O(1) for ASCII and use the precomputed general category of each
// position, so a subject carries code points plus their categories.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

// The text a regex runs on: code points and their GeneralCategory ids, and the window
// [begin, end) that acts as the whole subject (anchors and look-ahead stop at its edges).
struct RegexSubject {
  const char32_t* cps = nullptr;
  const uint8_t* cats = nullptr;
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Matching work done by this thread so far: instructions executed, characters tested by
// repetitions, backtracking steps and start positions tried. A machine-independent measure
// of cost, so tests can check that work grows linearly with the input instead of timing it.
uint64_t regex_work();

// Backtracking steps one match attempt (one start position) may take on this thread before
// search() / match_at() throw std::runtime_error instead of running on: patterns like
// (?:a|a){40}b are exponential in a backtracking engine, as in Oniguruma, whose default
// limit (10 million) this is. 0 restores the default. Returns the previous limit.
uint64_t set_regex_backtrack_limit(uint64_t limit);

class Regex {
 public:
  // Compiles a pattern given as UTF-8. Throws std::runtime_error on a syntax error or an
  // unsupported construct; the message names the pattern.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Leftmost match starting at or after `from` (begin <= from <= end). On success returns
  // true and sets [match_begin, match_end). Thread-safe (scratch state is thread-local).
  // Throws std::runtime_error when an attempt passes the backtracking limit (above).
  bool search(const RegexSubject& s, std::size_t from, std::size_t& match_begin, std::size_t& match_end) const;

  // Anchored match attempt at exactly `pos`; returns the end or SIZE_MAX when none.
  std::size_t match_at(const RegexSubject& s, std::size_t pos) const;

  const std::string& pattern() const;

  struct Program;  // compiled form (regex.cpp)

 private:
  std::unique_ptr<Program> prog_;
};

}  // namespace deepinfer::tokenizer
