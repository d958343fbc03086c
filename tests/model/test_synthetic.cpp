// Synthetic checkpoints (model/deepseek_v4/synthetic.h, `bench --synthetic`): the weights of a
// config built in memory run the real load path. A small config saved as a folder loads through
// the normal loader and gives byte-identical logits; the layout equals the generated
// checkpoints' (tensor names, dtypes, shapes); the bytes depend on the seed only; a config
// too large for the memory is refused before anything is allocated.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "core/thread_pool.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/routing_trace.h"
#include "model/deepseek_v4/synthetic.h"

using namespace deepinfer;
using namespace deepinfer::v4;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shared_model(const std::string& name) { return std::string(DI_SHARED_DIR) + "/golden/" + name + "/model"; }
// tests/data/../../tools/bench: the committed full-size config.
std::string flash_0731_config() { return std::string(DI_TEST_DATA_DIR) + "/../../tools/bench/v4-flash-0731.json"; }

// tiny-v4-c's config (V4: hash layers, ratio-4 / ratio-128 layers, one MTP module).
std::string tiny_v4() { return read_file(shared_model("tiny-v4-c") + "/config.json"); }
// The same in the V4-Flash-0731 layout: three DSpark stages instead of the MTP module.
std::string tiny_0731() {
  json c = json::parse(tiny_v4());
  c["compress_ratios"] = {0, 4, 128, 4, 128, 0, 0, 0, 0};
  c["dspark_block_size"] = 5;
  c["dspark_noise_token_id"] = 1023;
  c["dspark_target_layer_ids"] = {3, 4, 5};
  c["dspark_markov_rank"] = 32;
  return c.dump(2);
}
// tiny-v41-a's config without its Engram layers (V4.1: 32-blocks, shared KV / index sources,
// DSpark stages with their own MoE).
std::string tiny_v41_without_engram() {
  json c = json::parse(read_file(shared_model("tiny-v41-a") + "/config.json"));
  json& t = c["text_config"];
  for (auto it = t.begin(); it != t.end();)
    it = it.key().rfind("engram_", 0) == 0 ? t.erase(it) : std::next(it);
  return c.dump(2);
}

InMemoryCheckpoint build(const std::string& config, uint64_t seed, ThreadPool* pool = nullptr) {
  SyntheticOptions o;
  o.seed = seed;
  o.pool = pool;
  return make_synthetic_checkpoint(config, "synthetic-test", o);
}

const MemoryImage& image(const InMemoryCheckpoint& c) { return c.store->images().at(0); }

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("di_synthetic_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(dir); }
  ~TempDir() { fs::remove_all(dir); }
  std::string path(const std::string& sub) const { return (dir / sub).string(); }
};

std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& tokens, NumericsMode mode) {
  Numerics num;
  num.mode = mode;
  auto st = m.new_sequence();
  std::vector<float> out(tokens.size() * size_t(m.config().vocab_size));
  // Two chunks: prefill, then decode-sized steps.
  m.forward(tokens.data(), 5, st, num, out.data());
  for (size_t i = 5; i < tokens.size(); ++i) m.forward(&tokens[i], 1, st, num, out.data() + i * m.config().vocab_size);
  return out;
}

// "name dtype [shape]" lines sorted by name, FNV-1a 64 over all of them: the layout's digest.
struct Layout {
  size_t count = 0;
  uint64_t digest = 0xcbf29ce484222325ull;
};
Layout layout_of(const std::map<std::string, TensorView>& tensors) {
  Layout l;
  for (const auto& [name, t] : tensors) {  // std::map: sorted by name
    std::string line = name + " " + dtype_name(t.dtype) + " [";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) line += ',';
      line += std::to_string(t.shape[i]);
    }
    line += "]\n";
    for (unsigned char ch : line) l.digest = (l.digest ^ ch) * 0x100000001b3ull;
    ++l.count;
  }
  return l;
}
Layout layout_of(const SyntheticPlan& plan) {
  std::map<std::string, TensorView> m;
  for (const SyntheticTensor& t : plan.tensors) {
    TensorView v;
    v.dtype = t.dtype;
    v.shape = t.shape;
    m.emplace(t.name, v);
  }
  return layout_of(m);
}

// The tensors' names, dtypes and shapes, keyed by name (filter: keep the name).
std::map<std::string, std::string> signature(const TensorStore& s, bool (*keep)(const std::string&) = nullptr) {
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : s.all())
    if (!keep || keep(name)) out[name] = std::string(dtype_name(t.dtype)) + " " + t.shape_str();
  return out;
}

// "" when equal, else the first few entries that differ.
std::string differences(const std::map<std::string, std::string>& got, const std::map<std::string, std::string>& want) {
  std::string d;
  int shown = 0;
  for (const auto& [name, sig] : want) {
    auto it = got.find(name);
    if (it == got.end() || it->second != sig)
      if (shown++ < 8) d += name + ": want " + sig + ", got " + (it == got.end() ? "nothing" : it->second) + "\n";
  }
  for (const auto& [name, sig] : got)
    if (!want.count(name) && shown++ < 8) d += name + ": not expected (" + sig + ")\n";
  return d;
}

struct CliResult {
  int code;
  std::string output;
};
CliResult cli(const std::string& args) {
  const std::string cmd = std::string(DI_CLI_PATH) + " " + args + " 2>&1";
  CliResult r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace

// (1) The real path: the in-memory run and the saved folder loaded by the normal loader give
// byte-identical logits, for V4 (MTP, hash routing), the 0731 DSpark layout and V4.1.
TEST(Synthetic, SavedFolderLoadsAndGivesTheSameLogits) {
  const std::vector<std::pair<std::string, std::string>> configs = {
      {"tiny-v4-c", tiny_v4()}, {"tiny-v4-c-0731", tiny_0731()}, {"tiny-v41-no-engram", tiny_v41_without_engram()}};
  const std::vector<int32_t> tokens = {0, 17, 300, 5, 999, 42, 7, 128, 256, 3, 1000, 64};
  ThreadPool pool(2);
  for (const auto& [what, config] : configs) {
    SCOPED_TRACE(what);
    TempDir tmp;
    const InMemoryCheckpoint ckpt = build(config, 11, &pool);
    save_synthetic_checkpoint(ckpt, tmp.path("model"));
    // The folder holds the image byte for byte (also the tensors no forward reads, the drafter's).
    const std::string file = read_file(tmp.path("model") + "/model.safetensors");
    ASSERT_EQ(file.size(), image(ckpt).size());
    EXPECT_EQ(std::memcmp(file.data(), image(ckpt).data(), file.size()), 0);
    auto in_memory = Model::load(ckpt, "synthetic:" + what);
    auto from_disk = Model::load(tmp.path("model"));
    EXPECT_EQ(in_memory->drafter(), from_disk->drafter());
    if (what == "tiny-v4-c") EXPECT_EQ(in_memory->drafter(), Model::Drafter::kMtp);
    else EXPECT_EQ(in_memory->drafter(), Model::Drafter::kDspark);
    for (NumericsMode mode : {NumericsMode::Reference, NumericsMode::Float}) {
      RoutingTrace trace;
      RoutingTrace* previous = set_routing_trace(&trace);
      const std::vector<float> a = logits_of(*in_memory, tokens, mode);
      set_routing_trace(previous);
      const std::vector<float> b = logits_of(*from_disk, tokens, mode);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << numerics_name(mode);
      // Sane values: finite, spread (the head's init gives logits of std ~3), and the tokens
      // route to more experts than one token's top-k in the last (bias-routed) layer.
      double sum = 0, sq = 0;
      for (float x : a) {
        ASSERT_TRUE(std::isfinite(x));
        sum += x;
        sq += double(x) * x;
      }
      const double mean = sum / double(a.size()), sd = std::sqrt(sq / double(a.size()) - mean * mean);
      EXPECT_GT(sd, 0.5);
      EXPECT_LT(sd, 20.0);
      const Config& c = in_memory->config();
      EXPECT_GT(trace.distinct(c.n_layers - 1), c.n_activated_experts);
    }
  }
}

// The CLI: `logits --synthetic --save` and `logits --model` of the saved folder write the same
// bytes; `bench --synthetic` runs on it and says so in its report.
TEST(Synthetic, CliSaveAndBench) {
  TempDir tmp;
  fs::create_directories(tmp.dir);
  const std::string cfg = tmp.path("config.json"), tokens = tmp.path("t.txt");
  std::ofstream(cfg) << tiny_0731();
  std::ofstream(tokens) << "0 17 300 5 999 42 7\n";
  CliResult r = cli("logits --synthetic " + cfg + " --seed 4 --save " + tmp.path("saved") + " --tokens-file " + tokens +
                    " --out " + tmp.path("a.npy") + " --threads 2");
  ASSERT_EQ(r.code, 0) << r.output;
  r = cli("logits --model " + tmp.path("saved") + " --tokens-file " + tokens + " --out " + tmp.path("b.npy") +
          " --threads 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_file(tmp.path("a.npy")), read_file(tmp.path("b.npy")));
  // Saving into a non-empty folder is refused, and --seed without --synthetic too.
  r = cli("logits --synthetic " + cfg + " --save " + tmp.path("saved") + " --tokens-file " + tokens + " --out " +
          tmp.path("c.npy"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("not empty"), std::string::npos) << r.output;
  r = cli("logits --model " + tmp.path("saved") + " --seed 3 --tokens-file " + tokens + " --out " + tmp.path("c.npy"));
  EXPECT_EQ(r.code, 2) << r.output;
  r = cli("bench --synthetic " + cfg + " --seed 4 --prefill 8 --decode 4 --threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t brace = r.output.rfind("\n{");
  ASSERT_NE(brace, std::string::npos) << r.output;
  const json j = json::parse(r.output.substr(brace + 1));
  EXPECT_EQ(j["synthetic_weights"]["seed"], 4);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["prefill_tok_s"].get<double>(), 0.0);
}

// (2) The layout equals the generated checkpoints' exactly: names, dtypes, shapes (and for
// tiny-v4-c, where make_checkpoint.py wrote it, the same file order and offsets).
TEST(Synthetic, LayoutEqualsGeneratedCheckpoints) {
  for (const std::string& dir : {shared_model("tiny-v4-c"), std::string(DI_DEFAULT_MODEL_DIR)}) {
    SCOPED_TRACE(dir);
    const TensorStore real(dir);
    const InMemoryCheckpoint ckpt = build(read_file(dir + "/config.json"), 1);
    EXPECT_EQ(differences(signature(*ckpt.store), signature(real)), "");
  }
  // V4.1: tiny-v41-a's tensors but its Engram ones (which the config without Engram lacks).
  const TensorStore v41(shared_model("tiny-v41-a"));
  const InMemoryCheckpoint ckpt = build(tiny_v41_without_engram(), 1);
  auto not_engram = [](const std::string& name) { return name.find(".engram.") == std::string::npos; };
  EXPECT_EQ(differences(signature(*ckpt.store), signature(v41, not_engram)), "");
  EXPECT_GT(signature(v41).size(), signature(v41, not_engram).size());
  // Layouts without a checkpoint on disk: digests of make_checkpoint.py --config X --list
  // ("name dtype [shape]" sorted by name, FNV-1a 64; see the commands in tools/bench/README.md).
  const Layout l0731 = layout_of(plan_synthetic(parse_config(tiny_0731(), "tiny-0731"), 0));
  EXPECT_EQ(l0731.count, 739u);
  EXPECT_EQ(l0731.digest, 0xa0c42824e93e0299ull);
  // The full V4-Flash-0731: the published 72,317 tensors, 166,869,228,280 bytes of data.
  const SyntheticPlan flash = plan_synthetic(load_config(flash_0731_config()), 0);
  const Layout lf = layout_of(flash);
  EXPECT_EQ(lf.count, 72317u);
  EXPECT_EQ(lf.digest, 0x6836445519bad761ull);
  EXPECT_EQ(flash.data_bytes, 166869228280ull);
}

// (3) Determinism: the seed alone sets the bytes, whatever the thread count.
TEST(Synthetic, SameSeedSameBytesOnAnyThreadCount) {
  ThreadPool two(2), three(3);
  const std::string config = tiny_0731();
  const InMemoryCheckpoint a = build(config, 5), b = build(config, 5, &two), c = build(config, 5, &three);
  ASSERT_EQ(image(a).size(), image(b).size());
  ASSERT_EQ(image(a).size(), image(c).size());
  EXPECT_EQ(std::memcmp(image(a).data(), image(b).data(), image(a).size()), 0);
  EXPECT_EQ(std::memcmp(image(a).data(), image(c).data(), image(a).size()), 0);
  // Another seed: every random tensor differs (the scales, constant per tensor, do not).
  const InMemoryCheckpoint d = build(config, 6, &two);
  ASSERT_EQ(image(a).size(), image(d).size());
  int64_t random = 0, differ = 0;
  for (const auto& [name, t] : a.store->all()) {
    if (t.dtype == DType::F8_E8M0) continue;
    const TensorView* u = d.store->find(name);
    ASSERT_NE(u, nullptr);
    ++random;
    differ += std::memcmp(t.data, u->data, t.nbytes) != 0;
  }
  EXPECT_GT(random, 400);
  EXPECT_EQ(differ, random);
}

// (4) A config too large for the memory is refused before allocating, naming both figures.
TEST(Synthetic, RefusesWhenTheMemoryLacks) {
  const std::string flash = read_file(flash_0731_config());
  const SyntheticPlan plan = plan_synthetic(parse_config(flash, "flash"), 0);
  SyntheticOptions o;
  o.budget = MemoryBudget{uint64_t(16) << 30, "a test limit"};
  try {
    make_synthetic_checkpoint(flash, "flash", o);
    FAIL() << "V4-Flash-0731 built within 16 GiB";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(plan.image_bytes()) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("17179869184 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("a test limit"), std::string::npos) << what;
  }
  // The caller's extra bytes count: exactly enough builds, one byte less is refused.
  const std::string tiny = tiny_v4();
  const uint64_t need = plan_synthetic(parse_config(tiny, "tiny"), 0).image_bytes();
  o.extra_bytes = 1000;
  o.budget = MemoryBudget{need + 1000, "a test limit"};
  EXPECT_NO_THROW(make_synthetic_checkpoint(tiny, "tiny", o));
  o.budget = MemoryBudget{need + 999, "a test limit"};
  EXPECT_THROW(make_synthetic_checkpoint(tiny, "tiny", o), std::runtime_error);
  // This machine's own figure is a positive number of bytes.
  EXPECT_GT(available_memory().bytes, 0u);
}

// What it cannot build is refused with the reason: V4.1 Engram; a save into a non-empty folder.
TEST(Synthetic, RefusesWhatItCannotBuild) {
  try {
    build(read_file(shared_model("tiny-v41-a") + "/config.json"), 0);
    FAIL() << "built a V4.1 Engram config";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Engram"), std::string::npos) << e.what();
  }
  TempDir tmp;
  fs::create_directories(tmp.dir);
  std::ofstream(tmp.path("x")) << "x";
  EXPECT_THROW(save_synthetic_checkpoint(build(tiny_v4(), 0), tmp.dir.string()), std::runtime_error);
}
