// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (DeepSeek-V3/V4 and
// other GPT-2-style byte-level BPE files), producing the same ids as the `tokenizers`
// library (checked against tokenizers 0.23.3 on the corpus in tests/data/tokenizer).
//
// Pipeline of encode(), as in tokenizers:
//   1. invalid UTF-8 is replaced by U+FFFD per maximal ill-formed subpart (see below);
//   2. added tokens are split out: first those with normalized == false on the raw text,
//      then those with normalized == true on the remaining pieces (leftmost-longest,
//      honouring single_word / lstrip / rstrip);
//   3. the pre_tokenizer steps split each remaining piece (Split regexes run on our own
//      matcher, see regex.h; Digits; ByteLevel);
//   4. each piece is BPE-merged on its bytes (byte-level alphabet) with a word cache.
// No BOS/EOS or other post-processor tokens are ever added.
//
// Supported tokenizer.json subset (anything else throws std::runtime_error on load):
//   model: type BPE; vocab; merges as "a b" strings or ["a","b"] pairs; unk_token,
//          fuse_unk, byte_fallback, ignore_merges; dropout is ignored (treated as none);
//          continuing_subword_prefix / end_of_word_suffix must be null or empty.
//   normalizer: null or an empty Sequence.
//   pre_tokenizer: Sequence / Split (Regex or String pattern) / Digits / ByteLevel, with
//          exactly one ByteLevel step, placed last.
//   decoder: null, ByteLevel, or a Sequence holding only ByteLevel.
//   post_processor: ignored.
//   added_tokens: ids are assigned the way tokenizers assigns them on load (the "id"
//          field is not used; see tokenizer.cpp), which gives the file's ids for every
//          file written by tokenizers.
//
// Invalid UTF-8 input: never an error. The text is first made valid by replacing each
// maximal ill-formed subsequence with U+FFFD (the rule of Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy); the ids are
// therefore those tokenizers gives for the lossy-decoded string, and decode() returns the
// UTF-8 of U+FFFD (EF BF BD) where the invalid bytes were.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"

namespace deepinfer::tokenizer {

enum class SpecialTokenMode {
  kMatchAll,         // every added token is recognised in the text (tokenizers' default)
  kMatchNonSpecial,  // tokens with special == true are encoded as plain text; other added
                     // tokens still match (tokenizers' encode_special_tokens = true)
  kMatchNone,        // no added token is recognised: all text goes through BPE
};

// A piece of a text and how to encode it: a chat template's own markers are matched as
// added tokens (kMatchAll), text from a client is not (kMatchNone), so that a client who
// writes "<｜User｜>" into a message gets those characters, not a forged turn.
struct TextSegment {
  std::string_view text;
  SpecialTokenMode mode = SpecialTokenMode::kMatchNone;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory containing one.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json_string(std::string_view json, const std::string& source_name = "<string>");

  // match_specials == false is SpecialTokenMode::kMatchNone (safe for untrusted text).
  // Thread-safe. Texts of 2 GiB or more throw std::length_error.
  std::vector<int32_t> encode(std::string_view text, bool match_specials = true) const;
  std::vector<int32_t> encode(std::string_view text, SpecialTokenMode mode) const;
  // The segments' texts joined, with added tokens matched only inside each segment and as
  // its mode allows. Text that runs across segment boundaries is pre-tokenized and merged
  // as one piece, so the ids equal encode(joined text) whenever every added token of the
  // joined text lies inside a segment that matches it.
  std::vector<int32_t> encode(std::span<const TextSegment> segments) const;

  // Concatenated bytes of the tokens (exact, possibly not valid UTF-8 at token splits of
  // a multi-byte character). Unknown ids are skipped, as tokenizers does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const {
    return decode(std::span<const int32_t>(ids), skip_special_tokens);
  }

  // Bytes one id decodes to ("" for an unknown id). Byte-level tokens map back to their
  // bytes; a token containing characters outside the byte alphabet (e.g. "<｜User｜>")
  // decodes to its own UTF-8, like tokenizers' ByteLevel decoder.
  const std::string& token_bytes(int32_t id) const;
  // The token string as written in tokenizer.json (vocab key or added token content).
  const std::string& token_string(int32_t id) const;

  // One past the largest id (vocab or added token): the number of embedding rows.
  int32_t vocab_size() const;
  // Id of a token string as written in tokenizer.json (added tokens first, then vocab).
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;     // an added token with special == true
  bool is_added_token(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // Pre-tokenizer only (no added-token matching, no BPE): the raw bytes of each piece, as
  // tokenizers' pre_tokenizer.pre_tokenize_str gives them (before byte-level mapping).
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // Number of words in the BPE cache (diagnostics).
  std::size_t cache_entries() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  static Tokenizer load(std::string_view json, const std::string& source_name);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace deepinfer::tokenizer
