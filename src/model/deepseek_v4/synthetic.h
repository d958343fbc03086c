// Synthetic DeepSeek-V4 checkpoints: the weights of any V4 / V4.1 config.json built in memory
// from a seed, in the official layout (docs/model/checkpoint.md §1-§2, and what tools/golden/
// make_checkpoint.py writes): the same tensor names, shapes and storage dtypes as a released
// checkpoint — FP8 e4m3 matrices with ue8m0 B x B block scales, packed FP4 e2m1 routed experts
// with ue8m0 1 x 32 scales, BF16 embeddings / norms / router / compressor projections, F32
// mHC / sinks / biases / ape, I32 hash-routing tables — as one safetensors image that the
// normal loader parses and bind_weights binds (Model::load of an InMemoryCheckpoint). Nothing
// touches the disk unless asked (save_synthetic_checkpoint). `deepinfer bench --synthetic
// CONFIG.json` measures a full-size model this way without downloading it.
//
// The values are random, not trained; their scales follow make_checkpoint.py's calm init
// (matrices ~ N(0, gain^2 / in), small output gains on wo_b and w2, norms ~ 1 + N(0, 0.1^2),
// router bias ~ N(0, 0.1^2)), so activations stay finite and routing spreads over the experts.
// Every byte is a function of (seed, tensor name, element index) through a counter-based hash
// (splitmix64's finaliser): the image is the same whatever the thread count, and a tensor's
// bytes do not depend on which other tensors the config has. Two simplifications against
// make_checkpoint.py (the layout is the same; the values are drawn differently): an FP8
// matrix has one scale exponent for all its blocks (the one a block of 3.46 sigma amax gets),
// and FP4 experts always take its "fast_experts" byte table.
//
// V4.1 Engram layers are refused (their compressed token map is a file of the checkpoint).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::v4 {

// How one tensor's bytes are made.
enum class SyntheticFill : uint8_t {
  kNormal,     // F32 / BF16: mean + std * n, n bell-shaped with unit variance (bounded at 3.46)
  kUniform,    // F32: uniform in [mean, mean + std)
  kFp8,        // e4m3 codes of n * std / 2^scale_exp
  kFp4,        // packed e2m1 codes, two per byte (low nibble = even column), from a byte table
  kConstant,   // every byte `byte` (the ue8m0 scales: 127 + the weight's scale_exp)
  kExpertIds,  // I32 [vocab, top-k]: per row top-k distinct expert ids below n_experts
};

struct SyntheticTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  SyntheticFill fill = SyntheticFill::kNormal;
  double mean = 0.0, std = 0.0;
  int scale_exp = 0;      // kFp8 / kFp4
  uint8_t byte = 0;       // kConstant
  int64_t n_experts = 0;  // kExpertIds
  size_t offset = 0;      // in the image's data section
  size_t nbytes = 0;
};

struct SyntheticPlan {
  std::vector<SyntheticTensor> tensors;  // in file order: wider dtypes first, then by name
  std::string header;                    // the safetensors JSON header, padded to 8 bytes
  size_t data_bytes = 0;
  size_t image_bytes() const { return 8 + header.size() + data_bytes; }
};

// Every tensor a checkpoint of cfg holds, where it lies in the image and how it is filled.
// Throws std::runtime_error naming what it cannot synthesise.
SyntheticPlan plan_synthetic(const Config& cfg, uint64_t seed);

// The memory this process may still take: MemAvailable of /proc/meminfo, or less where a
// cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) leaves less.
struct MemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // where the figure comes from, for messages
};
MemoryBudget available_memory();

struct SyntheticOptions {
  uint64_t seed = 0;
  ThreadPool* pool = nullptr;  // null: the calling thread alone (the bytes are the same)
  // What the caller will allocate besides the weights (a KV pool, working memory): counted
  // in the memory check.
  uint64_t extra_bytes = 0;
  std::string extra_what = "working memory";
  // What the check compares with; unset: available_memory().
  std::optional<MemoryBudget> budget;
};

// Builds the checkpoint of the config.json text `config_json` in memory. `name` stands for its
// directory in logs and errors. Before allocating anything, throws std::runtime_error naming
// both figures when the image and extra_bytes need more memory than the budget.
InMemoryCheckpoint make_synthetic_checkpoint(const std::string& config_json, const std::string& name,
                                             const SyntheticOptions& options);

// Writes the checkpoint as a folder the normal loader reads: config.json (the text verbatim),
// generation_config.json, model.safetensors (the image byte for byte) and README.txt (says
// the weights are random). dir is created if missing; a non-empty dir is refused.
void save_synthetic_checkpoint(const InMemoryCheckpoint& checkpoint, const std::string& dir);

}  // namespace deepinfer::v4
