// deepinfer logits --model DIR --tokens-file F --out OUT.npy [--mode prefill|decode|chunk:N]
//                  [--numerics reference|float] [--threads N] [--kernels cpu|ref]
//                  [--compare GOLDEN.f32]
// Row i of OUT ([T, vocab] float32) is the logits after tokens 0..i.
// --compare reads raw little-endian float32 [T, vocab] (the golden sets' format) and prints
// per-row agreement: max |d|, max |d| / row std, argmax agreement, first row above 1e-3 std.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

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

void compare_with(const std::string& path, const std::vector<float>& got, int64_t vocab) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot open");
  const size_t bytes = size_t(in.tellg());
  if (bytes != got.size() * sizeof(float))
    throw std::runtime_error(path + ": holds " + std::to_string(bytes) + " bytes, expected " +
                             std::to_string(got.size() * sizeof(float)) + " (float32 [T, vocab])");
  std::vector<float> want(got.size());
  in.seekg(0);
  in.read(reinterpret_cast<char*>(want.data()), std::streamsize(bytes));
  const int64_t rows = int64_t(got.size()) / vocab;
  double max_abs = 0, max_rel = 0;
  int64_t agree = 0, first_bad = -1, over = 0;
  std::vector<double> rels;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = &got[r * vocab];
    const float* b = &want[r * vocab];
    double mean = 0, var = 0, d = 0;
    for (int64_t c = 0; c < vocab; ++c) mean += b[c];
    mean /= double(vocab);
    for (int64_t c = 0; c < vocab; ++c) {
      var += (b[c] - mean) * (b[c] - mean);
      d = std::max(d, double(std::fabs(a[c] - b[c])));
    }
    const double rel = d / std::sqrt(var / double(vocab));
    rels.push_back(rel);
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, rel);
    if (rel > 1e-3) {
      ++over;
      if (first_bad < 0) first_bad = r;
    }
    agree += (std::max_element(a, a + vocab) - a) == (std::max_element(b, b + vocab) - b);
  }
  std::sort(rels.begin(), rels.end());
  std::printf("rows %lld: max|d| %.3g, max|d|/std %.3g, median |d|/std %.3g, rows > 1e-3 std %lld, "
              "argmax agreement %.4f, first row > 1e-3 std %lld\n",
              (long long)rows, max_abs, max_rel, rels[rels.size() / 2], (long long)over,
              double(agree) / double(rows), (long long)first_bad);
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--memory-limit", "--tokens-file", "--out", "--mode", "--numerics", "--threads", "--kernels", "--compare",
                   "--synthetic", "--seed", "--save"},
            {"--verify-weights", "--expert-parallel", "--numa"});
  check_synthetic_flags(args);
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
  if (world().rank() != 0) return 0;  // every rank holds the same logits; rank 0 writes them
  write_npy_f32(out, logits.data(), int64_t(tokens.size()), model->config().vocab_size);
  log_info("wrote %s [%zu, %lld] (%s numerics)", out.c_str(), tokens.size(),
           (long long)model->config().vocab_size, v4::numerics_name(num.mode));
  // Corrupt weights: the file is written for inspection, but the run fails.
  const std::string bad = nonfinite_rows(logits.data(), int64_t(tokens.size()), model->config().vocab_size);
  if (!bad.empty()) {
    std::fprintf(stderr, "deepinfer logits: error: %s; the checkpoint's weights may be corrupt (--verify-weights scans them)\n",
                 bad.c_str());
    return 1;
  }
  if (auto golden = args.get("--compare")) compare_with(*golden, logits, model->config().vocab_size);
  return 0;
}

CommandRegistration reg("logits", "dump logits of a token file as .npy [T, vocab]", run,
                        "usage: deepinfer logits [--model DIR | --synthetic CONFIG.json] --tokens-file F --out OUT.npy [options]\n\n"
                        DI_USAGE_MODEL DI_USAGE_SYNTHETIC
                        "  --tokens-file F              whitespace-separated token ids\n"
                        "  --out OUT.npy                float32 [T, vocab]; row i = logits after tokens 0..i\n"
                        "  --mode prefill|decode|chunk:N  all at once, one token per call, or N per call\n"
                        "                               (default prefill)\n"
                        "  --compare GOLDEN.npy         report the differences from a reference dump\n"
                        DI_USAGE_COMPUTE DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
