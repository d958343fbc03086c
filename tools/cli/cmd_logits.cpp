// deepinfer logits --model DIR --tokens-file F --out OUT.npy [--mode prefill|decode|chunk:N]
//                  [--numerics reference|float] [--threads N] [--kernels cpu|ref]
// Row i of OUT ([T, vocab] float32) is the logits after tokens 0..i.
#include "args.h"
#include "command.h"
#include "core/log.h"
#include "model_cli.h"

namespace deepinfer::cli {
namespace {

int64_t parse_mode(const std::string& mode) {
  if (mode == "prefill") return 0;
  if (mode == "decode") return 1;
  if (mode.rfind("chunk:", 0) == 0) {
    char* end = nullptr;
    long n = std::strtol(mode.c_str() + 6, &end, 10);
    if (end != mode.c_str() + 6 && *end == '\0' && n > 0) return n;
  }
  throw ArgError("--mode must be prefill, decode or chunk:N with N > 0, got '" + mode + "'");
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--tokens-file", "--out", "--mode", "--numerics", "--threads", "--kernels"});
  const std::string out = args.require("--out");
  const int64_t chunk = parse_mode(args.get_or("--mode", "prefill"));
  const Compute compute = compute_args(args);
  const v4::Numerics& num = compute.num;
  auto tokens = read_token_file(args.require("--tokens-file"));
  auto model = load_model_arg(args);
  model->check_numerics(num);
  auto st = model->new_sequence();
  std::vector<float> logits;
  run_chunked(*model, tokens, chunk, st, num, &logits);
  write_npy_f32(out, logits.data(), int64_t(tokens.size()), model->config().vocab_size);
  log_info("wrote %s [%zu, %lld] (%s numerics)", out.c_str(), tokens.size(),
           (long long)model->config().vocab_size, v4::numerics_name(num.mode));
  return 0;
}

CommandRegistration reg("logits", "dump logits of a token file as .npy [T, vocab]", run);

}  // namespace
}  // namespace deepinfer::cli
