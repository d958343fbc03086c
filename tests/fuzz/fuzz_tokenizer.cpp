// fuzz-sources: src/regex/unicode_tables.cpp src/regex/unicode.cpp src/regex/syntax.cpp src/tokenizer/regex.cpp src/tokenizer/pretokenizer.cpp src/tokenizer/bpe.cpp src/tokenizer/added_tokens.cpp src/tokenizer/tokenizer.cpp src/tokenizer/detokenizer.cpp
// libFuzzer harness: arbitrary bytes through the DeepSeek-V4 tokenizers (tiny and full
// vocabulary). encode() must not throw or crash, decode(encode(x)) must equal the lossy
// UTF-8 of x, and the incremental detokenizer must only emit valid UTF-8 adding up to the
// same text. Run from the repository root (tests/fuzz/run.sh does).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace dt = deepinfer::tokenizer;

static const std::vector<dt::Tokenizer>& tokenizers() {
  static const std::vector<dt::Tokenizer> toks = {
      dt::Tokenizer::from_file("tests/data/tokenizer/tiny_tokenizer.json"),
      dt::Tokenizer::from_file("tests/data/tokenizer/v4_tokenizer.json"),
      dt::Tokenizer::from_file("tests/data/tokenizer/tiny_splits_tokenizer.json"),
  };
  return toks;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string lossy = dt::utf8_lossy(text);
  for (std::size_t k = 0; k < tokenizers().size(); ++k) {
    const dt::Tokenizer& tok = tokenizers()[k];
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    }
    const std::string back = tok.decode(ids);
    if (k < 2) {  // (the splits variant drops "zz" by design, so no round trip there)
      if (back != lossy) std::abort();
      if (tok.decode(tok.encode(text, false)) != lossy) std::abort();
    }
    dt::IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detok.push(id);
      if (!dt::is_valid_utf8(piece)) std::abort();
      streamed += piece;
    }
    streamed += detok.flush();
    if (streamed != dt::utf8_lossy(back)) std::abort();
  }
  return 0;
}
