// The deepinfer executable as a user meets it: the stable CLI contract and its error paths
// (one clear line, non-zero exit, never a crash).
#include <gtest/gtest.h>

#include <algorithm>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <iterator>
#include <nlohmann/json.hpp>

#include "corrupt_checkpoint.h"
#include "golden.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int code;
  std::string output;  // stdout + stderr
};

// stderr (the log) goes into the output too unless stderr_to_output is false.
Result run(const std::string& args, bool stderr_to_output = true) {
  std::string cmd = std::string(DI_CLI_PATH) + " " + args + (stderr_to_output ? " 2>&1" : " 2>/dev/null");
  Result r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string shared_model(const std::string& name) { return std::string(DI_SHARED_DIR) + "/golden/" + name + "/model"; }

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("di_cli_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return (dir / name).string();
  }
};

}  // namespace

TEST(Cli, LogitsWritesNpyAndGenerateMatchesGolden) {
  Scratch s;
  std::string ids;
  for (int32_t t : golden::sequence("tiny-v4-c", "seq7")) ids += std::to_string(t) + " ";
  std::string tokens = s.file("t.txt", ids + "\n");
  std::string out = (s.dir / "o.npy").string();
  Result r = run("logits --model " + shared_model("tiny-v4-c") + " --tokens-file " + tokens + " --out " + out +
                 " --numerics float --mode chunk:3 --threads 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(fs::file_size(out), 128u + 7u * 1024u * 4u);  // npy header + [7, 1024] f32
  std::ifstream in(out, std::ios::binary);
  std::string magic(6, '\0');
  in.read(magic.data(), 6);
  EXPECT_EQ(magic, "\x93NUMPY");
  r = run("logits --model " + shared_model("tiny-v4-c") + " --tokens-file " + tokens + " --out " + out +
          " --numerics reference --compare " + std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/reference/seq7.prefill.f32");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("argmax agreement 1.0000"), std::string::npos) << r.output;
  r = run("generate --model " + shared_model("tiny-v4-c") + " --tokens-file " + tokens + " -n 4 --numerics float");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\n"), std::string::npos);
  // Speculative decoding (tiny-v4-c has an MTP module) prints the same n ids as plain decoding.
  const std::string gen = "generate --model " + shared_model("tiny-v4-c") + " --tokens-file " + tokens + " -n 9";
  const Result plain = run(gen + " --speculative off"), spec = run(gen + " --speculative mtp --num-draft-tokens 4");
  ASSERT_EQ(plain.code, 0) << plain.output;
  ASSERT_EQ(spec.code, 0) << spec.output;
  auto ids_line = [](const std::string& out) {  // the last line: the ids (logs come before)
    const size_t end = out.find_last_not_of('\n');
    const size_t start = out.rfind('\n', end);
    return out.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
  };
  EXPECT_EQ(ids_line(spec.output), ids_line(plain.output));
  const std::string printed = ids_line(plain.output);
  EXPECT_EQ(std::count(printed.begin(), printed.end(), ' '), 8) << plain.output;
  EXPECT_EQ(run(gen + " --speculative dspark").code, 2);
}

TEST(Cli, BadArgumentsAreRejected) {
  Scratch s;
  std::string tokens = s.file("t.txt", "0 1 2");
  std::string model = " --model " + shared_model("tiny-v4-c");
  EXPECT_EQ(run("logits" + model + " --tokens-file " + tokens + " --out x.npy --mode sideways").code, 2);
  EXPECT_EQ(run("logits" + model + " --tokens-file " + tokens + " --out x.npy --numerics fuzzy").code, 2);
  EXPECT_EQ(run("logits" + model + " --tokens-file " + tokens + " --bogus 1").code, 2);
  EXPECT_EQ(run("no-such-command").code, 2);
  Result r = run("logits" + model + " --tokens-file " + s.file("bad.txt", "0 1 banana") + " --out x.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("banana"), std::string::npos) << r.output;
  r = run("logits" + model + " --tokens-file " + s.file("big.txt", "0 5000") + " --out " + (s.dir / "x.npy").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("outside the vocabulary"), std::string::npos) << r.output;
  r = run("logits --model " + shared_model("tiny-v4-a") + " --tokens-file " + tokens + " --out x.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("reference numerics cannot run"), std::string::npos) << r.output;
}

// A checkpoint with one tensor of the wrong shape, one missing, or a broken config.json:
// one error line naming the culprit, exit 1.
TEST(Cli, MalformedCheckpointsGiveOneClearError) {
  Scratch s;
  std::string tokens = s.file("t.txt", "0 1 2");
  const fs::path src = shared_model("tiny-v4-c");
  auto clone = [&](const std::string& name) {
    fs::path d = s.dir / name;
    fs::create_directories(d);
    for (auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), d / e.path().filename());
    return d;
  };
  fs::path d = clone("badcfg");
  std::ofstream(d / "config.json") << "{\"model_type\": \"deepseek_v4\", \"hidden_size\": \"wide\"}";
  Result r = run("logits --model " + d.string() + " --tokens-file " + tokens + " --out x.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;

  d = clone("shape");
  {
    // Claim a different hidden size than the tensors have.
    std::ifstream in(src / "config.json");
    std::string cfg((std::istreambuf_iterator<char>(in)), {});
    auto pos = cfg.find("\"moe_intermediate_size\": 128");
    ASSERT_NE(pos, std::string::npos);
    cfg.replace(pos, 28, "\"moe_intermediate_size\": 256");
    std::ofstream(d / "config.json") << cfg;
  }
  r = run("logits --model " + d.string() + " --tokens-file " + tokens + " --out x.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("experts.0.w1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected"), std::string::npos) << r.output;

  d = clone("trunc");
  fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") / 2);
  r = run("logits --model " + d.string() + " --tokens-file " + tokens + " --out x.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
}

// Text in: generate --prompt streams text; chat renders turns with the DeepSeek encoder.
TEST(Cli, TextPromptAndChat) {
  const std::string model = " --model " + shared_model("tiny-v4-c") + " --numerics float";
  Result r = run("generate" + model + " --prompt 'Hello world' -n 5");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("generate" + model + " --prompt 'Hello' --tokens-file /dev/null");
  EXPECT_EQ(r.code, 2) << r.output;
  r = run("chat" + model + " -n 4 < /dev/null");
  EXPECT_EQ(r.code, 0) << r.output;
  Scratch s;
  std::string turns = s.file("turns.txt", "Hi\nAnd again\n");
  r = run("chat" + model + " -n 4 --thinking < " + turns);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[thinking]"), std::string::npos) << r.output;
}

// chat drafts with the checkpoint's MTP module by default: on the trained default model (drafts
// mostly accepted) the replies of a two-turn chat are the plain greedy ones, in both numerics.
TEST(Cli, ChatDraftsKeepTheGreedyReplies) {
  Scratch s;
  const std::string turns = s.file("turns.txt", "In the beginning\nAnd the LORD said\n");
  for (const char* num : {"float", "reference"}) {
    const std::string base = std::string("chat --model ") + DI_DEFAULT_MODEL_DIR + " -n 40 --threads 1 --numerics " + num;
    const Result plain = run(base + " --speculative off < " + turns, false);
    const Result drafted = run(base + " < " + turns, false);
    ASSERT_EQ(plain.code, 0) << plain.output;
    ASSERT_EQ(drafted.code, 0) << drafted.output;
    EXPECT_GT(plain.output.size(), 60u) << plain.output;  // two replies of text, not just prompts
    EXPECT_EQ(drafted.output, plain.output) << num;
    const Result logged = run(base + " --num-draft-tokens 2 < " + turns);
    ASSERT_EQ(logged.code, 0) << logged.output;
    const size_t at = logged.output.find("speculative: ");
    ASSERT_NE(at, std::string::npos) << logged.output;
    long long forwards = 0, drafts = 0, accepted = 0;
    ASSERT_EQ(std::sscanf(logged.output.c_str() + at, "speculative: %lld forwards; %lld drafts, %lld accepted", &forwards,
                          &drafts, &accepted),
              3)
        << logged.output;
    EXPECT_GT(accepted, 0) << logged.output;
    EXPECT_LT(forwards, 80) << logged.output;  // fewer forwards than the 80 tokens shown
  }
  EXPECT_EQ(run("chat --model " + shared_model("tiny-v4-c") + " --speculative dspark < /dev/null").code, 2);
}

// generate samples with --temperature and the API's filters: reproducible with --seed, greedy
// at temperature 0, bad values and drafting with sampling refused (exit 2).
TEST(Cli, GenerateSamples) {
  Scratch s;
  const std::string base = "generate --model " + shared_model("tiny-v4-c") + " --numerics float --threads 1 -n 12 " +
                           "--tokens-file " + s.file("p.txt", "0 17 230 41 99");
  auto ids = [](const Result& r) {  // the last line: the ids (the log lines carry timestamps)
    const size_t end = r.output.find_last_not_of('\n'), begin = r.output.rfind('\n', end);
    return r.output.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
  };
  const Result greedy = run(base), zero = run(base + " --temperature 0");
  ASSERT_EQ(greedy.code, 0) << greedy.output;
  EXPECT_EQ(ids(zero), ids(greedy));
  const std::string sampled = base + " --temperature 1.0 --top-k 50 --top-p 0.95 --repetition-penalty 1.2";
  const Result a = run(sampled + " --seed 7"), b = run(sampled + " --seed 7");
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(ids(a), ids(b));
  const std::string a_ids = ids(a);
  EXPECT_EQ(std::count(a_ids.begin(), a_ids.end(), ' '), 11) << a.output;  // 12 ids
  bool differs = ids(a) != ids(greedy);
  for (int seed = 1; seed <= 3 && !differs; ++seed) differs = ids(run(sampled + " --seed " + std::to_string(seed))) != ids(greedy);
  EXPECT_TRUE(differs);
  Result r = run(base + " --top-p 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("top_p must be in (0, 1]"), std::string::npos) << r.output;
  r = run(base + " --temperature 0.5 --speculative mtp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("greedy decoding only"), std::string::npos) << r.output;
  EXPECT_EQ(run(base + " --temperature warm").code, 2);
}

// `deepinfer --help`, `deepinfer help [command]` and `deepinfer <command> --help | -h`: usage,
// exit 0, every option of the command in the text (main.cpp lists a flag the hand-written
// usage forgot under "other options:", which these tests refuse).
namespace {
const char* kCommands[] = {"logits", "generate", "chat", "tokenize", "detokenize", "render",
                           "parse-output", "serve", "bench-serve", "bench"};
}  // namespace

TEST(Cli, HelpTopLevel) {
  for (const char* a : {"--help", "-h", "help"}) {
    const Result h = run(a);
    EXPECT_EQ(h.code, 0) << a;
    for (const char* c : kCommands) EXPECT_NE(h.output.find(std::string("  ") + c + " "), std::string::npos) << c;
  }
  EXPECT_EQ(run("").code, 2);  // no command: usage on stderr, an error
}

TEST(Cli, HelpEveryCommandListsEveryOption) {
  for (const char* c : kCommands)
    for (const std::string flag : {" --help", " -h", " --model /nonexistent --help"}) {
      if (std::string(c) == "parse-output" && flag.find("--model") != std::string::npos) continue;
      const Result h = run(c + flag);
      EXPECT_EQ(h.code, 0) << c << flag;
      EXPECT_NE(h.output.find(std::string("usage: deepinfer ") + c), std::string::npos) << c << flag;
      EXPECT_EQ(h.output.find("other options:"), std::string::npos) << c << " --help misses options:\n" << h.output;
    }
  const Result h = run("help serve");
  EXPECT_EQ(h.code, 0);
  for (const char* opt : {"--model", "--host", "--port", "--api-key", "--kv-memory", "--max-model-len", "--threads"})
    EXPECT_NE(h.output.find(opt), std::string::npos) << opt;
  const Result g = run("generate -h");
  for (const char* opt : {"--tokens-file", "--prompt", "-n N", "--numerics", "--kernels"})
    EXPECT_NE(g.output.find(opt), std::string::npos) << opt;
}

TEST(Cli, HelpUnknownArgumentsStillFail) {
  EXPECT_EQ(run("generate --bogus").code, 2);
  EXPECT_EQ(run("help nosuchcommand").code, 2);
}

// `deepinfer bench --json` prints one JSON object with the fields scripts read; --profile
// adds the decode profile on stderr. The triad runs twice (before and after), so this is
// one of the slower CLI tests (a few seconds).
TEST(Cli, BenchJsonAndProfile) {
  const std::string prof_path =
      (std::filesystem::temp_directory_path() / ("di_bench_profile_" + std::to_string(getpid()) + ".txt")).string();
  const std::string cmd = std::string(DI_CLI_PATH) + " bench --model " + shared_model("tiny-v4-c") +
                          " --prefill 8 --decode 4 --threads 2 --json --profile 2>" + prof_path;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ASSERT_EQ(pclose(p), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  for (const char* k : {"prefill_tok_s", "decode_tok_s", "decode_roofline_fraction", "mem_bandwidth_gb_s", "prefill_gflop_s"})
    EXPECT_GT(j.at(k).get<double>(), 0.0) << k;
  EXPECT_GT(j.at("peak_rss_bytes").get<int64_t>(), 1 << 20);
  EXPECT_LT(j.at("peak_rss_bytes").get<int64_t>(), int64_t(256) << 20);  // the triad's 384 MB are not counted
  ASSERT_EQ(j.at("mem_bandwidth_samples_gb_s").size(), 2u);
  const double a = j["mem_bandwidth_samples_gb_s"][0], b = j["mem_bandwidth_samples_gb_s"][1];
  EXPECT_DOUBLE_EQ(j.at("mem_bandwidth_gb_s").get<double>(), 0.5 * (a + b));
  EXPECT_EQ(j.at("n_prefill").get<int64_t>(), 8);
  EXPECT_EQ(j.at("n_decode").get<int64_t>(), 4);
  std::ifstream prof(prof_path);
  const std::string text((std::istreambuf_iterator<char>(prof)), std::istreambuf_iterator<char>());
  std::filesystem::remove(prof_path);
  EXPECT_NE(text.find("decode profile at depth 0"), std::string::npos) << text;
  for (const char* section : {"head.linear", "moe.experts", "attention", "hc.pre"})
    EXPECT_NE(text.find(section), std::string::npos) << section << "\n" << text;
}

// `bench --speculative --spec-rounds N --json`: each variant's ratio is the median of N runs,
// each against its own plain run, and the runs are listed beside it; the greedy output is
// checked against plain decoding in every run.
TEST(Cli, BenchSpeculativeRoundsReportTheMedian) {
  const Result r = run("bench --model " + shared_model("tiny-v4-c") +
                       " --prefill 8 --decode 12 --threads 2 --speculative mtp --num-draft-tokens 2 --spec-rounds 3 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.rfind("\n{");  // the JSON line comes after the logs
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1));
  const nlohmann::json& s = j.at("speculative");
  EXPECT_EQ(s.at("spec_rounds").get<int64_t>(), 3);
  EXPECT_TRUE(s.at("greedy_output_equal").get<bool>());
  auto check = [](const nlohmann::json& runs, double reported, const std::string& what) {
    ASSERT_EQ(runs.size(), 3u) << what;
    std::vector<double> v = runs.get<std::vector<double>>();
    for (double x : v) EXPECT_GT(x, 0.0) << what;
    std::sort(v.begin(), v.end());
    EXPECT_DOUBLE_EQ(reported, v[1]) << what;
  };
  check(s.at("speedup_runs"), s.at("speedup").get<double>(), "model drafts");
  check(s.at("zero_acceptance_speedup_runs"), s.at("zero_acceptance_speedup").get<double>(), "every draft rejected");
  for (const char* k : {"1", "2"})
    check(s.at("full_acceptance_speedup_runs").at(k), s.at("full_acceptance_speedup").at(k).get<double>(),
          std::string("every draft accepted, K=") + k);
  EXPECT_FALSE(s.at("full_acceptance_speedup").contains("3"));  // no more than --num-draft-tokens
  EXPECT_EQ(run("bench --model " + shared_model("tiny-v4-c") + " --speculative mtp --spec-rounds 0").code, 2);
}

// Corrupt weights (a NaN e4m3 code in a shared expert's w2) never become tokens:
// `logits` names the non-finite rows and exits 1, `generate` (greedy or sampled) fails at the
// first position, and --verify-weights refuses the checkpoint at load, naming the tensor and
// element.
TEST(Cli, CorruptWeightsFailClearly) {
  Scratch s;
  const fs::path bad = s.dir / "nan";
  deepinfer::testing::write_corrupt_copy(shared_model("tiny-v4-c"), bad, "layers.0.ffn.shared_experts.w2.weight", 3 * 128 + 5,
                                         std::string(1, '\x7f'));
  const std::string tokens = s.file("t.txt", "0 17 29 4");
  const std::string out = (s.dir / "o.npy").string();

  Result r = run("logits --model " + bad.string() + " --tokens-file " + tokens + " --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("4 of 4 logits rows are non-finite (NaN or Inf): rows 0, 1, 2, 3"), std::string::npos)
      << r.output;
  r = run("logits --model " + bad.string() + " --tokens-file " + tokens + " --out " + out + " --mode decode");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("4 of 4 logits rows are non-finite"), std::string::npos) << r.output;

  r = run("generate --model " + bad.string() + " --tokens-file " + tokens + " -n 3");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("non-finite logits (NaN) at position 3"), std::string::npos) << r.output;
  // Sampled too: the sampler reads NaN as -inf and would print tokens from the broken model.
  r = run("generate --model " + bad.string() + " --tokens-file " + tokens + " -n 3 --temperature 0.8 --seed 1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("non-finite logits (NaN) at position 3"), std::string::npos) << r.output;

  fs::remove(out);
  r = run("logits --verify-weights --model " + bad.string() + " --tokens-file " + tokens + " --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("tensor 'layers.0.ffn.shared_experts.w2.weight' (F8_E4M3 [256, 128]) holds NaN at element [3, 5]"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
  r = run("generate --verify-weights --model " + bad.string() + " --tokens-file " + tokens + " -n 3");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("layers.0.ffn.shared_experts.w2.weight"), std::string::npos) << r.output;

  // The clean checkpoint passes the scan and gives finite logits.
  r = run("logits --verify-weights --model " + shared_model("tiny-v4-c") + " --tokens-file " + tokens + " --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no NaN / Inf codes"), std::string::npos) << r.output;
}
