// DeepSeek-V4.1 configs and checkpoints (docs/model/config.md §2, checkpoint.md §2, v41.md §2):
// both config layouts give the same model, malformed configs and checkpoints fail with one
// error naming the culprit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "golden.h"
#include "model/deepseek_v4/engram.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fs::path kModel = fs::path(golden::dir("tiny-v41-a")) / "model";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// The error text of parse_config on `j`, or "" if it parses.
std::string config_error(const json& j) {
  try {
    parse_config(j.dump(), "config.json");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A private copy of the golden checkpoint whose safetensors header `edit` may change (names,
// shapes); the data section is kept, so the file stays a valid safetensors image.
struct CheckpointCopy {
  fs::path dir;
  explicit CheckpointCopy(const std::string& name) {
    dir = fs::temp_directory_path() / ("di_v41_" + name + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir / "inference");
    for (const auto& e : fs::directory_iterator(kModel))
      if (e.is_regular_file()) fs::copy_file(e.path(), dir / e.path().filename());
    fs::copy_file(kModel / "inference" / "config.json", dir / "inference" / "config.json");
    for (const auto& e : fs::recursive_directory_iterator(dir))
      fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  ~CheckpointCopy() { fs::remove_all(dir); }
  void edit_header(const std::function<void(json&)>& edit) const {
    const fs::path shard = dir / "model.safetensors";
    std::ifstream in(shard, std::ios::binary);
    std::string blob((std::istreambuf_iterator<char>(in)), {});
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(blob[size_t(i)]);
    json header = json::parse(blob.substr(8, n));
    edit(header);
    std::string h = header.dump();
    while (h.size() % 8) h += ' ';
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
    out += h;
    out += blob.substr(8 + n);
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << out;
  }
  void write(const std::string& file, const json& j) const { std::ofstream(dir / file) << j.dump(1); }
};

std::string load_error(const fs::path& dir) {
  try {
    Model::load(dir.string());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// The release layout (text_config + root quantization_config) and the reference's flat
// inference/config.json describe the same model.
TEST(V41Config, BothLayoutsAgree) {
  const Config a = load_config((kModel / "config.json").string());
  const Config b = load_config((kModel / "inference" / "config.json").string());
  EXPECT_TRUE(a.v41());
  EXPECT_TRUE(b.v41());
  EXPECT_EQ(a.dim, 256);
  EXPECT_EQ(b.dim, a.dim);
  EXPECT_EQ(b.n_layers, a.n_layers);
  EXPECT_EQ(b.window, a.window);
  EXPECT_EQ(b.compress_ratios, a.compress_ratios);
  EXPECT_EQ(b.kv_source_layers, a.kv_source_layers);
  EXPECT_EQ(b.index_source_layers, a.index_source_layers);
  EXPECT_EQ(b.candidate_source_layer, 5);
  EXPECT_EQ(a.candidate_source_layer, 5);
  EXPECT_EQ(b.candidate_block_size, a.candidate_block_size);
  EXPECT_EQ(b.candidate_topk_blocks, a.candidate_topk_blocks);
  EXPECT_EQ(b.engram_layer_ids, a.engram_layer_ids);
  EXPECT_EQ(b.engram_num_embeddings, a.engram_num_embeddings);
  EXPECT_EQ(b.engram_pad_id, a.engram_pad_id);
  EXPECT_EQ(b.n_activated_experts, a.n_activated_experts);
  EXPECT_EQ(b.moe_inter_dim, a.moe_inter_dim);
  EXPECT_EQ(b.rope_original_seq_len, a.rope_original_seq_len);
  EXPECT_EQ(b.rope_factor, a.rope_factor);
  EXPECT_EQ(b.dspark_n_activated_experts, a.dspark_n_activated_experts);
  EXPECT_DOUBLE_EQ(a.norm_eps, 1e-20);
  EXPECT_DOUBLE_EQ(b.norm_eps, 1e-20);
  EXPECT_EQ(a.weight_block, 32);
  EXPECT_EQ(b.weight_block, 32);
  // A checkpoint with only inference/config.json loads too.
  CheckpointCopy c("flat");
  fs::remove(c.dir / "config.json");
  EXPECT_EQ(load_error(c.dir), "");
}

TEST(V41Config, MalformedRolesGiveOneClearError) {
  const json good = read_json(kModel / "config.json");
  ASSERT_EQ(config_error(good), "");
  auto with = [&](const std::string& key, const json& v) {
    json j = good;
    j["text_config"][key] = v;
    return config_error(j);
  };
  // Layers 2-4 read compressed KV, but the first source comes after them.
  json late = good;
  late["text_config"]["kv_source_layer_ids"] = {3, 5};
  late["text_config"]["index_source_layer_ids"] = {3, 5, 7};
  std::string e = config_error(late);
  EXPECT_NE(e.find("no source at or before layer 2"), std::string::npos) << e;
  // Layer 5 (ratio 1) would read layer 2's ratio-2 cache.
  e = with("kv_source_layer_ids", {2});
  EXPECT_NE(e.find("layer 5 has ratio 1 but reads the compressed KV of source layer 2 with ratio 2"), std::string::npos)
      << e;
  e = with("index_source_layer_ids", {2, 7});
  EXPECT_NE(e.find("names layer 5, which is not in index_source_layer_ids"), std::string::npos) << e;
  e = with("index_source_layer_ids", {1, 2, 5, 7});
  EXPECT_NE(e.find("names layer 1, whose compress ratio is 0"), std::string::npos) << e;
  e = with("kv_source_layer_ids", {5, 2});
  EXPECT_NE(e.find("strictly ascending"), std::string::npos) << e;
  e = with("kv_source_layer_ids", {2, 5, 9});
  EXPECT_NE(e.find("beyond the 8 backbone layers"), std::string::npos) << e;
  e = with("candidate_source_layer_id", 6);
  EXPECT_NE(e.find("not an index source"), std::string::npos) << e;
  e = with("candidate_source_layer_id", 2);  // index source 5 after it reads another cache
  EXPECT_NE(e.find("index source 5 after it reads source 5"), std::string::npos) << e;
  e = with("engram_num_embeddings", {4062});
  EXPECT_NE(e.find("engram_num_embeddings"), std::string::npos) << e;
  e = with("engram_head_dim", 48);
  EXPECT_NE(e.find("multiple of 32"), std::string::npos) << e;
  e = with("num_hash_layers", 2);
  EXPECT_NE(e.find("no hash-routed layers"), std::string::npos) << e;
  json j = good;
  j["quantization_config"]["weight_block_size"] = {128, 128};
  e = config_error(j);
  EXPECT_NE(e.find("must be [32, 32]"), std::string::npos) << e;
  j = good;
  j["text_config"]["compress_ratios"][8] = 2;  // a DSpark stage
  e = config_error(j);
  EXPECT_NE(e.find("DSpark stage 0"), std::string::npos) << e;
  // The DSpark drafter's own settings.
  e = with("dspark_noise_token_id", 1024);
  EXPECT_NE(e.find("dspark_noise_token_id"), std::string::npos) << e;
  e = with("dspark_target_layer_ids", {5, 6, 8});
  EXPECT_NE(e.find("names layer 8, outside the backbone's 8 layers"), std::string::npos) << e;
  e = with("dspark_num_experts_per_tok", 5);
  EXPECT_NE(e.find("dspark_num_experts_per_tok"), std::string::npos) << e;
  e = with("dspark_markov_rank", 0);
  EXPECT_NE(e.find("dspark_markov_rank"), std::string::npos) << e;
}

// Fields of the wrong JSON type are named errors, never a JSON library exception (the config
// fuzzer found model_type = 0 escaping as nlohmann's type_error).
TEST(V41Config, WrongTypedMarkersAreClearErrors) {
  const json v4 = read_json(fs::path(golden::dir("tiny-v4-a")) / "model" / "config.json");
  json j = v4;
  j["model_type"] = 0;
  std::string e = config_error(j);
  EXPECT_NE(e.find("'model_type' must be a string"), std::string::npos) << e;
  j = v4;
  j["quantization_config"]["scale_fmt"] = 8;
  e = config_error(j);
  EXPECT_NE(e.find("'scale_fmt' must be a string"), std::string::npos) << e;
  j = read_json(kModel / "config.json");
  j["quantization_config"]["scale_fmt"] = json::array();
  e = config_error(j);
  EXPECT_NE(e.find("'scale_fmt' must be a string"), std::string::npos) << e;
}

// docs/model/checkpoint.md §2 layout: tensors that are missing or have the wrong block-scale shape, and the
// Engram token map, each named in the one error.
TEST(V41Checkpoint, MalformedTensorsAreNamed) {
  {
    CheckpointCopy c("noengram");
    c.edit_header([](json& h) {
      h["layers.5.engram.embed.weight_"] = h["layers.5.engram.embed.weight"];
      h.erase("layers.5.engram.embed.weight");
    });
    const std::string e = load_error(c.dir);
    EXPECT_NE(e.find("missing tensor 'layers.5.engram.embed.weight'"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("scale");
    c.edit_header([](json& h) { h["layers.2.attn.wkv.scale"]["shape"] = {8, 4}; });  // same bytes, [4, 8] expected
    const std::string e = load_error(c.dir);
    EXPECT_NE(e.find("'layers.2.attn.wkv.scale'"), std::string::npos) << e;
    EXPECT_NE(e.find("expected F8_E8M0 [4, 8]"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("tablescale");
    c.edit_header([](json& h) { h["layers.1.engram.embed.scale"]["shape"] = {2031, 4}; });
    const std::string e = load_error(c.dir);
    EXPECT_NE(e.find("'layers.1.engram.embed.scale'"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("indexkeys");
    c.edit_header([](json& h) { h.erase("layers.2.attn.indexer.wk.weight"); });
    const std::string e = load_error(c.dir);
    EXPECT_NE(e.find("missing tensor 'layers.2.attn.indexer.wk.weight'"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("dspark");  // the DSpark stages are bound like the backbone's layers
    c.edit_header([](json& h) { h.erase("mtp.1.markov_head.head.weight"); });
    std::string e = load_error(c.dir);
    EXPECT_NE(e.find("missing tensor 'mtp.1.markov_head.head.weight'"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("dsparkexperts");
    c.edit_header([](json& h) { h["mtp.0.main_proj.weight"]["shape"] = {768, 256}; });
    std::string e = load_error(c.dir);
    EXPECT_NE(e.find("'mtp.0.main_proj.weight'"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("nomap");
    fs::remove(c.dir / "engram_token_map.json");
    const std::string e = load_error(c.dir);
    EXPECT_NE(e.find("engram_token_map.json: missing"), std::string::npos) << e;
  }
  {
    CheckpointCopy c("badmap");
    json m = read_json(kModel / "engram_token_map.json");
    m["primes"][1][0][0] = 1033;
    c.write("engram_token_map.json", m);
    std::string e = load_error(c.dir);
    EXPECT_NE(e.find("primes of engram layer 5"), std::string::npos) << e;
    m = read_json(kModel / "engram_token_map.json");
    m["token_map"][7] = 900;  // beyond the compressed vocabulary of 850
    c.write("engram_token_map.json", m);
    e = load_error(c.dir);
    EXPECT_NE(e.find("token_map[7] = 900"), std::string::npos) << e;
    m = read_json(kModel / "engram_token_map.json");
    m["hash_multipliers"][0][1] = 12345;
    c.write("engram_token_map.json", m);
    e = load_error(c.dir);
    EXPECT_NE(e.find("hash_multipliers[0]"), std::string::npos) << e;
    // Only the token map is required: primes and multipliers follow from the config.
    m = read_json(kModel / "engram_token_map.json");
    c.write("engram_token_map.json", json{{"token_map", m["token_map"]}});
    EXPECT_EQ(load_error(c.dir), "");
  }
  {
    CheckpointCopy c("rows");  // the table rows must be the sum of the layer's primes
    json cfg = read_json(kModel / "config.json");
    cfg["text_config"]["engram_num_embeddings"] = {4062, 4153};
    c.write("config.json", cfg);
    const std::string e = load_error(c.dir);
    EXPECT_NE(e.find("engram_num_embeddings[1] = 4153 but the primes of engram layer 5"), std::string::npos) << e;
  }
}

// The prime layout and hash ids (docs/model/v41.md §6) against values computed independently of this
// code: the set's README (primes) and a plain int64 evaluation of the n-gram hash.
TEST(V41Engram, PrimesAndHashIds) {
  const Config cfg = load_config((kModel / "config.json").string());
  const auto primes = engram_primes(cfg);
  EXPECT_EQ(primes, (std::vector<std::vector<int64_t>>{{1009, 1013, 1019, 1021}, {1031, 1033, 1039, 1049}}));
  // The release layout (8 heads, 2- to 4-grams from 16000000; docs/model/v41.md §6.3) for layer 1, 2-grams.
  Config rel = cfg;
  rel.engram_layer_ids = {1, 14};
  rel.engram_max_ngram = 4;
  rel.engram_n_heads = 8;
  rel.engram_vocab_size = 16000000;
  const auto big = engram_primes(rel);
  EXPECT_EQ(std::vector<int64_t>(big[0].begin(), big[0].begin() + 8),
            (std::vector<int64_t>{16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183}));
  EXPECT_EQ(big[1].back(), 16000889);

  // Hash multipliers: numpy's default_rng stream reproduced (docs/model/v41.md §6.3: release
  // table, tiny table; and the set's own file for its 850-id compressed vocabulary).
  EXPECT_EQ(engram_hash_multipliers(1, 4, 99092),
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(engram_hash_multipliers(14, 4, 99092),
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  EXPECT_EQ(engram_hash_multipliers(1, 3, 1024), (std::vector<int64_t>{7415652013100227, 468352540858031, 3479800634247035}));
  EXPECT_EQ(engram_hash_multipliers(5, 3, 1024), (std::vector<int64_t>{3522570923760557, 2995104075036817, 1970864031485839}));
  const json file = read_json(kModel / "engram_token_map.json");
  EXPECT_EQ(engram_hash_multipliers(1, 3, 850), file["hash_multipliers"][0].get<std::vector<int64_t>>());
  EXPECT_EQ(engram_hash_multipliers(5, 3, 850), file["hash_multipliers"][1].get<std::vector<int64_t>>());

  const EngramTables t = load_engram_tables(cfg, kModel.string());
  const json m = read_json(kModel / "engram_token_map.json");
  auto tokens = golden::sequence("tiny-v41-a", "seq40");
  const int64_t n_cols = t.n_cols, S = int64_t(tokens.size());
  // In one call, and split 1 + 2 + rest: the history carries the look-back across calls.
  std::vector<int64_t> whole(S * 2 * n_cols), parts(S * 2 * n_cols);
  SequenceState a = SequenceState::create(cfg), b = SequenceState::create(cfg);
  engram_hash_ids(cfg, t, tokens.data(), S, a, whole.data());
  int64_t at = 0;
  for (int64_t n : {int64_t(1), int64_t(2), S - 3}) {
    engram_hash_ids(cfg, t, tokens.data() + at, n, b, parts.data() + at * 2 * n_cols);
    b.n_past += n;
    at += n;
  }
  EXPECT_EQ(parts, whole);
  for (int64_t p = 0; p < S; ++p)
    for (int64_t e = 0; e < 2; ++e) {
      const auto mult = m["hash_multipliers"][e].get<std::vector<int64_t>>();
      int64_t tok[3];
      for (int k = 0; k < 3; ++k)
        tok[k] = p - k >= 0 ? m["token_map"][tokens[size_t(p - k)]].get<int64_t>() : m["pad_compressed_id"].get<int64_t>();
      int64_t v = tok[0] * mult[0], offset = 0;
      for (int n = 1; n < 3; ++n) {
        v ^= tok[n] * mult[size_t(n)];
        for (int h = 0; h < 2; ++h) {
          const int64_t col = (n - 1) * 2 + h, prime = primes[size_t(e)][size_t(col)];
          ASSERT_EQ(whole[(p * 2 + e) * n_cols + col], v % prime + offset) << p << " " << e << " " << col;
          offset += prime;
        }
      }
    }
}
