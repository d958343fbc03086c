#include "model/deepseek_v4/engram.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <stdexcept>

#include "core/formats.h"
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
  if (!j.is_object() || !j.contains("token_map") || !j.contains("hash_multipliers"))
    throw LoadError(file + ": needs 'token_map' and 'hash_multipliers'");

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
  const auto& mults = j["hash_multipliers"];
  if (!mults.is_array() || mults.size() != cfg.engram_layer_ids.size())
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
    L.multipliers = int_list(mults[e], file, "hash_multipliers");
    if (int64_t(L.multipliers.size()) != cfg.engram_max_ngram)
      throw LoadError(file + ": hash_multipliers[" + std::to_string(e) + "] must hold engram_max_ngram_size = " +
                      std::to_string(cfg.engram_max_ngram) + " values");
    // Odd and small enough that id * multiplier stays inside int64 (the reference's bound).
    const int64_t bound = INT64_MAX / cfg.engram_compressed_vocab_size;
    for (int64_t m : L.multipliers)
      if (m <= 0 || m % 2 == 0 || m > bound)
        throw LoadError(file + ": hash multiplier " + std::to_string(m) + " is not odd and within (0, " +
                        std::to_string(bound) + "]");
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
  // The newest n_hist compressed ids, newest first, for the next chunk.
  int64_t next[64];
  for (int64_t k = 0; k < n_hist; ++k) next[k] = compressed_at(S - 1, k);
  for (int64_t k = 0; k < n_hist; ++k) st.set_engram_history(k, next[k]);
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
  const float eps = float(cfg.norm_eps), inv_sqrt_dim = float(1.0 / std::sqrt(double(d)));
  auto rsqrt_mean_square = [&](const float* v) {
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += double(v[j] * v[j]);
    return rsqrt_f(float(ss / double(d)) + eps);
  };
  for (int64_t t = 0; t < rows; ++t) {
    const float* value = &kv[t * w.wkv.rows + hc * d];
    for (int64_t i = 0; i < hc; ++i) {
      float* h = X + (t * hc + i) * d;
      const float* key = &kv[t * w.wkv.rows + i * d];
      const float* qk = &w.qk[size_t(i * d)];
      // The stream and the key are normalised separately (per stream, not jointly).
      const float rstd = rsqrt_mean_square(h) * rsqrt_mean_square(key);
      double acc = 0.0;
      for (int64_t j = 0; j < d; ++j) acc += double(h[j] * qk[j] * key[j]);
      const float dot = float(acc) * rstd * inv_sqrt_dim;
      // Signed square root before the sigmoid (the training kernel's gate).
      const float mag = float(std::sqrt(double(std::max(std::fabs(dot), 1e-6f))));
      const float gate = sigmoid_f(std::copysign(mag, dot));
      for (int64_t j = 0; j < d; ++j) h[j] = num.bf16(h[j] + gate * value[j]);
    }
  }
}

}  // namespace deepinfer::v4
