#include "model/deepseek_v4/synthetic.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "core/log.h"
#include "core/thread_pool.h"
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Random bits: a counter-based hash, so that any element can be made by any thread.

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t element_hash(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull); }

// One key per (seed, tensor name).
uint64_t tensor_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed + 0x5eed5eed5eedull));
}

// A bell-shaped value with unit variance from 64 random bits: the sum of four 16-bit uniforms
// (Irwin-Hall), centred and scaled; bounded at 2 sqrt(3) = 3.46. Only exactly rounded float
// operations: the same value on every x86-64 build (the project compiles without FP contraction).
float unit_noise(uint64_t h) {
  const uint32_t sum = uint32_t(h & 0xffff) + uint32_t((h >> 16) & 0xffff) + uint32_t((h >> 32) & 0xffff) +
                       uint32_t(h >> 48);
  const float s = (float(sum) + 2.0f) * (1.0f / 65536.0f) - 2.0f;  // exact: sum < 2^18
  return s * 1.7320508f;
}

constexpr double kNoiseBound = 3.4641016;  // the largest |unit_noise|

// ---------------------------------------------------------------------------------------------
// Number formats.

uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite inputs)
  return uint16_t(u >> 16);
}

// e4m3fn code of x, round to nearest even, saturating at 448 (never the NaN codes 0x7f /
// 0xff, never negative zero).
uint8_t f32_to_e4m3(float x) {
  const bool neg = x < 0.0f;
  const float a = std::fabs(x);
  uint32_t code;
  if (!(a < 448.0f)) {
    code = 0x7e;
  } else if (a < 0.015625f) {  // below 2^-6: subnormals, steps of 2^-9
    code = uint32_t(std::nearbyint(a * 512.0f));  // 8 rounds up into the first normal, code 8
  } else {
    int e = 0;
    const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
    const float q = std::nearbyint((f * 2.0f - 1.0f) * 8.0f);  // mantissa steps, 8 carries
    code = uint32_t((e - 1 + 7) << 3) + uint32_t(q);
    code = std::min<uint32_t>(code, 0x7e);
  }
  if (code == 0) return 0;
  return uint8_t(code | (neg ? 0x80u : 0u));
}

// Packed FP4 bytes from random bytes, as make_checkpoint.py's fast experts: each nibble's
// magnitude code from (0, .5, .5, 1, 1, 1.5, 2, 3) by its low three bits, its sign bit kept
// (no negative zero). Bell-shaped, symmetric, RMS sqrt(17.75 / 8).
struct Fp4Table {
  uint8_t byte[256];
  Fp4Table() {
    static const uint8_t kMag[8] = {0, 1, 1, 2, 2, 3, 4, 5};  // e2m1 magnitude codes
    uint8_t nib[16];
    for (int n = 0; n < 16; ++n) {
      uint8_t c = uint8_t(kMag[n & 7] | (n & 8));
      nib[n] = c == 8 ? 0 : c;
    }
    for (int b = 0; b < 256; ++b) byte[b] = uint8_t(nib[b & 15] | (nib[b >> 4] << 4));
  }
};
const Fp4Table kFp4Table;
const double kFp4TableRms = std::sqrt(17.75 / 8.0);

// ---------------------------------------------------------------------------------------------
// The tensor list (the order of make_checkpoint.py's Builder; the file order is set later).

class Planner {
 public:
  explicit Planner(const Config& c) : c_(c), rules_(release_rules(c)) {}

  std::vector<SyntheticTensor> build() {
    const Config& c = c_;
    const int64_t V = c.vocab_size, d = c.dim, L = c.n_layers;
    normal_bf16("embed.weight", {V, d}, 1.0);
    normal_bf16("head.weight", {V, d}, 3.0 / std::sqrt(double(d)));
    norm("norm.weight", d);
    if (!rules_.staggered_mhc) hc("", "hc_head", c.hc_mult);
    // The first n_hash_layers route by token id (none in V4.1: its config parser holds it at 0).
    for (int64_t l = 0; l < L; ++l)
      block("layers." + std::to_string(l) + ".", l, c.ratio(l), l < c.n_hash_layers, false);
    if (rules_.drafting == Drafting::kDspark) {
      if (c.n_mtp_layers > 0) dspark();
    } else {
      for (int64_t m = 0; m < c.n_mtp_layers; ++m) {
        const std::string p = "mtp." + std::to_string(m) + ".";
        block(p, L + m, c.ratio(L + m), false, true);
        fp8(p + "e_proj", d, d);
        fp8(p + "h_proj", d, d);
        norm(p + "enorm.weight", d);
        norm(p + "hnorm.weight", d);
        norm(p + "norm.weight", d);
        hc(p, "hc_head", c.hc_mult);
      }
    }
    return std::move(out_);
  }

 private:
  SyntheticTensor& add(const std::string& name, DType dt, std::vector<int64_t> shape, SyntheticFill fill) {
    SyntheticTensor t;
    t.name = name;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.fill = fill;
    uint64_t n = 1;
    for (int64_t x : t.shape) n *= uint64_t(x);
    t.nbytes = size_t(n) * dtype_size(dt);
    out_.push_back(std::move(t));
    return out_.back();
  }
  void normal_bf16(const std::string& name, std::vector<int64_t> shape, double std, double mean = 0.0) {
    SyntheticTensor& t = add(name, DType::BF16, std::move(shape), SyntheticFill::kNormal);
    t.std = std;
    t.mean = mean;
  }
  void normal_f32(const std::string& name, std::vector<int64_t> shape, double std) {
    add(name, DType::F32, std::move(shape), SyntheticFill::kNormal).std = std;
  }
  void uniform_f32(const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    SyntheticTensor& t = add(name, DType::F32, std::move(shape), SyntheticFill::kUniform);
    t.mean = lo;
    t.std = hi - lo;
  }
  void norm(const std::string& name, int64_t n, std::vector<int64_t> shape = {}) {
    normal_bf16(name, shape.empty() ? std::vector<int64_t>{n} : shape, 0.1, 1.0);
  }
  // FP8 e4m3 [out, in] ~ N(0, gain^2 / in) and its ue8m0 [ceil(out/B), ceil(in/B)] scales. One
  // exponent k for every block: the smallest with 3.46 sigma <= 448 * 2^k.
  void fp8(const std::string& prefix, int64_t out_f, int64_t in_f, double gain = 1.0) {
    const int64_t B = c_.weight_block;
    const double std = gain / std::sqrt(double(in_f));
    const int k = int(std::ceil(std::log2(kNoiseBound * std / 448.0)));
    SyntheticTensor& w = add(prefix + ".weight", DType::F8_E4M3, {out_f, in_f}, SyntheticFill::kFp8);
    w.std = std;
    w.scale_exp = k;
    scale(prefix + ".scale", {(out_f + B - 1) / B, (in_f + B - 1) / B}, k);
  }
  // Routed expert: packed FP4 [out, in/2] ~ N(0, gain^2 / in) with ue8m0 [out, in/32] scales.
  void fp4(const std::string& prefix, int64_t out_f, int64_t in_f, double gain = 1.0) {
    if (in_f % 32 != 0)
      throw std::runtime_error("synthetic checkpoint: routed expert " + prefix + " has an input width of " +
                               std::to_string(in_f) + ", not a multiple of 32 (its FP4 scales cover 32 columns each)");
    const double std = gain / std::sqrt(double(in_f));
    const int k = int(std::floor(std::log2(std / kFp4TableRms) + 0.5));
    add(prefix + ".weight", DType::I8, {out_f, in_f / 2}, SyntheticFill::kFp4).scale_exp = k;
    scale(prefix + ".scale", {out_f, in_f / 32}, k);
  }
  void scale(const std::string& name, std::vector<int64_t> shape, int k) {
    if (k < -127 || k > 127) throw std::runtime_error("synthetic checkpoint: " + name + ": scale 2^" + std::to_string(k) + " has no ue8m0 code");
    SyntheticTensor& s = add(name, DType::F8_E8M0, std::move(shape), SyntheticFill::kConstant);
    s.byte = uint8_t(127 + k);
    s.scale_exp = k;
  }
  void hc(const std::string& prefix, const std::string& kind, int64_t n_out) {
    const int64_t nhc = c_.hc_mult, d = c_.dim;
    normal_f32(prefix + kind + "_fn", {n_out, nhc * d}, 0.3 / std::sqrt(double(nhc * d)));
    normal_f32(prefix + kind + "_base", {n_out}, 0.5);
    uniform_f32(prefix + kind + "_scale", {kind == "hc_head" ? 1 : 3}, 0.2, 1.0);
  }
  void compressor(const std::string& p, int64_t width, int64_t dh, int64_t ratio) {
    const double std = 1.0 / std::sqrt(double(c_.dim));
    normal_bf16(p + "wkv.weight", {width, c_.dim}, std);
    normal_bf16(p + "wgate.weight", {width, c_.dim}, std);
    normal_f32(p + "ape", {ratio, width}, 0.5);
    norm(p + "norm.weight", dh);
  }
  static bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

  // Shared attention runtime (V4.1, docs/model/checkpoint.md §2): compressor + index keys at KV sources,
  // indexer queries at index sources.
  void shared_attention(const std::string& a, int64_t layer) {
    const Config& c = c_;
    const int64_t d = c.dim, Dh = c.head_dim;
    const double std = 1.0 / std::sqrt(double(d));
    if (contains(c.kv_source_layers, layer)) {
      normal_bf16(a + "compressor.wkv.weight", {Dh, d}, std);
      if (c.ratio(layer) > 1) normal_bf16(a + "compressor.wgate.weight", {Dh, d}, std);
      norm(a + "compressor.norm.weight", Dh);
      normal_bf16(a + "indexer.wk.weight", {c.index_head_dim, Dh}, 1.0 / std::sqrt(double(Dh)));
      norm(a + "indexer.k_norm.weight", c.index_head_dim);
    }
    if (contains(c.index_source_layers, layer)) {
      fp8(a + "indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      normal_bf16(a + "indexer.weights_proj.weight", {c.index_n_heads, d}, std);
    }
  }

  void block(const std::string& p, int64_t layer, int64_t ratio, bool hash_routed, bool is_stage) {
    const Config& c = c_;
    const bool shared = rules_.shared_attention_runtime;
    const int64_t d = c.dim, H = c.n_heads, Dh = c.head_dim, ql = c.q_lora_rank;
    // The stages of a DSpark drafter run the MoE the loader binds them with.
    const bool dspark_stage = is_stage && c.has_dspark();
    const int64_t E = dspark_stage ? c.dspark_n_routed_experts : c.n_routed_experts;
    const int64_t k = dspark_stage ? c.dspark_n_activated_experts : c.n_activated_experts;
    const int64_t inter = c.moe_inter_dim, shared_inter = inter * c.n_shared_experts;
    const int64_t mix = (2 + c.hc_mult) * c.hc_mult;
    const double attn_out_gain = 0.002, ffn_out_gain = 0.005;  // make_checkpoint.py's calm init

    norm(p + "attn_norm.weight", d);
    norm(p + "ffn_norm.weight", d);
    hc(p, "hc_attn", mix);
    hc(p, "hc_ffn", mix);
    const std::string a = p + "attn.";
    normal_f32(a + "attn_sink", {H}, 0.7);
    fp8(a + "wq_a", ql, d);
    norm(a + "q_norm.weight", ql);
    fp8(a + "wq_b", H * Dh, ql);
    fp8(a + "wkv", Dh, d);
    norm(a + "kv_norm.weight", Dh);
    fp8(a + "wo_a", c.o_groups * c.o_lora_rank, H * Dh / c.o_groups);
    fp8(a + "wo_b", d, c.o_groups * c.o_lora_rank, attn_out_gain);
    if (shared) {
      if (!is_stage) shared_attention(a, layer);
    } else if (ratio != 0) {
      compressor(a + "compressor.", (ratio == 4 ? 2 : 1) * Dh, Dh, ratio);
    }
    if (!shared && ratio == 4) {
      fp8(a + "indexer.wq_b", c.index_n_heads * c.index_head_dim, ql);
      normal_bf16(a + "indexer.weights_proj.weight", {c.index_n_heads, d}, 1.0 / std::sqrt(double(d)));
      compressor(a + "indexer.compressor.", 2 * c.index_head_dim, c.index_head_dim, 4);
    }
    const std::string f = p + "ffn.";
    normal_bf16(f + "gate.weight", {E, d}, 1.0 / std::sqrt(double(d)));
    if (hash_routed) {
      SyntheticTensor& t = add(f + "gate.tid2eid", DType::I32, {c.vocab_size, k}, SyntheticFill::kExpertIds);
      t.n_experts = E;
    } else {
      normal_f32(f + "gate.bias", {E}, 0.1);
    }
    if (rules_.image_router_bias) normal_f32(f + "gate.bias_vl", {E}, 0.1);  // ships on every layer
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      fp4(x + "w1", inter, d);
      fp4(x + "w2", d, inter, ffn_out_gain);
      fp4(x + "w3", inter, d);
    }
    if (c.n_shared_experts > 0) {
      fp8(f + "shared_experts.w1", shared_inter, d);
      fp8(f + "shared_experts.w2", d, shared_inter, ffn_out_gain);
      fp8(f + "shared_experts.w3", shared_inter, d);
    }
  }

  // DSpark stages mtp.S (docs/model/mtp_dspark.md §2 V4.1, §3 V4 refreshes).
  void dspark() {
    const Config& c = c_;
    const int64_t V = c.vocab_size, d = c.dim, n = c.n_mtp_layers, rank = c.dspark_markov_rank;
    for (int64_t s = 0; s < n; ++s) {
      const std::string p = "mtp." + std::to_string(s) + ".";
      block(p, c.n_layers + s, 0, false, true);
      if (s == 0) {
        fp8(p + "main_proj", d, d * int64_t(c.dspark_target_layers.size()));
        norm(p + "main_norm.weight", d);
      }
      if (s == n - 1) {
        norm(p + "norm.weight", d);
        if (!rules_.staggered_mhc) hc(p, "hc_head", c.hc_mult);
        const std::string m1 = rules_.markov_embed, m2 = rules_.markov_head;
        normal_bf16(p + "markov_head." + m1 + ".weight", {V, rank}, 1.0);
        normal_bf16(p + "markov_head." + m2 + ".weight", {V, rank}, 1.0 / std::sqrt(double(std::max<int64_t>(1, rank))));
        normal_bf16(p + "confidence_head.proj.weight", {1, d + rank}, 1.0 / std::sqrt(double(d + rank)));
      }
    }
  }

  const Config& c_;
  const ReleaseRules& rules_;
  std::vector<SyntheticTensor> out_;
};

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string gb(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GB", double(bytes) / 1e9);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Filling.

// A piece of one tensor's work: units [begin, end) (elements; bytes for kFp4 / kConstant;
// rows for kExpertIds).
struct Piece {
  uint32_t tensor;
  uint64_t begin, end;
};

void fill_piece(const SyntheticTensor& t, uint64_t key, uint8_t* data, uint64_t begin, uint64_t end) {
  switch (t.fill) {
    case SyntheticFill::kNormal: {
      const float mean = float(t.mean), std = float(t.std);
      if (t.dtype == DType::F32) {
        float* out = reinterpret_cast<float*>(data);
        for (uint64_t i = begin; i < end; ++i) out[i] = mean + std * unit_noise(element_hash(key, i));
      } else {
        for (uint64_t i = begin; i < end; ++i) {
          const uint16_t b = f32_to_bf16(mean + std * unit_noise(element_hash(key, i)));
          std::memcpy(data + 2 * i, &b, 2);
        }
      }
      return;
    }
    case SyntheticFill::kUniform: {
      float* out = reinterpret_cast<float*>(data);
      const float lo = float(t.mean), width = float(t.std);
      for (uint64_t i = begin; i < end; ++i)
        out[i] = lo + width * (float(element_hash(key, i) >> 40) * (1.0f / 16777216.0f));
      return;
    }
    case SyntheticFill::kFp8: {
      const float step = float(std::ldexp(t.std, -t.scale_exp));
      for (uint64_t i = begin; i < end; ++i) data[i] = f32_to_e4m3(step * unit_noise(element_hash(key, i)));
      return;
    }
    case SyntheticFill::kFp4: {
      // Byte i is byte i % 8 of hash word i / 8; whole words are written 8 bytes at a time.
      auto one = [&](uint64_t i) { return kFp4Table.byte[(element_hash(key, i / 8) >> (8 * (i % 8))) & 0xff]; };
      uint64_t i = begin;
      for (; i < end && i % 8 != 0; ++i) data[i] = one(i);
      for (; i + 8 <= end; i += 8) {
        const uint64_t h = element_hash(key, i / 8);
        uint8_t b[8];
        for (int j = 0; j < 8; ++j) b[j] = kFp4Table.byte[(h >> (8 * j)) & 0xff];
        std::memcpy(data + i, b, 8);
      }
      for (; i < end; ++i) data[i] = one(i);
      return;
    }
    case SyntheticFill::kConstant:
      std::memset(data + begin, t.byte, size_t(end - begin));
      return;
    case SyntheticFill::kExpertIds: {
      const int64_t E = t.n_experts, k = t.shape[1];
      std::vector<int32_t> ids(static_cast<size_t>(E));
      for (uint64_t r = begin; r < end; ++r) {
        std::iota(ids.begin(), ids.end(), 0);
        // The first k steps of a Fisher-Yates shuffle: k distinct ids, uniformly.
        for (int64_t j = 0; j < k; ++j) {
          const uint64_t pick = uint64_t(j) + element_hash(key, r * uint64_t(k) + uint64_t(j)) % uint64_t(E - j);
          std::swap(ids[size_t(j)], ids[size_t(pick)]);
          std::memcpy(data + (r * uint64_t(k) + uint64_t(j)) * 4, &ids[size_t(j)], 4);
        }
      }
      return;
    }
  }
}

uint64_t units_of(const SyntheticTensor& t) {
  switch (t.fill) {
    case SyntheticFill::kFp4:
    case SyntheticFill::kConstant: return t.nbytes;
    case SyntheticFill::kExpertIds: return uint64_t(t.shape[0]);
    default: return t.nbytes / dtype_size(t.dtype);
  }
}

// Reads "Key:   123 kB" of /proc/meminfo in bytes; 0 when absent.
uint64_t meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  uint64_t v = 0;
  std::string unit;
  while (in >> k >> v) {
    std::getline(in, unit);
    if (k == std::string(key) + ":") return v * 1024;
  }
  return 0;
}

// A cgroup file holding one number ("max": none). False when absent or unlimited.
bool read_cgroup_number(const std::string& path, uint64_t* out) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

SyntheticPlan plan_synthetic(const Config& cfg, uint64_t seed) {
  if (!cfg.engram_layer_ids.empty())
    throw std::runtime_error(
        "synthetic checkpoint: DeepSeek-V4.1 Engram layers (engram_layer_ids) are not supported: their compressed "
        "token map is data of the checkpoint (engram_token_map.json); use a config without them");
  if (cfg.has_dspark() && cfg.dspark_markov_rank < 1)
    throw std::runtime_error("synthetic checkpoint: dspark_markov_rank must be at least 1");
  SyntheticPlan plan;
  plan.tensors = Planner(cfg).build();
  // File order as make_checkpoint.py writes it: wider element types first, then by name, so
  // that every tensor's offset is a multiple of its element size.
  std::sort(plan.tensors.begin(), plan.tensors.end(), [](const SyntheticTensor& a, const SyntheticTensor& b) {
    const size_t sa = dtype_size(a.dtype), sb = dtype_size(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  for (size_t i = 1; i < plan.tensors.size(); ++i)
    if (plan.tensors[i].name == plan.tensors[i - 1].name)
      throw std::logic_error("synthetic checkpoint: tensor '" + plan.tensors[i].name + "' listed twice");
  std::string h = "{\"__metadata__\":{\"format\":\"pt\",\"deepinfer_note\":\"RANDOM synthetic weights (deepinfer "
                  "--synthetic), not a trained model\",\"deepinfer_seed\":\"" +
                  std::to_string(seed) + "\"}";
  size_t off = 0;
  for (SyntheticTensor& t : plan.tensors) {
    t.offset = off;
    h += "," + nlohmann::json(t.name).dump() + ":{\"dtype\":\"" + dtype_name(t.dtype) + "\",\"shape\":" +
         shape_json(t.shape) + ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.nbytes) + "]}";
    off += t.nbytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  plan.header = std::move(h);
  plan.data_bytes = off;
  return plan;
}

MemoryBudget available_memory() {
  MemoryBudget b;
  b.bytes = meminfo_bytes("MemAvailable");
  b.source = "MemAvailable in /proc/meminfo";
  auto cgroup = [&](const std::string& limit_file, const std::string& usage_file) {
    uint64_t limit = 0, used = 0;
    if (!read_cgroup_number(limit_file, &limit) || limit >= (uint64_t(1) << 60)) return;
    read_cgroup_number(usage_file, &used);
    const uint64_t left = limit > used ? limit - used : 0;
    if (left < b.bytes) {
      b.bytes = left;
      b.source = "the cgroup limit " + limit_file + " (" + std::to_string(limit) + " bytes, " + std::to_string(used) +
                 " in use)";
    }
  };
  // This process's own cgroup and every one above it (a limit set on a parent binds too):
  // /proc/self/cgroup names it ("0::/path" for v2, "N:...memory...:/path" for v1).
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    const size_t a = line.find(':'), z = line.find(':', a + 1);
    if (a == std::string::npos || z == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, z - a - 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    const bool v1 = controllers.find("memory") != std::string::npos;
    if (!v2 && !v1) continue;
    std::string path = line.substr(z + 1);
    for (;;) {
      if (v2)
        cgroup("/sys/fs/cgroup" + path + "/memory.max", "/sys/fs/cgroup" + path + "/memory.current");
      else
        cgroup("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes",
               "/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "" : path.substr(0, slash);
    }
  }
  // A container's own cgroup mounted at the root.
  cgroup("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current");
  cgroup("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes");
  return b;
}

InMemoryCheckpoint make_synthetic_checkpoint(const std::string& config_json, const std::string& name,
                                             const SyntheticOptions& o) {
  const Config cfg = parse_config(config_json, name + "/config.json");
  const SyntheticPlan plan = plan_synthetic(cfg, o.seed);
  const uint64_t image = plan.image_bytes(), needed = image + o.extra_bytes;
  const MemoryBudget budget = o.budget ? *o.budget : available_memory();
  if (needed > budget.bytes)
    throw std::runtime_error(name + ": this machine lacks the memory for the synthetic checkpoint: its weights (" +
                             std::to_string(plan.tensors.size()) + " tensors) need " + std::to_string(image) +
                             " bytes (" + gb(image) + ") and the run " +
                             std::to_string(o.extra_bytes) + " more (" + gb(o.extra_bytes) + ", " + o.extra_what +
                             "), " + std::to_string(needed) + " bytes (" + gb(needed) + ") in all, but only " +
                             std::to_string(budget.bytes) + " bytes (" + gb(budget.bytes) + ") are available (" +
                             budget.source + "). Use a machine with more memory, or a config with fewer layers or "
                             "experts");
  log_info("%s: building %zu tensors in memory, %.2f GB (seed %llu; %.2f GB of %.2f GB available, %s)", name.c_str(),
           plan.tensors.size(), double(image) / 1e9, (unsigned long long)o.seed, double(needed) / 1e9,
           double(budget.bytes) / 1e9, budget.source.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  MemoryImage img(image, name + "/model.safetensors");
  uint8_t* p = img.data();
  const uint64_t hlen = plan.header.size();
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(hlen >> (8 * i));
  std::memcpy(p + 8, plan.header.data(), plan.header.size());
  uint8_t* data = p + 8 + hlen;

  // Pieces of about 1 MiB of output each.
  constexpr uint64_t kPieceBytes = uint64_t(1) << 20;
  std::vector<Piece> pieces;
  std::vector<uint64_t> keys(plan.tensors.size());
  for (size_t ti = 0; ti < plan.tensors.size(); ++ti) {
    const SyntheticTensor& t = plan.tensors[ti];
    keys[ti] = tensor_key(o.seed, t.name);
    const uint64_t units = units_of(t);
    if (units == 0) continue;
    const uint64_t unit_bytes = std::max<uint64_t>(1, t.nbytes / units);
    const uint64_t per = std::max<uint64_t>(8, kPieceBytes / unit_bytes);  // a multiple of 8: FP4's hash words
    for (uint64_t b = 0; b < units; b += per) pieces.push_back({uint32_t(ti), b, std::min(units, b + per)});
  }
  std::atomic<uint64_t> done{0};
  auto last_log = std::chrono::steady_clock::now();
  auto work = [&](int64_t i0, int64_t i1, int thread) {
    for (int64_t i = i0; i < i1; ++i) {
      const Piece& pc = pieces[size_t(i)];
      const SyntheticTensor& t = plan.tensors[pc.tensor];
      fill_piece(t, keys[pc.tensor], data + t.offset, pc.begin, pc.end);
      const uint64_t n = done.fetch_add(1, std::memory_order_relaxed) + 1;
      if (thread == 0 && pieces.size() > 4096) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_log > std::chrono::seconds(5)) {
          last_log = now;
          log_info("%s: %.0f%% built, %.1f s", name.c_str(), 100.0 * double(n) / double(pieces.size()),
                   std::chrono::duration<double>(now - t0).count());
        }
      }
    }
  };
  if (o.pool && o.pool->size() > 1)
    o.pool->run_balanced(int64_t(pieces.size()), 1, 8, work);
  else
    work(0, int64_t(pieces.size()), 0);
  std::vector<MemoryImage> images;
  images.push_back(std::move(img));
  InMemoryCheckpoint ckpt;
  ckpt.config_json = config_json;
  ckpt.store = std::make_shared<TensorStore>(std::move(images));
  log_info("%s: built %.2f GB of synthetic weights in %.2f s (%d threads)", name.c_str(), double(image) / 1e9,
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), o.pool ? o.pool->size() : 1);
  return ckpt;
}

void save_synthetic_checkpoint(const InMemoryCheckpoint& ckpt, const std::string& dir) {
  if (!ckpt.store || ckpt.store->images().size() != 1)
    throw std::runtime_error("--save: not a synthetic checkpoint (one in-memory safetensors image)");
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw std::runtime_error("--save " + dir + ": exists and is not a directory");
    if (!fs::is_empty(dir, ec)) throw std::runtime_error("--save " + dir + ": the directory is not empty (refusing to overwrite)");
  } else if (!fs::create_directories(dir, ec)) {
    throw std::runtime_error("--save " + dir + ": cannot create the directory: " + ec.message());
  }
  const Config cfg = parse_config(ckpt.config_json, dir + "/config.json");
  auto write = [&](const std::string& file, const void* bytes, size_t n) {
    const std::string path = dir + "/" + file, tmp = path + ".partial";
    {
      std::ofstream out(tmp, std::ios::binary);
      if (!out) throw std::runtime_error("--save: cannot write " + tmp);
      const char* c = static_cast<const char*>(bytes);
      constexpr size_t kChunk = size_t(64) << 20;
      for (size_t off = 0; off < n; off += kChunk) out.write(c + off, std::streamsize(std::min(kChunk, n - off)));
      out.flush();
      if (!out) throw std::runtime_error("--save: write failed: " + tmp + " (disk full?)");
    }
    fs::rename(tmp, path, ec);
    if (ec) throw std::runtime_error("--save: cannot rename " + tmp + ": " + ec.message());
  };
  write("config.json", ckpt.config_json.data(), ckpt.config_json.size());
  const std::string gen = nlohmann::json{{"bos_token_id", cfg.bos_token_id},
                                         {"eos_token_id", cfg.eos_token_id},
                                         {"do_sample", false}}
                              .dump(2) +
                          "\n";
  write("generation_config.json", gen.data(), gen.size());
  const std::string readme =
      "RANDOM WEIGHTS - NOT A TRAINED MODEL\n\n"
      "This folder is a DeepSeek-V4 checkpoint in the official Hugging Face layout (config.json,\n"
      "model.safetensors with the official tensor names and storage dtypes) whose weights are\n"
      "random numbers, written by `deepinfer ... --synthetic CONFIG.json --save DIR` (the seed is in\n"
      "the safetensors header's __metadata__). It has no tokenizer: run it with token ids.\n";
  write("README.txt", readme.data(), readme.size());
  const MemoryImage& im = ckpt.store->images().front();
  write("model.safetensors", im.data(), im.size());
  log_info("saved the synthetic checkpoint to %s (%.2f GB)", dir.c_str(), double(im.size()) / 1e9);
}

}  // namespace deepinfer::v4
