// Pre-tokenization as Hugging Face `tokenizers` does it for byte-level BPE files: a
// sequence of steps, each splitting every current piece independently.
//   Split      regex or literal pattern, behavior Removed / Isolated / MergedWithPrevious /
//              MergedWithNext / Contiguous, optional invert;
//   Digits     individual_digits true (each numeric char alone) or false (runs);
//   ByteLevel  add_prefix_space (a space is prepended to every piece not starting with
//              one) and use_regex (the GPT-2 split pattern). Its byte-to-char mapping is
//              applied by the BPE model, which works on raw bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace deepinfer::tokenizer {

// A text decoded for pre-tokenization: code points, their general categories, and the
// byte offset of every code point in `bytes` (byte_off has one extra entry, the total).
struct PreTokText {
  std::string_view bytes;  // UTF-8; points into the caller's string or into `owned`
  std::string owned;
  std::vector<char32_t> cps;
  std::vector<uint8_t> cats;
  std::vector<uint32_t> byte_off;

  // Decodes valid UTF-8 (the caller guarantees validity); `utf8` must outlive this object.
  void assign(std::string_view utf8);
  // Same, taking ownership of the text.
  void assign_owned(std::string utf8);
  std::string_view slice(std::size_t cp_begin, std::size_t cp_end) const {
    return bytes.substr(byte_off[cp_begin], byte_off[cp_end] - byte_off[cp_begin]);
  }
};

struct Piece {
  uint32_t begin, end;  // code point indices into a PreTokText
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses a tokenizer.json behavior name ("Isolated", "MergedWithPrevious", ...).
SplitBehavior split_behavior_from_name(std::string_view name);

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  void add_split_regex(std::string_view pattern, SplitBehavior behavior, bool invert);
  void add_split_literal(std::string_view literal, SplitBehavior behavior, bool invert);
  void add_digits(bool individual_digits);
  void add_byte_level(bool add_prefix_space, bool use_regex);

  bool has_byte_level() const { return has_byte_level_; }
  std::size_t step_count() const { return steps_.size(); }

  // Splits `pieces` (spans of *text) in place. A ByteLevel step with add_prefix_space
  // rebuilds the text into `scratch`; the return value is the text the output pieces index.
  const PreTokText* run(const PreTokText* text, std::vector<Piece>& pieces, PreTokText& scratch) const;

 private:
  struct Step;
  std::vector<std::unique_ptr<Step>> steps_;
  bool has_byte_level_ = false;
};

}  // namespace deepinfer::tokenizer
