#include "model/deepseek_v4/config.h"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace deepinfer::v4 {

using json = nlohmann::json;

namespace {

// Reads fields by name; every field may have several names (the Hugging Face config.json
// key first, then the reference's inference/config.json key, docs/model/config.md §1-§2), and an
// error names the first one.
struct Reader {
  const json& j;
  std::string src;
  using Names = std::initializer_list<const char*>;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw std::runtime_error(src + ": field '" + field + "' " + what);
  }
  const json* find(const std::string& field) const {
    auto it = j.find(field);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  // The first of names present: its value and the name it was found under.
  std::pair<const json*, std::string> find_any(Names names) const {
    for (const char* n : names)
      if (const json* v = find(n)) return {v, n};
    return {nullptr, *names.begin()};
  }
  int64_t integer(Names names, int64_t min_value, const int64_t* fallback = nullptr) const {
    auto [v, field] = find_any(names);
    if (!v) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    if (!v->is_number_integer()) fail(field, "must be an integer, got " + v->dump());
    int64_t x = v->get<int64_t>();
    if (x < min_value) fail(field, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
    return x;
  }
  int64_t integer_or(Names names, int64_t min_value, int64_t fallback) const {
    return integer(names, min_value, &fallback);
  }
  double number(Names names, const double* fallback = nullptr) const {
    auto [v, field] = find_any(names);
    if (!v) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    if (!v->is_number()) fail(field, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  double number_or(Names names, double fallback) const { return number(names, &fallback); }
  std::string string_or(Names names, const std::string& fallback) const {
    auto [v, field] = find_any(names);
    if (!v) return fallback;
    if (!v->is_string()) fail(field, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  bool boolean_or(Names names, bool fallback) const {
    auto [v, field] = find_any(names);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(field, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  // An array of integers (>= min_value each); empty when absent and not required.
  std::vector<int64_t> integers(Names names, int64_t min_value, bool required) const {
    auto [v, field] = find_any(names);
    std::vector<int64_t> out;
    if (!v) {
      if (required) fail(field, "is missing");
      return out;
    }
    if (!v->is_array()) fail(field, "must be an array of integers, got " + v->dump());
    for (const json& e : *v) {
      if (!e.is_number_integer()) fail(field, "must hold integers, got " + e.dump());
      const int64_t x = e.get<int64_t>();
      if (x < min_value) fail(field, "entries must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
      out.push_back(x);
    }
    return out;
  }
};

void check_positive_power_of_two(const Reader& r, const std::string& field, int64_t v) {
  if (v <= 0 || (v & (v - 1)) != 0) r.fail(field, "must be a power of two, got " + std::to_string(v));
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// V4.1 is told apart by its config alone: the nested text_config of the release layout, its
// model_type, or a key only V4.1 has (the flat inference/config.json layout).
bool is_v41_config(const json& j) {
  if (j.contains("text_config")) return true;
  // Not a string: not V4.1's marker; the V4 reader then names the field.
  const auto it = j.find("model_type");
  const std::string mt = it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  if (mt == "deepseek_v41" || mt == "deepseek_v41_text") return true;
  for (const char* k : {"kv_source_layer_ids", "kv_source_layers", "index_source_layer_ids", "index_source_layers",
                        "engram_layer_ids"})
    if (j.contains(k)) return true;
  return false;
}

// Fields V4 and V4.1 share, under either naming.
void parse_common(const Reader& r, Config& c) {
  c.vocab_size = r.integer({"vocab_size"}, 1);
  c.dim = r.integer({"hidden_size", "dim"}, 1);
  c.n_layers = r.integer({"num_hidden_layers", "n_layers"}, 1);
  c.n_heads = r.integer({"num_attention_heads", "n_heads"}, 1);
  if (r.integer_or({"num_key_value_heads"}, 1, 1) != 1)
    r.fail("num_key_value_heads", "must be 1 (DeepSeek-V4 shares one K=V latent across heads)");
  c.head_dim = r.integer({"head_dim"}, 1);
  c.rope_dim = r.integer({"qk_rope_head_dim", "rope_head_dim"}, 2);
  if (c.rope_dim % 2 || c.rope_dim > c.head_dim)
    r.fail("qk_rope_head_dim", "must be even and at most head_dim");
  c.q_lora_rank = r.integer({"q_lora_rank"}, 1);
  c.o_groups = r.integer({"o_groups"}, 1);
  if (c.n_heads % c.o_groups) r.fail("o_groups", "must divide num_attention_heads");
  c.o_lora_rank = r.integer({"o_lora_rank"}, 1);
  c.window = r.integer({"sliding_window", "window_size"}, 1);
  c.n_mtp_layers = r.integer_or({"num_nextn_predict_layers", "n_mtp_layers"}, 0, 0);

  c.compress_ratios = r.integers({"compress_ratios"}, 0, true);
  if (int64_t(c.compress_ratios.size()) < c.n_layers)
    r.fail("compress_ratios", "has " + std::to_string(c.compress_ratios.size()) +
                                  " entries, fewer than num_hidden_layers = " + std::to_string(c.n_layers));
  // MTP stages take the entries after the backbone; a missing entry means ratio 0.
  while (int64_t(c.compress_ratios.size()) < c.n_layers + c.n_mtp_layers) c.compress_ratios.push_back(0);

  c.rope_theta = r.number({"rope_theta"});
  c.compress_rope_theta = r.number_or({"compress_rope_theta"}, 160000.0);
  if (const json* rs = r.find("rope_scaling")) {
    if (!rs->is_object()) r.fail("rope_scaling", "must be an object");
    Reader rr{*rs, r.src + ": rope_scaling"};
    std::string type = rr.string_or({"type", "rope_type"}, "yarn");
    if (type != "yarn") rr.fail("type", "must be \"yarn\", got \"" + type + "\"");
    c.rope_factor = rr.number({"factor"});
    c.rope_original_seq_len = rr.integer({"original_max_position_embeddings"}, 1);
    c.beta_fast = rr.number_or({"beta_fast"}, 32.0);
    c.beta_slow = rr.number_or({"beta_slow"}, 1.0);
  } else if (r.find("original_seq_len")) {  // inference/config.json: flat YaRN keys
    c.rope_original_seq_len = r.integer({"original_seq_len"}, 0);
    c.rope_factor = r.number_or({"rope_factor"}, 1.0);
    c.beta_fast = r.number_or({"beta_fast"}, 32.0);
    c.beta_slow = r.number_or({"beta_slow"}, 1.0);
  }

  c.n_routed_experts = r.integer({"n_routed_experts"}, 1);
  c.n_shared_experts = r.integer_or({"n_shared_experts"}, 0, 1);
  if (c.n_shared_experts > 1) r.fail("n_shared_experts", "must be 0 or 1");
  c.n_activated_experts = r.integer({"num_experts_per_tok", "n_activated_experts"}, 1);
  if (c.n_activated_experts > c.n_routed_experts) r.fail("num_experts_per_tok", "exceeds n_routed_experts");
  c.moe_inter_dim = r.integer({"moe_intermediate_size", "moe_inter_dim"}, 1);
  std::string scoring = r.string_or({"scoring_func", "score_func"}, "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") r.fail("scoring_func", "must be \"sqrtsoftplus\", got \"" + scoring + "\"");
  std::string topk_method = r.string_or({"topk_method"}, "noaux_tc");
  if (topk_method != "noaux_tc") r.fail("topk_method", "must be \"noaux_tc\", got \"" + topk_method + "\"");
  c.norm_topk_prob = r.boolean_or({"norm_topk_prob"}, true);
  c.route_scale = r.number_or({"routed_scaling_factor", "route_scale"}, 1.0);
  c.swiglu_limit = r.number_or({"swiglu_limit"}, 0.0);
  std::string act = r.string_or({"hidden_act"}, "silu");
  if (act != "silu") r.fail("hidden_act", "must be \"silu\", got \"" + act + "\"");
  if (r.boolean_or({"tie_word_embeddings"}, false))
    r.fail("tie_word_embeddings", "must be false (DeepSeek-V4 has a separate head)");

  c.hc_mult = r.integer_or({"hc_mult"}, 1, 4);
  c.hc_sinkhorn_iters = r.integer_or({"hc_sinkhorn_iters"}, 1, 20);
  c.hc_eps = r.number_or({"hc_eps"}, 1e-6);
  c.bos_token_id = r.integer_or({"bos_token_id"}, 0, 0);
  c.eos_token_id = r.integer_or({"eos_token_id"}, 0, 1);
  c.max_position_embeddings = r.integer_or({"max_position_embeddings"}, 0, 0);
}

// quantization_config (both families keep it at the root); weight block B x B.
void parse_quantization(const Reader& root, Config& c) {
  if (const json* q = root.find("quantization_config")) {
    if (!q->is_object()) root.fail("quantization_config", "must be an object");
    if (auto it = q->find("weight_block_size"); it != q->end()) {
      if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() || (*it)[0] != (*it)[1] ||
          (*it)[0].get<int64_t>() <= 0)
        root.fail("quantization_config.weight_block_size", "must be [B, B] with B > 0");
      c.weight_block = (*it)[0].get<int64_t>();
    }
    const Reader qr{*q, root.src + ": quantization_config"};
    const std::string fmt = qr.string_or({"scale_fmt"}, "ue8m0");
    if (fmt != "ue8m0") root.fail("quantization_config.scale_fmt", "must be \"ue8m0\", got \"" + fmt + "\"");
  }
}

void check_expert_dtype(const Reader& r) {
  std::string expert_dtype = r.string_or({"expert_dtype"}, "fp4");
  if (expert_dtype != "fp4" && expert_dtype != "fp8")
    r.fail("expert_dtype", "must be \"fp4\" or \"fp8\", got \"" + expert_dtype + "\"");
}

bool has_dspark_keys(const json& j) {
  for (const auto& [key, value] : j.items())
    if (key.rfind("dspark_", 0) == 0) return true;
  return false;
}

void parse_dspark(const Reader& r, Config& c);

// V4-Flash-0731 / V4-Pro-0813 (docs/model/mtp_dspark.md §3): DSpark stages instead of the MTP module that
// num_nextn_predict_layers (still 1) announces. The stages are the compress_ratios entries
// after the backbone (all 0); the loader checks the shard index holds as many mtp.S prefixes.
void parse_v4_dspark(const Reader& r, Config& c) {
  const int64_t listed = int64_t(r.integers({"compress_ratios"}, 0, true).size());
  if (listed <= c.n_layers)
    r.fail("compress_ratios", "has " + std::to_string(listed) + " entries for num_hidden_layers = " +
                                  std::to_string(c.n_layers) +
                                  ": a DSpark checkpoint (dspark_* keys) lists one more entry per stage");
  c.n_mtp_layers = listed - c.n_layers;
  c.compress_ratios.resize(size_t(listed));
  for (int64_t l = c.n_layers; l < listed; ++l)
    if (c.ratio(l) != 0)
      r.fail("compress_ratios", "entry " + std::to_string(l) + " (DSpark stage " + std::to_string(l - c.n_layers) +
                                    ") must be 0, got " + std::to_string(c.ratio(l)));
  parse_dspark(r, c);
}

Config parse_v4(const Reader& r) {
  std::string model_type = r.string_or({"model_type"}, "deepseek_v4");
  if (model_type != "deepseek_v4") r.fail("model_type", "must be \"deepseek_v4\", got \"" + model_type + "\"");
  Config c;
  parse_common(r, c);
  for (int64_t l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    int64_t x = c.ratio(l);
    if (x != 0 && x != 4 && x != 128 && (x < 2 || l >= c.n_layers))
      r.fail("compress_ratios", "entry " + std::to_string(l) + " = " + std::to_string(x) + " is not supported");
  }
  bool any_csa = false;
  for (int64_t l = 0; l < c.n_layers; ++l) any_csa |= c.ratio(l) == 4;
  if (any_csa) {
    c.index_n_heads = r.integer({"index_n_heads"}, 1);
    c.index_head_dim = r.integer({"index_head_dim"}, 2);
    c.index_topk = r.integer({"index_topk"}, 1);
    check_positive_power_of_two(r, "index_head_dim", c.index_head_dim);
    if (c.index_head_dim < c.rope_dim) r.fail("index_head_dim", "must be at least qk_rope_head_dim");
  }
  c.n_hash_layers = r.integer_or({"num_hash_layers", "n_hash_layers"}, 0, 0);
  if (c.n_hash_layers > c.n_layers) r.fail("num_hash_layers", "exceeds num_hidden_layers");
  c.norm_eps = r.number_or({"rms_norm_eps", "norm_eps"}, 1e-6);
  if (has_dspark_keys(r.j)) parse_v4_dspark(r, c);
  parse_quantization(r, c);
  check_expert_dtype(r);
  return c;
}

// A strictly ascending list of backbone layer ids.
void check_layer_list(const Reader& r, const char* field, const std::vector<int64_t>& ids, int64_t n_layers) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= n_layers)
      r.fail(field, "names layer " + std::to_string(ids[i]) + ", beyond the " + std::to_string(n_layers) +
                        " backbone layers");
    if (i > 0 && ids[i] <= ids[i - 1]) r.fail(field, "must be strictly ascending, got " + list_str(ids));
  }
}

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The shared-attention roles of docs/model/v41.md §2: every compressed layer reads the compressed KV
// and index keys of the latest KV source at or before it and the top-k of the latest index
// source at or before it, which the reference requires to exist and to share its ratio.
void derive_v41_roles(const Reader& r, Config& c) {
  const char* kv_field = "kv_source_layer_ids";
  const char* ix_field = "index_source_layer_ids";
  check_layer_list(r, kv_field, c.kv_source_layers, c.n_layers);
  check_layer_list(r, ix_field, c.index_source_layers, c.n_layers);
  for (int64_t s : c.kv_source_layers) {
    if (c.ratio(s) == 0) r.fail(kv_field, "names layer " + std::to_string(s) + ", whose compress ratio is 0");
    if (!contains(c.index_source_layers, s))
      r.fail(kv_field, "names layer " + std::to_string(s) + ", which is not in " + ix_field +
                           " (a KV source derives the index keys its readers score against)");
  }
  for (int64_t s : c.index_source_layers)
    if (c.ratio(s) == 0) r.fail(ix_field, "names layer " + std::to_string(s) + ", whose compress ratio is 0");
  c.kv_source_of.assign(size_t(c.n_layers), -1);
  c.index_source_of.assign(size_t(c.n_layers), -1);
  int64_t kv = -1, ix = -1;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (contains(c.kv_source_layers, l)) kv = l;
    if (contains(c.index_source_layers, l)) ix = l;
    if (c.ratio(l) == 0) continue;
    if (kv < 0)
      r.fail(kv_field, "has no source at or before layer " + std::to_string(l) + " (compress ratio " +
                           std::to_string(c.ratio(l)) + "), which reads compressed KV: got " +
                           list_str(c.kv_source_layers));
    if (c.ratio(kv) != c.ratio(l))
      r.fail("compress_ratios", "layer " + std::to_string(l) + " has ratio " + std::to_string(c.ratio(l)) +
                                    " but reads the compressed KV of source layer " + std::to_string(kv) +
                                    " with ratio " + std::to_string(c.ratio(kv)));
    c.kv_source_of[size_t(l)] = kv;
    c.index_source_of[size_t(l)] = ix;  // ix >= kv: every KV source is an index source
  }
}

void parse_v41_attention(const Reader& r, Config& c) {
  for (int64_t l = 0; l < c.n_layers + c.n_mtp_layers; ++l)
    if (l >= c.n_layers && c.ratio(l) != 0)
      r.fail("compress_ratios", "entry " + std::to_string(l) + " (DSpark stage " + std::to_string(l - c.n_layers) +
                                    ") must be 0, got " + std::to_string(c.ratio(l)));
  c.kv_source_layers = r.integers({"kv_source_layer_ids", "kv_source_layers"}, 0, true);
  c.index_source_layers = r.integers({"index_source_layer_ids", "index_source_layers"}, 0, true);
  derive_v41_roles(r, c);
  if (!c.index_source_layers.empty()) {
    c.index_n_heads = r.integer({"index_n_heads"}, 1);
    c.index_head_dim = r.integer({"index_head_dim"}, 2);
    c.index_topk = r.integer({"index_topk"}, 1);
    if (c.index_head_dim < c.rope_dim) r.fail("index_head_dim", "must be at least qk_rope_head_dim");
  }
  c.candidate_source_layer = r.integer_or({"candidate_source_layer_id", "candidate_source_layer"}, -1, -1);
  if (c.candidate_source_layer >= 0) {
    const int64_t cs = c.candidate_source_layer;
    if (!c.is_index_source(cs))
      r.fail("candidate_source_layer_id", "names layer " + std::to_string(cs) + ", which is not an index source");
    c.candidate_topk_blocks = r.integer({"candidate_topk_blocks"}, 1);
    c.candidate_block_size = r.integer({"candidate_block_size"}, 1);
    // Its candidate mask covers the entries of its KV source: the index sources that use it
    // must score that same cache.
    for (int64_t s : c.index_source_layers)
      if (s > cs && c.kv_source_of[size_t(s)] != c.kv_source_of[size_t(cs)])
        r.fail("candidate_source_layer_id", "layer " + std::to_string(cs) + " reads the KV of source " +
                                                std::to_string(c.kv_source_of[size_t(cs)]) + " but index source " +
                                                std::to_string(s) + " after it reads source " +
                                                std::to_string(c.kv_source_of[size_t(s)]));
  }
}

void parse_v41_engram(const Reader& r, Config& c) {
  c.engram_layer_ids = r.integers({"engram_layer_ids"}, 0, false);
  if (c.engram_layer_ids.empty()) return;
  check_layer_list(r, "engram_layer_ids", c.engram_layer_ids, c.n_layers);
  c.engram_num_embeddings = r.integers({"engram_num_embeddings"}, 1, true);
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    r.fail("engram_num_embeddings", "has " + std::to_string(c.engram_num_embeddings.size()) + " entries for " +
                                        std::to_string(c.engram_layer_ids.size()) + " engram layers");
  c.engram_max_ngram = r.integer({"engram_max_ngram_size"}, 2);
  c.engram_vocab_size = r.integer({"engram_vocab_size"}, 2);
  c.engram_n_heads = r.integer({"engram_n_heads"}, 1);
  c.engram_head_dim = r.integer({"engram_head_dim"}, 1);
  if (c.engram_head_dim % 32)
    r.fail("engram_head_dim", "must be a multiple of 32 (one table scale per 32 columns), got " +
                                  std::to_string(c.engram_head_dim));
  c.engram_pad_id = r.integer_or({"engram_pad_token_id", "engram_pad_id"}, 0, 2);
  if (c.engram_pad_id >= c.vocab_size) r.fail("engram_pad_token_id", "is outside the vocabulary");
  c.engram_compressed_vocab_size = r.integer({"engram_compressed_vocab_size"}, 1);
  if (c.engram_compressed_vocab_size > (int64_t(1) << 24))  // the state keeps the ids as floats
    r.fail("engram_compressed_vocab_size", "must be at most 2^24, got " + std::to_string(c.engram_compressed_vocab_size));
}

// The DSpark keys of V4.1 (docs/model/mtp_dspark.md §2) and of the V4 0731/0813 refreshes (§3). The V4
// refreshes keep the backbone's MoE in their stages unless the config says otherwise.
void parse_dspark(const Reader& r, Config& c) {
  c.dspark_block_size = r.integer_or({"dspark_block_size"}, 0, 0);
  c.dspark_noise_token_id = r.integer_or({"dspark_noise_token_id"}, 0, 0);
  c.dspark_markov_rank = r.integer_or({"dspark_markov_rank"}, 0, 0);
  const int64_t experts = c.v41() ? 0 : c.n_routed_experts, top_k = c.v41() ? 0 : c.n_activated_experts;
  c.dspark_n_routed_experts = r.integer_or({"dspark_n_routed_experts"}, 0, experts);
  c.dspark_n_activated_experts = r.integer_or({"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, 0, top_k);
  c.dspark_target_layers = r.integers({"dspark_target_layer_ids"}, 0, false);
  if (c.n_mtp_layers == 0 || (c.v41() && c.dspark_block_size == 0)) return;  // no drafter (or not DSpark)
  if (c.dspark_block_size == 0) r.fail("dspark_block_size", "is missing (the checkpoint has other dspark_* keys)");
  // The drafter runs only if all of it is described; a half-described one is refused here,
  // not met as an out-of-range read during a draft.
  if (c.dspark_block_size < 1 || c.dspark_block_size > 64)
    r.fail("dspark_block_size", "must be in [1, 64], got " + std::to_string(c.dspark_block_size));
  if (c.dspark_noise_token_id < 0 || c.dspark_noise_token_id >= c.vocab_size)
    r.fail("dspark_noise_token_id", "must be a token id below vocab_size, got " + std::to_string(c.dspark_noise_token_id));
  if (c.dspark_markov_rank < 1) r.fail("dspark_markov_rank", "must be at least 1");
  if (c.dspark_n_routed_experts < 1) r.fail("dspark_n_routed_experts", "must be at least 1");
  if (c.dspark_n_activated_experts < 1 || c.dspark_n_activated_experts > c.dspark_n_routed_experts)
    r.fail("dspark_num_experts_per_tok", "must be in [1, dspark_n_routed_experts]");
  if (c.dspark_target_layers.empty()) r.fail("dspark_target_layer_ids", "must name at least one backbone layer");
  for (int64_t l : c.dspark_target_layers)
    if (l < 0 || l >= c.n_layers)
      r.fail("dspark_target_layer_ids", "names layer " + std::to_string(l) + ", outside the backbone's " +
                                            std::to_string(c.n_layers) + " layers");
}

// V4.1: the release config.json nests the text model in text_config and keeps
// quantization_config and the token ids at the root; inference/config.json is flat.
Config parse_v41(const json& root, const std::string& src) {
  const Reader rr{root, src};
  const json* text = rr.find("text_config");
  if (text && !text->is_object()) rr.fail("text_config", "must be an object");
  const Reader r{text ? *text : root, text ? src + ": text_config" : src};
  Config c;
  c.family = Family::V41;
  parse_common(r, c);
  // Token ids may sit at the root of the release layout.
  c.bos_token_id = r.integer_or({"bos_token_id"}, 0, rr.integer_or({"bos_token_id"}, 0, 0));
  c.eos_token_id = r.integer_or({"eos_token_id"}, 0, rr.integer_or({"eos_token_id"}, 0, 1));
  constexpr int64_t kReferenceImageId = 129264;  // ModelArgs.image_token_id: <｜deepseek_image｜>
  c.image_token_id = r.integer_or({"image_token_id"}, 0,
                                  rr.integer_or({"image_token_id"}, 0, c.vocab_size > kReferenceImageId ? kReferenceImageId : -1));
  if (c.image_token_id >= c.vocab_size) c.image_token_id = -1;
  if (c.max_position_embeddings == 0) c.max_position_embeddings = rr.integer_or({"max_position_embeddings"}, 0, 0);
  if (r.integer_or({"num_hash_layers", "n_hash_layers"}, 0, 0) != 0)
    r.fail("num_hash_layers", "must be 0: DeepSeek-V4.1 has no hash-routed layers");
  if (c.n_shared_experts != 1) r.fail("n_shared_experts", "must be 1 (the V4.1 reference asserts it)");
  c.norm_eps = r.number_or({"rms_norm_eps", "norm_eps"}, 1e-20);
  c.gate_temp = r.number_or({"gate_temp"}, 1.0);
  if (!(c.gate_temp > 0.0)) r.fail("gate_temp", "must be > 0");
  parse_v41_attention(r, c);
  parse_v41_engram(r, c);
  parse_dspark(r, c);
  // The release keeps quantization_config at the root; accept it in text_config too.
  c.weight_block = 32;
  parse_quantization(rr, c);
  if (text) parse_quantization(r, c);
  if (c.weight_block != 32)
    rr.fail("quantization_config.weight_block_size",
            "must be [32, 32] for DeepSeek-V4.1 (its reference hard-codes 32-wide FP8 blocks), got " +
                std::to_string(c.weight_block));
  check_expert_dtype(r);
  return c;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(src + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error(src + ": not a JSON object");
  if (is_v41_config(j)) return parse_v41(j, src);
  return parse_v4(Reader{j, src});
}

Config load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace deepinfer::v4
