#include "model/deepseek_v4/weights.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

namespace {

class Binder {
 public:
  Binder(const Config& cfg, const TensorStore& store, std::vector<std::unique_ptr<uint8_t[]>>* row_checks)
      : cfg_(cfg), store_(store), row_checks_(row_checks) {}

  const TensorView& tensor(const std::string& name) const {
    const TensorView* t = store_.find(name);
    if (!t) throw LoadError("checkpoint: missing tensor '" + name + "'");
    return *t;
  }

  [[noreturn]] void mismatch(const TensorView& t, const std::string& expected) const {
    throw LoadError(t.file + ": tensor '" + t.name + "': expected " + expected + ", found " +
                    dtype_name(t.dtype) + " " + t.shape_str());
  }

  void expect_shape(const TensorView& t, std::vector<int64_t> shape, const std::string& what) const {
    if (t.shape != shape) {
      TensorView e;
      e.shape = shape;
      mismatch(t, what + " " + e.shape_str());
    }
  }

  // A [rows, cols] matrix stored as F32, BF16, FP8 (+ .scale) or packed FP4 (+ .scale).
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const TensorView& t = tensor(name);
    WeightMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.data = t.data;
    std::string scale_name = name;
    if (scale_name.size() > 7 && scale_name.compare(scale_name.size() - 7, 7, ".weight") == 0)
      scale_name = scale_name.substr(0, scale_name.size() - 7);
    scale_name += ".scale";
    switch (t.dtype) {
      case DType::F32:
      case DType::BF16:
        expect_shape(t, {rows, cols}, "F32/BF16/F8_E4M3");
        w.format = t.dtype == DType::F32 ? WeightFormat::F32 : WeightFormat::BF16;
        if (w.format == WeightFormat::BF16) {  // zeroed: no row checked yet
          row_checks_->push_back(std::make_unique<uint8_t[]>(size_t(rows)));
          w.row_check = row_checks_->back().get();
        }
        return w;
      case DType::F8_E4M3: {
        expect_shape(t, {rows, cols}, "F8_E4M3");
        const int64_t B = cfg_.weight_block;
        const TensorView& s = scale(scale_name, {(rows + B - 1) / B, (cols + B - 1) / B});
        w.format = WeightFormat::FP8_BLOCK;
        w.scale = s.data;
        w.block = B;
        w.scale_cols = s.shape[1];
        row_checks_->push_back(std::make_unique<uint8_t[]>(size_t(rows)));  // zeroed: none checked yet
        w.row_check = row_checks_->back().get();
        return w;
      }
      case DType::I8:
      case DType::U8: {
        if (cols % 32 != 0) mismatch(t, "an fp4 matrix whose input width is a multiple of 32");
        expect_shape(t, {rows, cols / 2}, "packed FP4 (I8)");
        const TensorView& s = scale(scale_name, {rows, cols / 32});
        w.format = WeightFormat::FP4_BLOCK;
        w.scale = s.data;
        w.block = 32;
        w.scale_cols = s.shape[1];
        return w;
      }
      default:
        mismatch(t, "F32, BF16, F8_E4M3 or packed FP4 I8 [" + std::to_string(rows) + ", " +
                        std::to_string(cols) + "]");
    }
  }

  const TensorView& scale(const std::string& name, std::vector<int64_t> shape) const {
    const TensorView& s = tensor(name);
    if (s.dtype != DType::F8_E8M0) mismatch(s, "F8_E8M0 block scales");
    expect_shape(s, shape, "F8_E8M0");
    if (std::memchr(s.data, 0xff, s.nbytes))
      throw LoadError(s.file + ": tensor '" + s.name + "': holds a NaN scale byte 0xff");
    return s;
  }

  // Plain matrices only (the fp32 linears that the reference runs on bf16/fp32 weights).
  WeightMatrix plain_matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const TensorView& t = tensor(name);
    if (t.dtype != DType::BF16 && t.dtype != DType::F32) mismatch(t, "BF16 or F32");
    return matrix(name, rows, cols);
  }

  std::vector<float> vec(const std::string& name, int64_t n) const {
    const TensorView& t = tensor(name);
    if (t.dtype != DType::BF16 && t.dtype != DType::F32) mismatch(t, "BF16 or F32 [" + std::to_string(n) + "]");
    expect_shape(t, {n}, std::string(dtype_name(t.dtype)));
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) {
      if (t.dtype == DType::F32) std::memcpy(&out[i], t.data + 4 * i, 4);
      else {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
    }
    return out;
  }

  std::vector<float> table(const std::string& name, int64_t rows, int64_t cols) const {
    const TensorView& t = tensor(name);
    if (t.dtype != DType::BF16 && t.dtype != DType::F32) mismatch(t, "BF16 or F32");
    WeightMatrix w = matrix(name, rows, cols);
    std::vector<float> out(rows * cols);
    for (int64_t r = 0; r < rows; ++r) weight_decode_row(w, r, out.data() + r * cols);
    return out;
  }

  std::vector<int32_t> id_table(const std::string& name, int64_t rows, int64_t cols, int64_t limit) const {
    const TensorView& t = tensor(name);
    if (t.dtype != DType::I32 && t.dtype != DType::I64) mismatch(t, "I32 or I64");
    expect_shape(t, {rows, cols}, dtype_name(t.dtype));
    std::vector<int32_t> out(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      int64_t v;
      if (t.dtype == DType::I32) {
        int32_t x;
        std::memcpy(&x, t.data + 4 * i, 4);
        v = x;
      } else {
        std::memcpy(&v, t.data + 8 * i, 8);
      }
      if (v < 0 || v >= limit)
        throw LoadError(t.file + ": tensor '" + t.name + "': expert id " + std::to_string(v) +
                        " out of range [0, " + std::to_string(limit) + ")");
      out[i] = int32_t(v);
    }
    return out;
  }

  HcWeights hc(const std::string& prefix, int64_t n_mix, int64_t n_scale) const {
    HcWeights h;
    const int64_t width = cfg_.hc_mult * cfg_.dim;
    const TensorView& fn = tensor(prefix + "_fn");
    if (fn.dtype != DType::F32) mismatch(fn, "F32");
    h.fn = matrix(prefix + "_fn", n_mix, width);
    h.base = vec(prefix + "_base", n_mix);
    h.scale = vec(prefix + "_scale", n_scale);
    return h;
  }

  CompressorWeights compressor(const std::string& p, int64_t ratio, int64_t width) const {
    CompressorWeights c;
    c.ratio = ratio;
    c.coff = ratio == 4 ? 2 : 1;
    c.width = width;
    c.wkv = plain_matrix(p + "wkv.weight", c.coff * width, cfg_.dim);
    c.wgate = plain_matrix(p + "wgate.weight", c.coff * width, cfg_.dim);
    c.ape = table(p + "ape", ratio, c.coff * width);
    c.norm = vec(p + "norm.weight", width);
    return c;
  }

  // A shared runtime's KV source compressor (V4.1): ratio > 1 pools with fp32 wkv / wgate,
  // ratio 1 is a bf16 wkv.
  CompressorWeights source_compressor(const std::string& p, int64_t ratio) const {
    CompressorWeights c;
    c.ratio = ratio;
    c.coff = 1;
    c.width = cfg_.head_dim;
    c.wkv = plain_matrix(p + "wkv.weight", c.width, cfg_.dim);
    if (ratio > 1) c.wgate = plain_matrix(p + "wgate.weight", c.width, cfg_.dim);
    c.norm = vec(p + "norm.weight", c.width);
    return c;
  }

  // Shared attention runtime extras (V4.1, docs/model/checkpoint.md §2): the compressor and index-key
  // projection of a KV source, the indexer query side of an index source.
  void shared_attention(const std::string& ap, int64_t layer, AttentionWeights& a) const {
    const Config& c = cfg_;
    if (c.owns_compressor(layer)) {
      a.has_compressor = true;
      a.compressor = source_compressor(ap + "compressor.", c.ratio(layer));
      a.has_index_keys = true;
      a.indexer_wk = plain_matrix(ap + "indexer.wk.weight", c.index_head_dim, c.head_dim);
      a.indexer_k_norm = vec(ap + "indexer.k_norm.weight", c.index_head_dim);
    }
    if (c.is_index_source(layer)) {
      a.has_indexer = true;
      a.indexer_wq_b = matrix(ap + "indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      a.indexer_weights_proj = plain_matrix(ap + "indexer.weights_proj.weight", c.index_n_heads, c.dim);
    }
  }

  EngramWeights engram(const std::string& p, int64_t rows) const {
    const Config& c = cfg_;
    EngramWeights e;
    e.rows = rows;
    e.head_dim = c.engram_head_dim;
    const TensorView& t = tensor(p + "embed.weight");
    if (t.dtype != DType::F8_E4M3) mismatch(t, "F8_E4M3 [" + std::to_string(rows) + ", " + std::to_string(e.head_dim) + "]");
    expect_shape(t, {rows, e.head_dim}, "F8_E4M3");
    const TensorView& s = scale(p + "embed.scale", {rows, e.head_dim / 32});
    e.table = t.data;
    e.table_scale = s.data;
    const int64_t n_cols = (c.engram_max_ngram - 1) * c.engram_n_heads;
    e.wkv = matrix(p + "wkv.weight", (c.hc_mult + 1) * c.dim, n_cols * e.head_dim);
    const std::vector<float> q = table(p + "q_weight", c.hc_mult, c.dim), k = table(p + "k_weight", c.hc_mult, c.dim);
    e.qk.resize(q.size());
    for (size_t i = 0; i < q.size(); ++i) e.qk[i] = q[i] * k[i];
    return e;
  }

  ExpertWeights expert(const std::string& p, int64_t inter) const {
    ExpertWeights e;
    e.w1 = matrix(p + "w1.weight", inter, cfg_.dim);
    e.w3 = matrix(p + "w3.weight", inter, cfg_.dim);
    e.w2 = matrix(p + "w2.weight", cfg_.dim, inter);
    return e;
  }

  LayerWeights layer(const std::string& p, int64_t id, int64_t ratio, bool hash_routed) const {
    const Config& c = cfg_;
    const ReleaseRules& rules = release_rules(c);
    const int64_t n_mix = (2 + c.hc_mult) * c.hc_mult;
    LayerWeights L;
    L.id = id;
    L.ratio = ratio;
    L.hash_routed = hash_routed;
    L.hc_attn = hc(p + "hc_attn", n_mix, 3);
    L.hc_ffn = hc(p + "hc_ffn", n_mix, 3);
    L.attn_norm = vec(p + "attn_norm.weight", c.dim);
    L.ffn_norm = vec(p + "ffn_norm.weight", c.dim);

    AttentionWeights& a = L.attn;
    const std::string ap = p + "attn.";
    a.wq_a = matrix(ap + "wq_a.weight", c.q_lora_rank, c.dim);
    a.q_norm = vec(ap + "q_norm.weight", c.q_lora_rank);
    a.wq_b = matrix(ap + "wq_b.weight", c.n_heads * c.head_dim, c.q_lora_rank);
    a.wkv = matrix(ap + "wkv.weight", c.head_dim, c.dim);
    a.kv_norm = vec(ap + "kv_norm.weight", c.head_dim);
    a.wo_a = matrix(ap + "wo_a.weight", c.o_groups * c.o_lora_rank, c.n_heads * c.head_dim / c.o_groups);
    a.wo_b = matrix(ap + "wo_b.weight", c.dim, c.o_groups * c.o_lora_rank);
    a.sink = vec(ap + "attn_sink", c.n_heads);
    if (rules.shared_attention_runtime) {
      shared_attention(ap, id, a);
    } else if (ratio != 0) {  // V4: every compressed layer its own compressor
      a.has_compressor = true;
      a.compressor = compressor(ap + "compressor.", ratio, c.head_dim);
    }
    if (!rules.shared_attention_runtime && ratio == 4) {  // and every ratio-4 layer its lightning indexer
      a.has_indexer = true;
      a.indexer_wq_b = matrix(ap + "indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      a.indexer_weights_proj = plain_matrix(ap + "indexer.weights_proj.weight", c.index_n_heads, c.dim);
      a.indexer_compressor = compressor(ap + "indexer.compressor.", 4, c.index_head_dim);
    }

    MoeWeights& m = L.ffn;
    const std::string fp = p + "ffn.";
    m.gate = plain_matrix(fp + "gate.weight", c.n_routed_experts, c.dim);
    if (hash_routed)
      m.tid2eid = id_table(fp + "gate.tid2eid", c.vocab_size, c.n_activated_experts, c.n_routed_experts);
    else
      m.bias = vec(fp + "gate.bias", c.n_routed_experts);
    if (rules.image_router_bias && store_.find(fp + "gate.bias_vl"))
      m.bias_vl = vec(fp + "gate.bias_vl", c.n_routed_experts);
    m.experts.reserve(c.n_routed_experts);
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      m.experts.push_back(expert(fp + "experts." + std::to_string(e) + ".", c.moe_inter_dim));
    m.has_shared = c.n_shared_experts > 0;
    if (m.has_shared) m.shared = expert(fp + "shared_experts.", c.moe_inter_dim * c.n_shared_experts);
    if (const int64_t e = id < c.n_layers ? c.engram_index(id) : -1; e >= 0) {
      L.has_engram = true;
      L.engram = engram(p + "engram.", c.engram_num_embeddings[size_t(e)]);
    }
    return L;
  }

 private:
  const Config& cfg_;
  const TensorStore& store_;
  std::vector<std::unique_ptr<uint8_t[]>>* row_checks_;
};

// The stages the shard index holds: one past the largest S of its mtp.S. prefixes.
int64_t stored_stage_count(const TensorStore& store) {
  int64_t n = 0;
  for (const auto& [name, t] : store.all()) {
    if (name.rfind("mtp.", 0) != 0) continue;
    int64_t s = 0;
    size_t i = 4;
    for (; i < name.size() && i < 12 && std::isdigit(static_cast<unsigned char>(name[i])); ++i) s = s * 10 + (name[i] - '0');
    if (i > 4 && i < name.size() && name[i] == '.') n = std::max(n, s + 1);
  }
  return n;
}

void bind_dspark(const Config& c, const TensorStore& store, Weights& w) {
  const int64_t stored = stored_stage_count(store);
  if (stored != c.n_mtp_layers)
    throw LoadError("checkpoint: the shard index holds " + std::to_string(stored) + " DSpark stages (mtp.S.*) but " +
                    "config.json's compress_ratios lists " + std::to_string(c.n_mtp_layers) +
                    " entries after the " + std::to_string(c.n_layers) + " backbone layers");
  // The stages' MoE has its own expert count: bound through a config that says so.
  const Config sc = c.dspark_stage_config();
  Binder b(sc, store, &w.row_checks);
  DsparkWeights& d = w.dspark;
  for (int64_t s = 0; s < c.n_mtp_layers; ++s)
    d.stages.push_back(b.layer("mtp." + std::to_string(s) + ".", c.n_layers + s, 0, false));
  const int64_t n_targets = int64_t(c.dspark_target_layers.size()), R = c.dspark_markov_rank;
  d.main_proj = b.matrix("mtp.0.main_proj.weight", c.dim, n_targets * c.dim);
  d.main_norm = b.vec("mtp.0.main_norm.weight", c.dim);
  const std::string last = "mtp." + std::to_string(c.n_mtp_layers - 1) + ".";
  d.norm = b.vec(last + "norm.weight", c.dim);
  // V4.1 names the Markov tables embed / head, the V4 refreshes markov_w1 / markov_w2.
  const ReleaseRules& rules = release_rules(c);
  const std::string markov = last + "markov_head.";
  d.markov_embed = b.plain_matrix(markov + rules.markov_embed + ".weight", c.vocab_size, R);
  d.markov_head = b.plain_matrix(markov + rules.markov_head + ".weight", c.vocab_size, R);
  if (!rules.staggered_mhc) d.hc_head = b.hc(last + "hc_head", c.hc_mult, 1);
  d.confidence = b.plain_matrix(last + "confidence_head.proj.weight", 1, c.dim + R);
}

}  // namespace

Weights bind_weights(const Config& c, const TensorStore& store) {
  Weights w;
  const ReleaseRules& rules = release_rules(c);
  Binder b(c, store, &w.row_checks);
  w.embed = b.plain_matrix("embed.weight", c.vocab_size, c.dim);
  w.head = b.plain_matrix("head.weight", c.vocab_size, c.dim);
  w.norm = b.vec("norm.weight", c.dim);
  if (!rules.staggered_mhc) w.hc_head = b.hc("hc_head", c.hc_mult, 1);
  for (int64_t l = 0; l < c.n_layers; ++l)
    w.layers.push_back(b.layer("layers." + std::to_string(l) + ".", l, c.ratio(l), l < c.n_hash_layers));
  // DSpark stages (mtp.*) of V4.1 and of the V4 refreshes, never an MTP module beside them;
  // V4.1's vision tensors stay unbound.
  if (c.has_dspark()) bind_dspark(c, store, w);
  if (rules.drafting != Drafting::kMtpModule) return w;
  for (int64_t k = 0; k < c.n_mtp_layers; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    MtpWeights m;
    m.block = b.layer(p, c.n_layers + k, c.ratio(c.n_layers + k), false);
    m.e_proj = b.matrix(p + "e_proj.weight", c.dim, c.dim);
    m.h_proj = b.matrix(p + "h_proj.weight", c.dim, c.dim);
    m.enorm = b.vec(p + "enorm.weight", c.dim);
    m.hnorm = b.vec(p + "hnorm.weight", c.dim);
    m.norm = b.vec(p + "norm.weight", c.dim);
    m.hc_head = b.hc(p + "hc_head", c.hc_mult, 1);
    w.mtp.push_back(std::move(m));
  }
  return w;
}

}  // namespace deepinfer::v4

namespace deepinfer::v4 {

int64_t matrix_bytes(const WeightMatrix& w) { return weight_data_bytes(w) + weight_scale_bytes(w); }

namespace {

// Sums f(matrix, share, routed) over the matrices a token touches in one layer; share < 1
// for routed experts.
template <typename F>
void for_active_in_layer(const Config& c, const LayerWeights& L, F f) {
  for (const WeightMatrix* m : {&L.hc_attn.fn, &L.hc_ffn.fn, &L.attn.wq_a, &L.attn.wq_b, &L.attn.wkv, &L.attn.wo_a,
                                &L.attn.wo_b, &L.ffn.gate})
    f(*m, 1.0);
  if (L.attn.has_compressor) {
    f(L.attn.compressor.wkv, 1.0);
    if (L.attn.compressor.wgate.valid()) f(L.attn.compressor.wgate, 1.0);
  }
  if (L.attn.has_indexer) {
    f(L.attn.indexer_wq_b, 1.0);
    f(L.attn.indexer_weights_proj, 1.0);
    if (L.attn.indexer_compressor.wkv.valid()) {
      f(L.attn.indexer_compressor.wkv, 1.0);
      f(L.attn.indexer_compressor.wgate, 1.0);
    }
  }
  if (L.attn.has_index_keys) f(L.attn.indexer_wk, 1.0 / double(L.ratio));  // one key per entry
  if (L.has_engram) f(L.engram.wkv, 1.0);
  const double share = double(c.n_activated_experts) / double(c.n_routed_experts);
  for (const ExpertWeights& e : L.ffn.experts)
    for (const WeightMatrix* m : {&e.w1, &e.w2, &e.w3}) f(*m, share, true);
  if (L.ffn.has_shared)
    for (const WeightMatrix* m : {&L.ffn.shared.w1, &L.ffn.shared.w2, &L.ffn.shared.w3}) f(*m, 1.0);
}

// The same over the backbone: the head, and every layer.
template <typename F>
void for_active_matrices(const Config& c, const Weights& w, F f) {
  f(w.head, 1.0);
  if (w.hc_head.fn.valid()) f(w.hc_head.fn, 1.0);
  for (const LayerWeights& L : w.layers) for_active_in_layer(c, L, f);
}

}  // namespace

int64_t active_weight_bytes_per_token(const Config& c, const Weights& w) {
  double bytes = double(matrix_bytes(w.embed)) / double(c.vocab_size);
  // Engram: each token reads n_cols table rows (codes and their per-32 scales) per layer.
  for (const LayerWeights& L : w.layers)
    if (L.has_engram)
      bytes += double((c.engram_max_ngram - 1) * c.engram_n_heads * (L.engram.head_dim + L.engram.head_dim / 32));
  for_active_matrices(c, w, [&](const WeightMatrix& m, double share, bool = false) { bytes += share * double(matrix_bytes(m)); });
  return int64_t(bytes);
}

int64_t routed_expert_bytes_per_token(const Config& c, const Weights& w) {
  double bytes = 0;
  for_active_matrices(c, w, [&](const WeightMatrix& m, double share, bool routed = false) {
    if (routed) bytes += share * double(matrix_bytes(m));
  });
  return int64_t(bytes);
}

double batch_weight_bytes_per_step(const Config& c, const Weights& w, const std::vector<double>& distinct_experts,
                                   int64_t batch) {
  if (distinct_experts.size() != w.layers.size())
    throw std::invalid_argument("batch_weight_bytes_per_step: one distinct-expert count per layer expected");
  // What every token reads by itself: its embedding row and its Engram rows.
  double per_token = double(matrix_bytes(w.embed)) / double(c.vocab_size);
  for (const LayerWeights& L : w.layers)
    if (L.has_engram)
      per_token += double((c.engram_max_ngram - 1) * c.engram_n_heads * (L.engram.head_dim + L.engram.head_dim / 32));
  double bytes = double(batch) * per_token;
  for_active_matrices(c, w, [&](const WeightMatrix& m, double share, bool routed = false) {
    if (!routed) bytes += share * double(matrix_bytes(m));
  });
  // A layer's routed experts all have the same shape: its experts' bytes / E per expert read.
  for (size_t l = 0; l < w.layers.size(); ++l) {
    double all_experts = 0;
    for (const ExpertWeights& e : w.layers[l].ffn.experts)
      for (const WeightMatrix* m : {&e.w1, &e.w2, &e.w3}) all_experts += double(matrix_bytes(*m));
    bytes += distinct_experts[l] * all_experts / double(std::max<int64_t>(1, c.n_routed_experts));
  }
  return bytes;
}

StepBound batch_step_bound(const Config& c, const Weights& w, const std::vector<std::vector<double>>& expert_rows,
                           int64_t batch, double bytes_per_s, double macs_per_s, double quantized_macs_per_s) {
  if (expert_rows.size() != w.layers.size())
    throw std::invalid_argument("batch_step_bound: one expert row histogram per layer expected");
  if (!(bytes_per_s > 0)) throw std::invalid_argument("batch_step_bound: bytes_per_s must be > 0");
  StepBound b;
  const double q_rate = macs_per_s > 0 && quantized_macs_per_s > 0 ? quantized_macs_per_s : macs_per_s;
  // The bf16 rate applies to FP8 / FP4 / BF16 weights: reference numerics hands them exact bf16
  // rows (act-quantised, or activations the reference holds in bf16, e.g. the head's), which the
  // kernels multiply in bf16 mode; fp32 weights (the mHC mixers) always take fp32 FMAs.
  auto bf16_weights = [](const WeightMatrix& m) { return m.is_quantized() || m.format == WeightFormat::BF16; };
  auto add = [&](double bytes, double macs, bool quantized) {
    const double rate = quantized ? q_rate : macs_per_s;
    const double read = bytes / bytes_per_s, mul = rate > 0 ? macs / rate : 0.0;
    b.memory_s += read;
    b.compute_s += mul;
    b.bound_s += std::max(read, mul);
  };
  double per_token = double(matrix_bytes(w.embed)) / double(c.vocab_size);
  for (const LayerWeights& L : w.layers)
    if (L.has_engram)
      per_token += double((c.engram_max_ngram - 1) * c.engram_n_heads * (L.engram.head_dim + L.engram.head_dim / 32));
  add(double(batch) * per_token, 0.0, false);
  for_active_matrices(c, w, [&](const WeightMatrix& m, double share, bool routed = false) {
    if (!routed) add(share * double(matrix_bytes(m)), double(batch) * share * double(m.rows * m.cols), bf16_weights(m));
  });
  // A layer's routed experts all have the same shape; one with r rows reads its bytes once
  // and does r times its multiply-adds.
  const double E = double(std::max<int64_t>(1, c.n_routed_experts));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    double bytes = 0, macs = 0;
    bool quantized = true;
    for (const ExpertWeights& e : w.layers[l].ffn.experts)
      for (const WeightMatrix* m : {&e.w1, &e.w2, &e.w3}) {
        bytes += double(matrix_bytes(*m));
        macs += double(m->rows * m->cols);
        quantized = quantized && bf16_weights(*m);
      }
    for (size_t r = 1; r < expert_rows[l].size(); ++r)
      add(expert_rows[l][r] * bytes / E, expert_rows[l][r] * double(r) * macs / E, quantized);
  }
  return b;
}

int64_t mtp_draft_bytes_per_token(const Config& c, const Weights& w) {
  if (w.mtp.empty()) return 0;
  const MtpWeights& m = w.mtp[0];
  double bytes = double(matrix_bytes(w.head)) + double(matrix_bytes(m.e_proj)) + double(matrix_bytes(m.h_proj)) +
                 double(matrix_bytes(w.embed)) / double(c.vocab_size);
  if (m.hc_head.fn.valid()) bytes += double(matrix_bytes(m.hc_head.fn));
  for_active_in_layer(c, m.block, [&](const WeightMatrix& x, double share, bool = false) { bytes += share * double(matrix_bytes(x)); });
  return int64_t(bytes);
}

double mtp_draft_cost(const Config& c, const Weights& w) {
  return double(mtp_draft_bytes_per_token(c, w)) / double(std::max<int64_t>(1, active_weight_bytes_per_token(c, w)));
}

double verify_token_cost(const Config& c, const Weights& w) {
  const double fresh = c.n_routed_experts > 0 ? 1.0 - double(c.n_activated_experts) / double(c.n_routed_experts) : 0.0;
  return fresh * double(routed_expert_bytes_per_token(c, w)) / double(std::max<int64_t>(1, active_weight_bytes_per_token(c, w)));
}

double dspark_draft_cost(const Config& c, const Weights& w) {
  const DsparkWeights& d = w.dspark;
  if (d.stages.empty()) return 0.0;
  const Config sc = c.dspark_stage_config();
  // A block's rows visit up to block_size * top-k of the stage's experts.
  const double rows = double(c.dspark_block_size);
  double bytes = double(matrix_bytes(w.head)) + double(matrix_bytes(d.main_proj)) + double(matrix_bytes(d.markov_head));
  for (const LayerWeights& L : d.stages)
    for_active_in_layer(sc, L, [&](const WeightMatrix& x, double share, bool routed = false) {
      bytes += (routed ? std::min(1.0, share * rows) : share) * double(matrix_bytes(x));
    });
  return bytes / double(std::max<int64_t>(1, active_weight_bytes_per_token(c, w)));
}

int64_t active_weight_macs_per_token(const Config& c, const Weights& w) {
  double macs = 0;
  for_active_matrices(c, w, [&](const WeightMatrix& m, double share, bool = false) { macs += share * double(m.rows * m.cols); });
  return int64_t(macs);
}

}  // namespace deepinfer::v4
