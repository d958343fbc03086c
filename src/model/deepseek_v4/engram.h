// Engram of DeepSeek-V4.1 (docs/model/v41.md §6): before the blocks of the engram layers, each
// position looks up rows of a large n-gram hash table (the 2- .. max-grams of compressed token
// ids ending there) and adds a gated value to every hc stream:
//   ids     per layer, (max_ngram - 1) * n_heads columns; column (g - 2) * n_heads + h is
//           (v_{g-1} mod prime[g][h]) + offset[g][h], v_0 = c(p) * m[0],
//           v_n = v_{n-1} XOR c(p - n) * m[n], c = the compressed token map (int64 throughout);
//           a position before the sequence start reads the pad token's compressed id
//   rows    e = concat of the table rows (e4m3 * ue8m0 per 32 columns, exact in bf16)
//   kv      linear(e; wkv) -> hc keys [dim] and one value [dim]
//   update  X[i] += sigmoid(signed sqrt(<X[i], qk[i] * key[i]> * rsqrt-norms / sqrt(dim))) * value
// V4 has no Engram. The token map is data of the checkpoint (engram_token_map.json); the
// primes and hash multipliers follow from the config.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

struct EngramTables {
  struct Layer {
    std::vector<int64_t> primes;       // [n_cols] in column order
    std::vector<int64_t> offsets;      // [n_cols]: running sum of the primes before the column
    std::vector<int64_t> multipliers;  // [max_ngram], odd
  };
  std::vector<int32_t> token_map;  // vocabulary id -> compressed id
  int64_t pad_id = 0;              // compressed id of engram_pad_id
  std::vector<Layer> layers;       // in engram_layer_ids order
  int64_t n_cols = 0;              // hash columns per layer
};

// The prime of every (layer, n-gram size, head) by the reference's layout rule: per layer and
// n-gram size, from engram_vocab_size - 1 upward, the next primes not handed out before.
// Result [n_engram_layers][n_cols] in column order.
std::vector<std::vector<int64_t>> engram_primes(const Config& cfg);

// The hash multipliers of engram layer `layer_id` (docs/model/v41.md §6.3): numpy's
// default_rng(10007 * layer_id).integers(0, B, max_ngram, int64) * 2 + 1 with
// B = (2^63 - 1) // compressed_vocab // 2, reproduced bit for bit (SeedSequence, PCG64,
// Lemire's bounded draw).
std::vector<int64_t> engram_hash_multipliers(int64_t layer_id, int64_t max_ngram, int64_t compressed_vocab);

// Reads DIR/engram_token_map.json (its token_map; primes and hash_multipliers are optional and
// must equal the derived ones when present) and checks it against the config (map size and
// range, the compressed vocabulary size, the table sizes). Throws LoadError naming what
// disagrees. An empty result for a config without Engram.
EngramTables load_engram_tables(const Config& cfg, const std::string& dir);

// Hash ids of S tokens at positions st.n_past ...: ids[(t * n_layers + e) * n_cols + col] for
// engram layer e. Advances st's Engram history to include the tokens (the caller advances
// n_past). Token ids must be inside the vocabulary (the embedding checks it first).
void engram_hash_ids(const Config& cfg, const EngramTables& tables, const int32_t* tokens, int64_t S,
                     SequenceState& st, int64_t* ids);

// The gated update of the streams X [rows, hc, dim] in place; ids [rows] rows of n_cols table
// rows each, with a stride of `ids_stride` between rows.
void engram_forward(const Config& cfg, const Numerics& num, const EngramWeights& w, const int64_t* ids,
                    int64_t ids_stride, int64_t rows, float* X);

}  // namespace deepinfer::v4
