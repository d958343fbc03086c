#include "model/deepseek_v4/engram.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <stdexcept>

#include "core/formats.h"
#include "kernels/light_ops.h"
#include "loader/safetensors.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::v4 {

namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// An array of integers at j[key], or a LoadError naming the file and key.
std::vector<int64_t> int_list(const nlohmann::json& j, const std::string& file, const std::string& what) {
  if (!j.is_array()) throw LoadError(file + ": '" + what + "' must be an array of integers");
  std::vector<int64_t> out;
  out.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number_integer()) throw LoadError(file + ": '" + what + "' must hold integers, got " + v.dump());
    out.push_back(v.get<int64_t>());
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> engram_primes(const Config& cfg) {
  std::vector<std::vector<int64_t>> out;
  std::set<int64_t> seen;
  for (size_t e = 0; e < cfg.engram_layer_ids.size(); ++e) {
    std::vector<int64_t> layer;
    for (int64_t g = 0; g + 1 < cfg.engram_max_ngram; ++g) {
      int64_t current = cfg.engram_vocab_size - 1;  // each n-gram size searches from here again
      for (int64_t h = 0; h < cfg.engram_n_heads; ++h) {
        do ++current;
        while (!is_prime(current) || seen.count(current));
        seen.insert(current);
        layer.push_back(current);
      }
    }
    out.push_back(std::move(layer));
  }
  return out;
}

namespace {

// numpy.random.SeedSequence(entropy).generate_state(n64, uint64) for a non-negative entropy
// below 2^64 and no spawn key: a pool of 4 uint32 mixed from the entropy words, then hashed
// out (numpy/random/bit_generator.pyx).
std::vector<uint64_t> seed_sequence_state(uint64_t entropy, int n64) {
  constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
  constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;
  std::vector<uint32_t> words;
  for (uint64_t x = entropy; x > 0; x >>= 32) words.push_back(uint32_t(x));
  if (words.empty()) words.push_back(0);
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t v) {
    v ^= hash_const;
    hash_const *= kMultA;
    v *= hash_const;
    return v ^ (v >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixL * x - kMixR * y;
    return r ^ (r >> 16);
  };
  uint32_t pool[4];
  for (size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < words.size() ? words[i] : 0);
  for (int src = 0; src < 4; ++src)
    for (int dst = 0; dst < 4; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = 4; src < words.size(); ++src)
    for (int dst = 0; dst < 4; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src]));
  uint32_t hb = kInitB;
  std::vector<uint64_t> out;
  for (int i = 0; i < 2 * n64; i += 2) {
    uint32_t half[2];
    for (int k = 0; k < 2; ++k) {
      uint32_t v = pool[(i + k) % 4] ^ hb;
      hb *= kMultB;
      v *= hb;
      half[k] = v ^ (v >> 16);
    }
    out.push_back(uint64_t(half[0]) | (uint64_t(half[1]) << 32));  // little-endian pairs
  }
  return out;
}

// numpy's PCG64 (XSL-RR 128/64, default multiplier), seeded as PCG64(SeedSequence).
class Pcg64 {
 public:
  explicit Pcg64(uint64_t entropy) {
    const std::vector<uint64_t> v = seed_sequence_state(entropy, 4);
    const unsigned __int128 seed = (unsigned __int128)v[0] << 64 | v[1];
    const unsigned __int128 seq = (unsigned __int128)v[2] << 64 | v[3];
    inc_ = (seq << 1) | 1;
    state_ = 0;
    step();
    state_ += seed;
    step();
  }
  uint64_t next() {
    step();
    const uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
    const unsigned rot = unsigned(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

 private:
  void step() {
    const unsigned __int128 mult = (unsigned __int128)0x2360ED051FC65DA4ull << 64 | 0x4385DF649FCCF645ull;
    state_ = state_ * mult + inc_;
  }
  unsigned __int128 state_ = 0, inc_ = 0;
};

}  // namespace

std::vector<int64_t> engram_hash_multipliers(int64_t layer_id, int64_t max_ngram, int64_t compressed_vocab) {
  const uint64_t bound = std::max<uint64_t>(1, uint64_t(INT64_MAX / compressed_vocab) / 2);
  Pcg64 rng(uint64_t(10007 * layer_id));
  std::vector<int64_t> out;
  const uint64_t range = bound - 1;  // integers(0, bound): draws in [0, bound - 1]
  for (int64_t i = 0; i < max_ngram; ++i) {
    uint64_t v = 0;
    if (range > 0xffffffffull) {  // Lemire's bounded draw on 64-bit words
      const uint64_t excl = range + 1;
      unsigned __int128 m = (unsigned __int128)rng.next() * excl;
      if (uint64_t(m) < excl) {
        const uint64_t threshold = (UINT64_MAX - range) % excl;
        while (uint64_t(m) < threshold) m = (unsigned __int128)rng.next() * excl;
      }
      v = uint64_t(m >> 64);
    } else {
      // numpy draws 32-bit words here; a compressed vocabulary that large (> 2^30 ids) does
      // not occur (the state keeps ids below 2^24).
      throw std::invalid_argument("engram: hash multiplier bound below 2^32 is not supported");
    }
    out.push_back(int64_t(v) * 2 + 1);
  }
  return out;
}

EngramTables load_engram_tables(const Config& cfg, const std::string& dir) {
  EngramTables t;
  if (cfg.engram_layer_ids.empty()) return t;
  const std::string file = dir + "/engram_token_map.json";
  std::ifstream in(file);
  if (!in)
    throw LoadError(file + ": missing. DeepSeek-V4.1 Engram hashes compressed token ids: ship the map of "
                    "inference/engram.py build_compressed_token_map (tools/golden/engram_token_map.py makes it "
                    "from tokenizer.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw LoadError(file + ": malformed JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("token_map")) throw LoadError(file + ": needs 'token_map'");

  // The token map: every vocabulary id to an id of the compressed vocabulary, which the
  // reference asserts has exactly engram_compressed_vocab_size values.
  const std::vector<int64_t> map = int_list(j["token_map"], file, "token_map");
  if (int64_t(map.size()) < cfg.vocab_size)
    throw LoadError(file + ": token_map has " + std::to_string(map.size()) + " entries for a vocabulary of " +
                    std::to_string(cfg.vocab_size));
  int64_t max_id = -1;
  for (int64_t i = 0; i < cfg.vocab_size; ++i) {
    if (map[size_t(i)] < 0 || map[size_t(i)] >= cfg.engram_compressed_vocab_size)
      throw LoadError(file + ": token_map[" + std::to_string(i) + "] = " + std::to_string(map[size_t(i)]) +
                      " is outside the compressed vocabulary [0, " + std::to_string(cfg.engram_compressed_vocab_size) + ")");
    max_id = std::max(max_id, map[size_t(i)]);
  }
  for (size_t i = size_t(cfg.vocab_size); i < map.size(); ++i) max_id = std::max(max_id, map[i]);
  if (max_id + 1 != cfg.engram_compressed_vocab_size)
    throw LoadError(file + ": token_map has " + std::to_string(max_id + 1) +
                    " compressed ids but the config says engram_compressed_vocab_size = " +
                    std::to_string(cfg.engram_compressed_vocab_size));
  t.token_map.assign(map.begin(), map.begin() + cfg.vocab_size);
  t.pad_id = t.token_map[size_t(cfg.engram_pad_id)];
  if (j.contains("pad_compressed_id") && j["pad_compressed_id"] != t.pad_id)
    throw LoadError(file + ": pad_compressed_id disagrees with token_map[engram_pad_token_id]");

  const auto primes = engram_primes(cfg);
  // The multipliers follow from the layer ids and the compressed vocabulary; a file that
  // states them must state these.
  const nlohmann::json* mults = j.contains("hash_multipliers") ? &j["hash_multipliers"] : nullptr;
  if (mults && (!mults->is_array() || mults->size() != cfg.engram_layer_ids.size()))
    throw LoadError(file + ": hash_multipliers must hold one list per engram layer (" +
                    std::to_string(cfg.engram_layer_ids.size()) + ")");
  t.n_cols = (cfg.engram_max_ngram - 1) * cfg.engram_n_heads;
  for (size_t e = 0; e < cfg.engram_layer_ids.size(); ++e) {
    EngramTables::Layer L;
    L.primes = primes[e];
    int64_t rows = 0;
    for (int64_t p : L.primes) {
      L.offsets.push_back(rows);
      rows += p;
    }
    if (rows != cfg.engram_num_embeddings[e])
      throw LoadError("config: engram_num_embeddings[" + std::to_string(e) + "] = " +
                      std::to_string(cfg.engram_num_embeddings[e]) + " but the primes of engram layer " +
                      std::to_string(cfg.engram_layer_ids[e]) + " " + list_str(L.primes) + " sum to " +
                      std::to_string(rows));
    L.multipliers = engram_hash_multipliers(cfg.engram_layer_ids[e], cfg.engram_max_ngram,
                                            cfg.engram_compressed_vocab_size);
    if (mults && int_list((*mults)[e], file, "hash_multipliers") != L.multipliers)
      throw LoadError(file + ": hash_multipliers[" + std::to_string(e) + "] " +
                      list_str(int_list((*mults)[e], file, "hash_multipliers")) + " differ from the reference's " +
                      list_str(L.multipliers) + " (layer " + std::to_string(cfg.engram_layer_ids[e]) +
                      ", compressed vocabulary " + std::to_string(cfg.engram_compressed_vocab_size) + ")");
    t.layers.push_back(std::move(L));
  }
  if (j.contains("primes")) {  // when the file states them, they must be the ones we derive
    const auto& jp = j["primes"];
    for (size_t e = 0; e < primes.size(); ++e) {
      std::vector<int64_t> flat;
      if (jp.is_array() && e < jp.size() && jp[e].is_array())
        for (const auto& per_ngram : jp[e]) {
          std::vector<int64_t> v = int_list(per_ngram, file, "primes");
          flat.insert(flat.end(), v.begin(), v.end());
        }
      if (flat != primes[e])
        throw LoadError(file + ": primes of engram layer " + std::to_string(cfg.engram_layer_ids[e]) + " " +
                        list_str(flat) + " differ from the reference's layout " + list_str(primes[e]));
    }
  }
  return t;
}

void engram_hash_ids(const Config& cfg, const EngramTables& tables, const int32_t* tokens, int64_t S,
                     SequenceState& st, int64_t* ids) {
  const int64_t G = cfg.engram_max_ngram, H = cfg.engram_n_heads, n_cols = tables.n_cols;
  const int64_t n_hist = st.engram_history_size(), n_layers = int64_t(tables.layers.size());
  int64_t tok[64];
  if (G > 64) throw std::logic_error("engram: max n-gram size above 64");
  // The compressed id at shift k from chunk row t: from the chunk, else from the history;
  // -1 (before the sequence start) blocks that shift and every longer one.
  auto compressed_at = [&](int64_t t, int64_t k) -> int64_t {
    if (t - k >= 0) return tables.token_map[size_t(tokens[t - k])];
    return k - t - 1 < n_hist ? st.engram_history(k - t - 1) : -1;
  };
  for (int64_t t = 0; t < S; ++t) {
    bool blocked = false;
    for (int64_t k = 0; k < G; ++k) {
      const int64_t c = blocked ? -1 : compressed_at(t, k);
      blocked = c < 0;
      tok[k] = blocked ? tables.pad_id : c;
    }
    for (int64_t e = 0; e < n_layers; ++e) {
      const EngramTables::Layer& L = tables.layers[size_t(e)];
      int64_t* out = ids + (t * n_layers + e) * n_cols;
      int64_t v = tok[0] * L.multipliers[0];
      for (int64_t n = 1; n < G; ++n) {
        v ^= tok[n] * L.multipliers[size_t(n)];  // non-negative: XOR of non-negative products
        for (int64_t h = 0; h < H; ++h) {
          const int64_t col = (n - 1) * H + h;
          out[col] = v % L.primes[size_t(col)] + L.offsets[size_t(col)];
        }
      }
    }
  }
  // The chunk's compressed ids, for the next chunk (the history keeps the newest ones).
  for (int64_t t = std::max<int64_t>(0, S - kMinRingRows - n_hist); t < S; ++t)
    st.set_engram_id(st.n_past + t, tables.token_map[size_t(tokens[t])]);
}

void engram_forward(const Config& cfg, const Numerics& num, const EngramWeights& w, const int64_t* ids,
                    int64_t ids_stride, int64_t rows, float* X) {
  const int64_t hc = cfg.hc_mult, d = cfg.dim, hd = w.head_dim, n_cols = w.wkv.cols / hd, sc = hd / 32;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> e = scratch.take<float>(rows * n_cols * hd), kv = scratch.take<float>(rows * w.wkv.rows);
  // Table rows, e4m3 codes times their per-32 ue8m0 scales: exact in bf16.
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < n_cols; ++c) {
      const int64_t id = ids[t * ids_stride + c];
      if (id < 0 || id >= w.rows) throw std::logic_error("engram: hash id " + std::to_string(id) + " outside the table");
      const uint8_t* code = w.table + id * hd;
      const uint8_t* scale = w.table_scale + id * sc;
      float* dst = &e[(t * n_cols + c) * hd];
      for (int64_t k = 0; k < hd; ++k) dst[k] = e4m3_to_f32(code[k]) * e8m0_to_f32(scale[k / 32]);
    }
  linear_quantized(cfg, num, e.data(), rows, w.wkv, kv.data());
  // Each stream's gate and gated update (docs/model/v41.md §6.4).
  const float eps = float(cfg.norm_eps);
  for (int64_t t = 0; t < rows; ++t) {
    const float* value = &kv[t * w.wkv.rows + hc * d];
    for (int64_t i = 0; i < hc; ++i)
      kernels::engram_update_ref(X + (t * hc + i) * d, &kv[t * w.wkv.rows + i * d], &w.qk[size_t(i * d)], value, d,
                                 eps, num.reference());
  }
}

}  // namespace deepinfer::v4
