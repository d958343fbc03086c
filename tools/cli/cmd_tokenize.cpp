// deepinfer tokenize / detokenize: text <-> ids with a model's tokenizer.json.
//
//   deepinfer tokenize   [--model DIR|tokenizer.json] [--text-file F] [--no-special]
//       Reads the text (bytes) from F, or stdin when no file is given, and prints the ids
//       on one line, separated by spaces, followed by a newline. No BOS is added. Strings
//       of added/special tokens in the text are matched as those tokens, unless
//       --no-special is given (then they are tokenized as plain text).
//   deepinfer detokenize [--model DIR|tokenizer.json] [--ids "1 2 3"] [--skip-special]
//       Takes the ids from --ids, or from stdin when absent (separated by spaces, commas or
//       newlines), and writes exactly the decoded bytes: no newline is added, and no
//       UTF-8 repair is done (a byte-level token sequence cut inside a character prints
//       the raw bytes).
// A DIR means DIR/tokenizer.json; without --model the default model directory is used.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

std::string read_all(std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); }

std::string read_text(const Args& args) {
  if (auto f = args.get("--text-file")) {
    FILE* fp = std::fopen(f->c_str(), "rb");
    if (!fp) throw ArgError("cannot open --text-file " + *f);
    std::string s;
    char buf[1 << 16];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
    std::fclose(fp);
    return s;
  }
  std::ios::sync_with_stdio(false);
  return read_all(std::cin);
}

std::vector<int32_t> parse_ids(const std::string& s, int32_t vocab_size) {
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size()) throw ArgError("'" + tok + "' is not a token id");
    if (v < 0 || v >= vocab_size) {
      throw ArgError("token id " + tok + " is out of range (vocabulary size " + std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(v));
    tok.clear();
  };
  for (char c : s) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t') {
      flush();
    } else {
      tok.push_back(c);
    }
  }
  flush();
  return ids;
}

tokenizer::Tokenizer load(const Args& args) {
  return tokenizer::Tokenizer::from_file(args.get_or("--model", default_model_dir()));
}

int cmd_tokenize(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--text-file"}, {"--no-special"});
  const tokenizer::Tokenizer tok = load(args);
  const std::string text = read_text(args);
  const std::vector<int32_t> ids = tok.encode(text, !args.has("--no-special"));
  std::string line;
  line.reserve(ids.size() * 7 + 1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(' ');
    line += std::to_string(ids[i]);
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int cmd_detokenize(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--ids"}, {"--skip-special"});
  const tokenizer::Tokenizer tok = load(args);
  std::string id_text;
  if (auto s = args.get("--ids")) {
    id_text = *s;
  } else {
    std::ios::sync_with_stdio(false);
    id_text = read_all(std::cin);
  }
  const std::vector<int32_t> ids = parse_ids(id_text, tok.vocab_size());
  const std::string out = tok.decode(ids, args.has("--skip-special"));
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

const CommandRegistration reg_tokenize(
    "tokenize", "text (file or stdin) -> token ids with the model's tokenizer.json", cmd_tokenize,
    "usage: deepinfer tokenize [--model DIR_OR_TOKENIZER_JSON] [--text-file F] [--no-special]\n\n"
    "  --model DIR_OR_TOKENIZER_JSON  (default: the embedded checkpoint's tokenizer)\n"
    "  --text-file F                the text (default: stdin); no BOS is added\n"
    "  --no-special                 special-token strings are plain text\n");
const CommandRegistration reg_detokenize(
    "detokenize", "token ids -> exact text bytes", cmd_detokenize,
    "usage: deepinfer detokenize [--model DIR_OR_TOKENIZER_JSON] [--ids \"1 2 3\"] [--skip-special]\n\n"
    "  --model DIR_OR_TOKENIZER_JSON  (default: the embedded checkpoint's tokenizer)\n"
    "  --ids \"1 2 3\"                token ids (default: read from stdin)\n"
    "  --skip-special               leave special tokens out\n");

}  // namespace
}  // namespace deepinfer::cli
