#include "model_cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string_view>
#include <stdexcept>

#include "command.h"
#include "core/log.h"
#include "engine/sampler.h"
#include "model/deepseek_v4/synthetic.h"

namespace deepinfer::cli {

bool synthetic_arg(const Args& args) {
  const bool synthetic = args.get("--synthetic").has_value();
  if (synthetic && args.get("--model")) throw ArgError("--synthetic and --model: give one of them");
  if (synthetic && world().size() > 1)
    throw ArgError("--synthetic runs in one process: every rank would build all the weights (run it without mpirun)");
  if (synthetic && args.get_int("--seed", 0) < 0) throw ArgError("--seed must be >= 0");
  return synthetic;
}

void check_synthetic_flags(const Args& args) {
  if (!synthetic_arg(args) && (args.get("--seed") || args.get("--save")))
    throw ArgError(std::string(args.get("--seed") ? "--seed" : "--save") + " goes with --synthetic CONFIG.json");
}

std::string synthetic_name(const Args& args) {
  return "synthetic:" + args.require("--synthetic") + " seed " + std::to_string(args.get_int("--seed", 0));
}

namespace {

bool g_synthetic_built = false;

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ArgError("--synthetic " + path + ": cannot open the config");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

void prepare_synthetic_arg(const Args& args, uint64_t extra_bytes, const std::string& extra_what) {
  if (g_synthetic_built) return;
  const std::string path = args.require("--synthetic");
  v4::SyntheticOptions o;
  o.seed = uint64_t(args.get_int("--seed", 0));
  o.extra_bytes = extra_bytes;
  o.extra_what = extra_what;
  const long threads = args.get_int("--threads", default_threads_per_rank());
  if (threads < 1 || threads > 1024) throw ArgError("--threads must be between 1 and 1024");
  ThreadPool pool{int(threads)};
  o.pool = &pool;
  const std::string name = synthetic_name(args);
  v4::InMemoryCheckpoint ckpt = v4::make_synthetic_checkpoint(read_text_file(path), name, o);
  if (auto dir = args.get("--save")) v4::save_synthetic_checkpoint(ckpt, *dir);
  v4::register_in_memory_checkpoint(name, std::move(ckpt));
  g_synthetic_built = true;
}

void release_synthetic_arg(const Args& args) { v4::unregister_in_memory_checkpoint(synthetic_name(args)); }

v4::Config config_arg(const Args& args) {
  if (synthetic_arg(args)) {
    const std::string path = args.require("--synthetic");
    return v4::parse_config(read_text_file(path), path);
  }
  return v4::load_config(model_dir_arg(args) + "/config.json");
}

std::string model_dir_arg(const Args& args) {
  if (synthetic_arg(args)) return synthetic_name(args);
  std::string dir = args.get_or("--model", "");
  return dir.empty() ? default_model_dir() : dir;
}

int64_t parse_bytes(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  std::string unit(end ? end : "");
  double mult = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024.0 * 1024.0;
  else if (!unit.empty()) throw ArgError(flag + ": unknown unit '" + unit + "' (use K, M or G)");
  if (end == v.c_str() || !(x > 0)) throw ArgError(flag + " expects a positive size, got '" + v + "'");
  return int64_t(x * mult);
}

int64_t memory_limit_arg(const Args& args) {
  const auto v = args.get("--memory-limit");
  return v ? parse_bytes("--memory-limit", *v) : 0;
}

std::unique_ptr<v4::Model> load_model_arg(const Args& args) {
  if (synthetic_arg(args)) {
    prepare_synthetic_arg(args, uint64_t(1) << 30, "1 GiB of working memory");
    v4::LoadOptions options{args.has("--verify-weights")};
    auto model = v4::Model::load(synthetic_name(args), options);
    release_synthetic_arg(args);
    return model;
  }
  if (!args.get("--model"))
    log_info("no --model given: using the embedded default checkpoint %s (" DI_DEFAULT_MODEL_WHAT ")", default_model_dir().c_str());
  dist::Communicator& comm = world();
  v4::LoadOptions options{args.has("--verify-weights")};
  options.comm = &comm;
  options.expert_parallel = args.has("--expert-parallel");
  options.numa = args.has("--numa");
  const v4::WeightBudget budget = v4::weight_budget(memory_limit_arg(args), v4::kWorkingMemoryReserve);
  if (budget.strict && budget.bytes <= 0)
    throw ArgError("--memory-limit leaves nothing for the weights (" + budget.source + ")");
  options.weight_budget = std::max<int64_t>(1, budget.bytes);
  options.weight_budget_strict = budget.strict;
  if (comm.size() == 1) return v4::Model::load(model_dir_arg(args), options);
  // Every rank loads; then they agree, so that one rank's failure ends all of them with its
  // reason instead of leaving the others waiting in the first collective.
  std::unique_ptr<v4::Model> model;
  std::string error;
  try {
    if (!options.expert_parallel)
      throw ArgError("started as " + std::to_string(comm.size()) +
                     " ranks: pass --expert-parallel (each rank then holds 1/N of the routed experts)");
    model = v4::Model::load(model_dir_arg(args), options);
  } catch (const std::exception& e) {
    error = e.what();
  }
  dist::agree(comm, error);
  return model;
}

EngineOptions engine_options_from_args(const Args& args) {
  EngineOptions o;
  o.model_dir = synthetic_arg(args) ? synthetic_name(args) : args.get_or("--model", "");
  if (o.model_dir.empty()) {
    o.model_dir = default_model_dir();
    log_info("no --model given: using the embedded default checkpoint %s (" DI_DEFAULT_MODEL_WHAT ")", o.model_dir.c_str());
  }
  const long threads = args.get_int("--threads", default_threads_per_rank());
  if (threads < 1 || threads > 1024) throw ArgError("--threads must be between 1 and 1024");
  o.threads = int(threads);
  o.comm = &world();
  o.expert_parallel = args.has("--expert-parallel");
  o.numa = args.has("--numa");
  o.memory_limit_bytes = memory_limit_arg(args);
  o.numerics = args.get_or("--numerics", "reference");
  if (o.numerics != "reference" && o.numerics != "float") throw ArgError("--numerics must be reference or float");
  o.kernels = args.get_or("--kernels", "cpu");
  if (o.kernels != "cpu" && o.kernels != "ref" && o.kernels != "cpu-avx2" && o.kernels != "cpu-avx512" &&
      o.kernels != "cpu-scalar")
    throw ArgError("--kernels must be cpu or ref (or cpu-avx2, cpu-avx512, cpu-scalar to force an ISA)");
  o.verify_weights = args.has("--verify-weights");
  o.speculative = args.get_or("--speculative", "auto");
  o.num_draft_tokens = args.get_int("--num-draft-tokens", 0);
  return o;
}

std::unique_ptr<Engine> create_engine(const EngineOptions& o) {
  return flag_errors_as_arg_errors([&] { return Engine::create(o); });
}

int default_threads_per_rank() {
  // Ranks sharing a machine share its cores (OpenMPI tells each rank how many there are).
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int n_local = local ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, ThreadPool::default_threads() / n_local);
}

Compute compute_args(const Args& args) {
  Compute c;
  const long threads = args.get_int("--threads", default_threads_per_rank());
  if (threads < 1 || threads > 1024) throw ArgError("--threads must be between 1 and 1024");
  try {
    c.num.mode = v4::parse_numerics(args.get_or("--numerics", "reference"));
    c.pool = std::make_unique<ThreadPool>(int(threads));
    c.backend = kernels::make_backend(args.get_or("--kernels", "cpu"), c.pool.get());
  } catch (const std::invalid_argument& e) {
    throw ArgError(e.what());
  }
  c.num.backend = c.backend.get();
  return c;
}

std::vector<int32_t> read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open token file");
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    long v = std::strtol(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0' || v < 0 || v > INT32_MAX)
      throw std::runtime_error(path + ": '" + word + "' is not a token id");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) throw std::runtime_error(path + ": no token ids");
  return ids;
}

void run_chunked(const v4::Model& m, const std::vector<int32_t>& tokens, int64_t chunk, v4::SequenceState& st,
                 const v4::Numerics& num, std::vector<float>* logits) {
  const int64_t S = int64_t(tokens.size()), V = m.config().vocab_size;
  if (chunk <= 0) chunk = S;
  if (logits) logits->assign(S * V, 0.0f);
  for (int64_t i = 0; i < S; i += chunk) {
    const int64_t n = std::min(chunk, S - i);
    m.forward(tokens.data() + i, n, st, num, logits ? logits->data() + i * V : nullptr);
    if (S > chunk && (i / chunk) % 64 == 63) log_info("processed %lld / %lld tokens", (long long)(i + n), (long long)S);
  }
}

std::string nonfinite_rows(const float* logits, int64_t rows, int64_t cols) {
  constexpr int64_t kShown = 8;
  std::vector<int64_t> bad;
  int64_t n_bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    if (engine::first_nonfinite(logits + r * cols, cols) >= 0 && n_bad++ < kShown) bad.push_back(r);
  if (n_bad == 0) return "";
  std::string s = std::to_string(n_bad) + " of " + std::to_string(rows) + " logits rows are non-finite (NaN or Inf): row" +
                  (n_bad > 1 ? "s " : " ");
  for (size_t i = 0; i < bad.size(); ++i) s += (i ? ", " : "") + std::to_string(bad[i]);
  if (n_bad > kShown) s += ", ...";
  return s;
}

void write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols) {
  std::ostringstream h;
  h << "{'descr': '<f4', 'fortran_order': False, 'shape': (" << rows << ", " << cols << "), }";
  std::string header = h.str();
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path + ": cannot write");
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  uint16_t len = uint16_t(header.size());
  out.put(char(len & 0xff));
  out.put(char(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(data), std::streamsize(rows * cols * sizeof(float)));
  if (!out) throw std::runtime_error(path + ": write failed");
}

}  // namespace deepinfer::cli
