// The tokenizer as the bindings hold it: shared between the engine's stop-string text
// function, the batches decoding its output, and Python.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace deepinfer::python {

struct TextTokenizer {
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  static TextTokenizer load(const std::string& path);
};

}  // namespace deepinfer::python
