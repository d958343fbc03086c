// deepinfer generate --model DIR --tokens-file F -n N [--numerics ...] [--threads N]
// Prints the greedy continuation (ties to the lowest id, no EOS stop) as ids on one line.
#include <cstdio>

#include "args.h"
#include "command.h"
#include "model_cli.h"

namespace deepinfer::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--tokens-file", "-n", "--numerics", "--threads", "--kernels"});
  const long n = args.get_int("-n", 16);
  if (n < 0) throw ArgError("-n must be >= 0");
  const Compute compute = compute_args(args);
  const v4::Numerics& num = compute.num;
  auto tokens = read_token_file(args.require("--tokens-file"));
  auto model = load_model_arg(args);
  model->check_numerics(num);
  const int64_t V = model->config().vocab_size;
  auto st = model->new_sequence();
  std::vector<float> logits;
  run_chunked(*model, tokens, 0, st, num, &logits);
  int32_t next = argmax_lowest(&logits[(tokens.size() - 1) * V], V);
  std::vector<float> row(V);
  std::string line;
  for (long i = 0; i < n; ++i) {
    line += (i ? " " : "") + std::to_string(next);
    if (i + 1 == n) break;
    model->forward(&next, 1, st, num, row.data());
    next = argmax_lowest(row.data(), V);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

CommandRegistration reg("generate", "greedy continuation of a token file", run);

}  // namespace
}  // namespace deepinfer::cli
