#include "model/deepseek_v4/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace deepinfer::v4 {

using json = nlohmann::json;

namespace {

struct Reader {
  const json& j;
  std::string src;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw std::runtime_error(src + ": field '" + field + "' " + what);
  }
  const json* find(const std::string& field) const {
    auto it = j.find(field);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const std::string& field, int64_t min_value, const int64_t* fallback = nullptr) const {
    const json* v = find(field);
    if (!v) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    if (!v->is_number_integer()) fail(field, "must be an integer, got " + v->dump());
    int64_t x = v->get<int64_t>();
    if (x < min_value) fail(field, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
    return x;
  }
  int64_t integer_or(const std::string& field, int64_t min_value, int64_t fallback) const {
    return integer(field, min_value, &fallback);
  }
  double number(const std::string& field, const double* fallback = nullptr) const {
    const json* v = find(field);
    if (!v) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    if (!v->is_number()) fail(field, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  double number_or(const std::string& field, double fallback) const { return number(field, &fallback); }
  std::string string_or(const std::string& field, const std::string& fallback) const {
    const json* v = find(field);
    if (!v) return fallback;
    if (!v->is_string()) fail(field, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  bool boolean_or(const std::string& field, bool fallback) const {
    const json* v = find(field);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(field, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
};

void check_positive_power_of_two(const Reader& r, const std::string& field, int64_t v) {
  if (v <= 0 || (v & (v - 1)) != 0) r.fail(field, "must be a power of two, got " + std::to_string(v));
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
  if (j.contains("text_config") || j.contains("kv_source_layer_ids") || j.contains("engram_layer_ids"))
    throw std::runtime_error(src + ": this is a DeepSeek-V4.1 config; V4.1 is not supported yet");
  Reader r{j, src};
  std::string model_type = r.string_or("model_type", "deepseek_v4");
  if (model_type != "deepseek_v4")
    r.fail("model_type", "must be \"deepseek_v4\", got \"" + model_type + "\"");

  Config c;
  c.vocab_size = r.integer("vocab_size", 1);
  c.dim = r.integer("hidden_size", 1);
  c.n_layers = r.integer("num_hidden_layers", 1);
  c.n_heads = r.integer("num_attention_heads", 1);
  if (r.integer_or("num_key_value_heads", 1, 1) != 1)
    r.fail("num_key_value_heads", "must be 1 (DeepSeek-V4 shares one K=V latent across heads)");
  c.head_dim = r.integer("head_dim", 1);
  c.rope_dim = r.integer("qk_rope_head_dim", 2);
  if (c.rope_dim % 2 || c.rope_dim > c.head_dim)
    r.fail("qk_rope_head_dim", "must be even and at most head_dim");
  c.q_lora_rank = r.integer("q_lora_rank", 1);
  c.o_groups = r.integer("o_groups", 1);
  if (c.n_heads % c.o_groups) r.fail("o_groups", "must divide num_attention_heads");
  c.o_lora_rank = r.integer("o_lora_rank", 1);
  c.window = r.integer("sliding_window", 1);
  c.n_mtp_layers = r.integer_or("num_nextn_predict_layers", 0, 0);

  const json* ratios = r.find("compress_ratios");
  if (!ratios) r.fail("compress_ratios", "is missing");
  if (!ratios->is_array()) r.fail("compress_ratios", "must be an array");
  for (const json& v : *ratios) {
    if (!v.is_number_integer()) r.fail("compress_ratios", "must hold integers");
    int64_t x = v.get<int64_t>();
    if (x < 0) r.fail("compress_ratios", "entries must be >= 0");
    c.compress_ratios.push_back(x);
  }
  if (int64_t(c.compress_ratios.size()) < c.n_layers)
    r.fail("compress_ratios", "has " + std::to_string(c.compress_ratios.size()) +
                                  " entries, fewer than num_hidden_layers = " + std::to_string(c.n_layers));
  // MTP stages take the entries after the backbone; a missing entry means ratio 0.
  while (int64_t(c.compress_ratios.size()) < c.n_layers + c.n_mtp_layers) c.compress_ratios.push_back(0);
  for (int64_t l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    int64_t x = c.ratio(l);
    if (x != 0 && x != 4 && x != 128 && (x < 2 || l >= c.n_layers))
      r.fail("compress_ratios", "entry " + std::to_string(l) + " = " + std::to_string(x) + " is not supported");
  }

  c.rope_theta = r.number("rope_theta");
  c.compress_rope_theta = r.number_or("compress_rope_theta", 160000.0);
  if (const json* rs = r.find("rope_scaling")) {
    if (!rs->is_object()) r.fail("rope_scaling", "must be an object");
    Reader rr{*rs, src + ": rope_scaling"};
    std::string type = rr.string_or("type", rr.string_or("rope_type", "yarn"));
    if (type != "yarn") rr.fail("type", "must be \"yarn\", got \"" + type + "\"");
    c.rope_factor = rr.number("factor");
    c.rope_original_seq_len = rr.integer("original_max_position_embeddings", 1);
    c.beta_fast = rr.number_or("beta_fast", 32.0);
    c.beta_slow = rr.number_or("beta_slow", 1.0);
  }

  bool any_csa = false;
  for (int64_t l = 0; l < c.n_layers; ++l) any_csa |= c.ratio(l) == 4;
  if (any_csa) {
    c.index_n_heads = r.integer("index_n_heads", 1);
    c.index_head_dim = r.integer("index_head_dim", 2);
    c.index_topk = r.integer("index_topk", 1);
    check_positive_power_of_two(r, "index_head_dim", c.index_head_dim);
    if (c.index_head_dim < c.rope_dim) r.fail("index_head_dim", "must be at least qk_rope_head_dim");
  }

  c.n_routed_experts = r.integer("n_routed_experts", 1);
  c.n_shared_experts = r.integer_or("n_shared_experts", 0, 1);
  if (c.n_shared_experts > 1) r.fail("n_shared_experts", "must be 0 or 1");
  c.n_activated_experts = r.integer("num_experts_per_tok", 1);
  if (c.n_activated_experts > c.n_routed_experts)
    r.fail("num_experts_per_tok", "exceeds n_routed_experts");
  c.moe_inter_dim = r.integer("moe_intermediate_size", 1);
  std::string scoring = r.string_or("scoring_func", "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") r.fail("scoring_func", "must be \"sqrtsoftplus\", got \"" + scoring + "\"");
  std::string topk_method = r.string_or("topk_method", "noaux_tc");
  if (topk_method != "noaux_tc") r.fail("topk_method", "must be \"noaux_tc\", got \"" + topk_method + "\"");
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
  c.route_scale = r.number_or("routed_scaling_factor", 1.0);
  c.n_hash_layers = r.integer_or("num_hash_layers", 0, 0);
  if (c.n_hash_layers > c.n_layers) r.fail("num_hash_layers", "exceeds num_hidden_layers");
  c.swiglu_limit = r.number_or("swiglu_limit", 0.0);
  std::string act = r.string_or("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", "must be \"silu\", got \"" + act + "\"");
  if (r.boolean_or("tie_word_embeddings", false))
    r.fail("tie_word_embeddings", "must be false (DeepSeek-V4 has a separate head)");

  c.hc_mult = r.integer_or("hc_mult", 1, 4);
  c.hc_sinkhorn_iters = r.integer_or("hc_sinkhorn_iters", 1, 20);
  c.hc_eps = r.number_or("hc_eps", 1e-6);
  c.norm_eps = r.number_or("rms_norm_eps", 1e-6);
  c.bos_token_id = r.integer_or("bos_token_id", 0, 0);
  c.eos_token_id = r.integer_or("eos_token_id", 0, 1);

  if (const json* q = r.find("quantization_config")) {
    if (!q->is_object()) r.fail("quantization_config", "must be an object");
    if (auto it = q->find("weight_block_size"); it != q->end()) {
      if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
          (*it)[0] != (*it)[1] || (*it)[0].get<int64_t>() <= 0)
        r.fail("quantization_config.weight_block_size", "must be [B, B] with B > 0");
      c.weight_block = (*it)[0].get<int64_t>();
    }
    std::string fmt = q->value("scale_fmt", std::string("ue8m0"));
    if (fmt != "ue8m0") r.fail("quantization_config.scale_fmt", "must be \"ue8m0\", got \"" + fmt + "\"");
  }
  std::string expert_dtype = r.string_or("expert_dtype", "fp4");
  if (expert_dtype != "fp4" && expert_dtype != "fp8")
    r.fail("expert_dtype", "must be \"fp4\" or \"fp8\", got \"" + expert_dtype + "\"");
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace deepinfer::v4
