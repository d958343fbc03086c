// Byte grammars (json_grammar.h, tool_grammar.h) as token constraints for the sampler
// (deepinfer::TokenConstraint).
//
// A token is allowed iff its bytes, fed one by one, keep the output a valid prefix under
// the grammar; EOS is allowed only where the grammar is complete. The mask is computed
// over the vocabulary sorted by bytes: tokens sharing a prefix share the grammar states
// of that prefix (each state is copied, not recomputed), and once a prefix is refused
// every token that starts with it is skipped without feeding a byte. So a step costs one
// grammar byte per distinct (prefix, token) edge of the vocabulary trie that stays valid.
//
// Phases of one request's constraint:
//   1. (thinking mode) free until the output contains "</think>": reasoning is not
//      constrained, the answer after it is; then (with ConstraintStart::wait_for) free
//      until the output contains that text (already in the reasoning, where the output
//      parser ends the reasoning at a tool-call block); the free phases cost no mask, only a
//      look at each token's bytes;
//   2. forced tokens, one allowed at a time (the tool-call block opener);
//   3. the grammar; 4. after EOS, nothing but EOS.
// Special tokens (BOS, EOS, the chat role tokens, ...) never match a grammar byte; other
// added tokens ("｜DSML｜", "<think>", "</think>") only in the tool-call grammar, where
// "｜DSML｜" is part of the markup.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "server/json_grammar.h"
#include "server/tool_grammar.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::server {

// Token byte strings sorted, with the shared-prefix length of each with the one before, and
// where to jump when a prefix is refused: skip[skip_off[i] + d - lcp[i]] is the first entry
// after i that does not start with entry i's first d + 1 bytes. So a mask walk costs one
// grammar byte per trie edge it tries, never a pass over the refused tokens.
struct TokenTrie {
  std::vector<int32_t> ids;     // token ids in byte order
  std::vector<uint32_t> offset; // into TokenIndex::bytes
  std::vector<uint16_t> length;
  std::vector<uint16_t> lcp;    // common prefix with the previous entry
  std::vector<uint8_t> added;   // a non-special added token
  std::vector<uint32_t> skip_off, skip;
};

// The tokens of a tokenizer as tries (TokenTrie), built once per tokenizer (TokenIndexCache):
// all of them, and per fast class the tokens outside it. Fast classes (the grammars'
// fast_class()): tokens every state of that class accepts whatever it is, so their mask bits
// are copied and only the rest is walked.
//   0: JSON string characters: complete UTF-8 without '"', '\\', control bytes or a chat
//      marker ("<｜", "｜DSML", "<think>", "</think>");
//   1: DSML parameter text: complete UTF-8 without '<' or control bytes other than \t \n \r.
struct TokenIndex {
  static constexpr int kClasses = 2;
  TokenTrie all;
  TokenTrie rest[kClasses];
  std::vector<uint64_t> class_bits[kClasses];  // over token ids
  std::vector<int32_t> entry_of;  // token id -> entry of `all`, -1 for special / empty tokens
  std::string bytes;
  size_t max_length = 0;

  static std::shared_ptr<const TokenIndex> build(const tokenizer::Tokenizer& tok);
  std::string_view token(int32_t id) const;  // "" for tokens not indexed
};

class TokenIndexCache {
 public:
  std::shared_ptr<const TokenIndex> get(const tokenizer::Tokenizer& tok);

 private:
  std::once_flag once_;
  std::shared_ptr<const TokenIndex> index_;
};

struct ConstraintStart {
  std::shared_ptr<const TokenIndex> index;
  int32_t eos_token_id = 1;
  bool after_reasoning = false;  // wait for "</think>"
  std::vector<int32_t> forced;   // tokens forced before the grammar
  // Non-empty: the output is free (after the reasoning) until it contains this text; the
  // grammar then takes the bytes after it (tool_choice "auto" with tools: free content until
  // "<｜DSML｜", then a tool-call block held to the grammar). `forced` must be empty.
  std::string wait_for;
  // false: every mask walks the whole vocabulary trie byte by byte, without fast classes or
  // skip tables (the reference the fast masks are tested against).
  bool fast_masks = true;
  // Tests: each mask adds here the grammar bytes its walk fed (the cost the trie and skip
  // tables bound), so a test can hold the walk to a count rather than a time.
  uint64_t* bytes_fed = nullptr;
};

std::shared_ptr<TokenConstraint> make_json_constraint(ConstraintStart start, JsonGrammar grammar, int32_t root_schema);
std::shared_ptr<TokenConstraint> make_tool_constraint(ConstraintStart start, ToolGrammar grammar, int named_tool);

}  // namespace deepinfer::server
