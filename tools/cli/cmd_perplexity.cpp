// deepinfer perplexity [--model DIR] (--file TEXT | --tokens-file F) [--context N] [options]
// Held-out perplexity: the text is tokenized with the model's tokenizer (no BOS; special-token
// strings matched, as `tokenize` does) and cut into consecutive windows of N-1 tokens; each
// window is a fresh sequence BOS + its tokens, prefilled at once, and every token after BOS is
// scored by the log-softmax of the row before it. tools/train/train.py evaluates the same
// windows, so the two figures can be compared. Prints one JSON object on stdout.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "command.h"
#include "model_cli.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ArgError("cannot open --file " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Natural-log probability of `target` under the softmax of row[0..V), in double.
double log_prob(const float* row, int64_t V, int32_t target) {
  double m = row[0];
  for (int64_t i = 1; i < V; ++i) m = std::max(m, double(row[i]));
  double z = 0.0;
  for (int64_t i = 0; i < V; ++i) z += std::exp(double(row[i]) - m);
  return double(row[target]) - m - std::log(z);
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--memory-limit", "--file", "--tokens-file", "--context", "--numerics", "--threads", "--kernels"},
            {"--verify-weights", "--numa"});
  if (args.get("--file").has_value() == args.get("--tokens-file").has_value())
    throw ArgError("give exactly one of --file or --tokens-file");
  const long context = args.get_int("--context", 512);
  if (context < 2) throw ArgError("--context must be >= 2 (BOS and one scored token)");
  const Compute compute = compute_args(args);
  const v4::Numerics& num = compute.num;
  auto model = load_model_arg(args);
  model->check_numerics(num);
  const v4::Config& cfg = model->config();
  std::vector<int32_t> ids;
  if (auto f = args.get("--file")) {
    auto tok = tokenizer::Tokenizer::from_file(model_dir_arg(args) + "/tokenizer.json");
    ids = tok.encode(read_file(*f));
  } else {
    ids = read_token_file(*args.get("--tokens-file"));
  }
  if (ids.empty()) throw ArgError("the text has no tokens");
  const int64_t V = cfg.vocab_size, n = context - 1;
  for (int32_t id : ids)
    if (id < 0 || id >= V) throw ArgError("token id " + std::to_string(id) + " is outside the vocabulary");
  double nll = 0.0;
  int64_t scored = 0, windows = 0;
  std::vector<int32_t> win;
  std::vector<float> logits;
  for (size_t start = 0; start < ids.size(); start += size_t(n)) {
    const size_t end = std::min(ids.size(), start + size_t(n));
    win.assign(1, int32_t(cfg.bos_token_id));
    win.insert(win.end(), ids.begin() + int64_t(start), ids.begin() + int64_t(end));
    const int64_t T = int64_t(win.size());
    logits.resize(size_t(T * V));
    auto st = model->new_sequence();
    model->forward_batch({v4::SequenceChunk{win.data(), T, &st, logits.data(), true}}, num);
    const std::string bad = nonfinite_rows(logits.data(), T, V);
    if (!bad.empty()) throw std::runtime_error(bad + "; the checkpoint's weights may be corrupt");
    for (int64_t t = 0; t + 1 < T; ++t) nll -= log_prob(&logits[size_t(t * V)], V, win[size_t(t + 1)]);
    scored += T - 1;
    ++windows;
  }
  const double mean = nll / double(scored);
  std::printf("{\"tokens\": %lld, \"windows\": %lld, \"context\": %ld, \"numerics\": \"%s\", \"nll\": %.9g, "
              "\"ppl\": %.9g}\n",
              (long long)scored, (long long)windows, context, v4::numerics_name(num.mode), mean, std::exp(mean));
  return 0;
}

CommandRegistration reg("perplexity", "held-out perplexity of a text file (BOS + windows of N-1 tokens)", run,
                        "usage: deepinfer perplexity [--model DIR] (--file TEXT | --tokens-file F) [options]\n\n"
                        "  --model DIR                  checkpoint directory (default: the embedded one)\n"
                        "  --file TEXT                  a text file, tokenized with the model's tokenizer (no BOS)\n"
                        "  --tokens-file F              or whitespace-separated token ids (no BOS)\n"
                        "  --context N                  window length including the BOS of each window\n"
                        "                               (default 512)\n"
                        DI_USAGE_COMPUTE DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
