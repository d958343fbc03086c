// Helpers shared by the subcommands that run the model.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "args.h"
#include "deepinfer/engine.h"
#include "model/deepseek_v4/model.h"

// Usage lines of the commands that take --synthetic (bench, logits).
#define DI_USAGE_SYNTHETIC \
  "  --synthetic CONFIG.json      instead of --model: build the weights of any V4 config.json in\n" \
  "                               memory (the official layout and dtypes, random values from the\n" \
  "                               seed; refused when the machine lacks the memory); no tokenizer\n" \
  "  --seed N                     with --synthetic: the weights' seed (default 0)\n" \
  "  --save DIR                   with --synthetic: also write them to DIR (empty or new) as a\n" \
  "                               checkpoint folder (config.json, model.safetensors)\n"

namespace deepinfer::cli {

// A size flag's value: plain bytes or a K / M / G (KiB / MiB / GiB) suffix; ArgError otherwise.
int64_t parse_bytes(const std::string& flag, const std::string& v);
// --memory-limit SIZE (0 when not given: what the process may use).
int64_t memory_limit_arg(const Args& args);

// --model DIR, or the embedded default checkpoint when omitted; with --synthetic, the name its
// in-memory checkpoint is registered under.
std::string model_dir_arg(const Args& args);
// With --synthetic, builds the checkpoint first (prepare_synthetic_arg) unless it is built.
std::unique_ptr<v4::Model> load_model_arg(const Args& args);

// --synthetic CONFIG.json [--seed N] [--save DIR] (bench, logits): the weights of CONFIG built
// in memory from the seed (v4::make_synthetic_checkpoint: the official layout, random values)
// instead of read from --model; --save also writes them as a checkpoint folder. Checks the
// flags (ArgError: --synthetic with --model, several ranks).
bool synthetic_arg(const Args& args);
// For the commands that take --synthetic: ArgError for --seed / --save without it.
void check_synthetic_flags(const Args& args);
// The name Model::load finds the synthetic checkpoint under: "synthetic:CONFIG.json seed N".
std::string synthetic_name(const Args& args);
// Builds it on --threads threads, refusing (std::runtime_error naming both figures) when the
// machine lacks the memory for the weights and extra_bytes more (extra_what says what they
// are); saves it with --save DIR; registers it under synthetic_name(args). Once per process.
void prepare_synthetic_arg(const Args& args, uint64_t extra_bytes, const std::string& extra_what);
// Forgets the registration (a model loaded from it keeps the weights alive).
void release_synthetic_arg(const Args& args);
// The config of --synthetic's file or of the --model checkpoint (config.json).
v4::Config config_arg(const Args& args);
// The EngineOptions of the flags every Engine-backed subcommand (generate, chat, serve,
// bench) shares: --model (or the embedded default), --threads, --numerics, --kernels,
// --speculative, --num-draft-tokens, --verify-weights, --expert-parallel; and the job's
// communicator.
EngineOptions engine_options_from_args(const Args& args);
// Engine::create, where a refusal that names one of the flags ("--speculative mtp: this
// checkpoint ...") is an ArgError (exit 2) like any other bad argument.
std::unique_ptr<Engine> create_engine(const EngineOptions& o);
// The same for any engine start-up (bench's engine without its thread): make(), with a
// std::runtime_error that names a flag rethrown as an ArgError.
template <class Make>
auto flag_errors_as_arg_errors(Make make) -> decltype(make()) {
  try {
    return make();
  } catch (const std::runtime_error& e) {
    if (std::string_view(e.what()).substr(0, 2) == "--") throw ArgError(e.what());
    throw;
  }
}
// How to compute: --numerics reference|float (default reference), --threads N (default all
// cores), --kernels cpu|ref (default cpu; ref is the slow scalar referee).
struct Compute {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<kernels::Backend> backend;
  v4::Numerics num;
};
Compute compute_args(const Args& args);
// --threads' default: the machine's cores over the ranks of this job on it.
int default_threads_per_rank();
std::vector<int32_t> read_token_file(const std::string& path);
// Runs tokens through the model in chunks of `chunk` tokens (0 = all at once).
// Writes all rows' logits [S, vocab] into logits if not null.
void run_chunked(const v4::Model& m, const std::vector<int32_t>& tokens, int64_t chunk, v4::SequenceState& st,
                 const v4::Numerics& num, std::vector<float>* logits);
// "" when every value of logits [rows, cols] is finite, else how many rows are not and the
// first few of them ("3 of 7 logits rows are non-finite (NaN or Inf): rows 0, 1, 2").
std::string nonfinite_rows(const float* logits, int64_t rows, int64_t cols);
void write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols);

}  // namespace deepinfer::cli
