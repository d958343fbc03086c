// `deepinfer render` and `deepinfer parse-output` as a user runs them, and the
// checkpoint-directory rule that picks the prompt family.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "tokenizer/chat/family.h"
#include "tokenizer/chat/py_json.h"

namespace fs = std::filesystem;
using namespace deepinfer::chat;

namespace {

const fs::path kData = fs::path(DI_TEST_DATA_DIR) / "chat";

struct Result {
  int code;
  std::string out;  // stdout only
};

Result run(const std::string& args) {
  const std::string cmd = std::string(DI_CLI_PATH) + " " + args + " 2>/dev/null";
  Result r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("di_chat_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  fs::path file(const std::string& name, const std::string& content) {
    fs::create_directories((dir / name).parent_path());
    std::ofstream(dir / name, std::ios::binary) << content;
    return dir / name;
  }
};

}  // namespace

TEST(ChatCli, RenderPrintsTheGoldenPromptExactly) {
  for (const char* fam : {"v4", "v4_0731", "v41"}) {
    for (const char* name : {"tools_thinking", "history_thinking", "effort_max_thinking", "response_format", "unicode"}) {
      SCOPED_TRACE(std::string(fam) + "/" + name);
      const fs::path want = kData / "expected" / fam / (std::string(name) + ".txt");
      ASSERT_TRUE(fs::exists(want));
      const Result r = run(std::string("render --family ") + fam + " --input " + (kData / "cases" / (std::string(name) + ".json")).string());
      EXPECT_EQ(r.code, 0);
      EXPECT_TRUE(r.out == slurp(want)) << r.out;
    }
  }
}

TEST(ChatCli, RenderRejectsWhatTheReferenceRejects) {
  Result r = run("render --family v4 --input " + (kData / "cases" / "effort_low_thinking.json").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty());
  r = run("render --family v41 --input " + (kData / "cases" / "developer.json").string());
  EXPECT_EQ(r.code, 1);
  Scratch s;
  r = run("render --family v4 --input " + s.file("bad.json", R"({"messages": [], "options": {}})").string());
  EXPECT_EQ(r.code, 1);  // thinking_mode is a required argument of the reference
  r = run("render --family v5 --input x.json");
  EXPECT_EQ(r.code, 2);
  r = run("render --input x.json");
  EXPECT_EQ(r.code, 2);
}

TEST(ChatCli, RenderWithModelDirectoryPicksTheFamily) {
  Scratch s;
  s.file("v41/config.json", R"({"architectures": ["DeepseekV41ForCausalLM"], "text_config": {"engram_layer_ids": [1, 14]}})");
  s.file("v4/config.json", R"({"model_type": "deepseek_v4", "num_nextn_predict_layers": 1})");
  const std::string input = (kData / "cases" / "effort_max_thinking.json").string();
  for (const char* fam : {"v4", "v41"}) {
    const Result r = run("render --model " + (s.dir / fam).string() + " --input " + input);
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.out, slurp(kData / "expected" / fam / "effort_max_thinking.txt"));
  }
}

TEST(ChatCli, ParseOutputPrintsOneJsonObject) {
  Scratch s;
  const fs::path f = s.file("out.txt",
                            "Plan.</think>Calling.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                            "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                            "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                            "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>");
  Result r = run("parse-output --family v4 --thinking --text-file " + f.string());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "{\"content\": \"Calling.\", \"reasoning_content\": \"Plan.\", \"tool_calls\": [{\"name\": \"get_weather\", "
            "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"}]}\n");
  const fs::path bad = s.file("bad.txt", "Hi\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n");
  r = run("parse-output --family v41 --text-file " + bad.string());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "{\"content\": \"Hi\", \"reasoning_content\": \"\", \"tool_calls\": []}\n");
}

TEST(ChatFamilyDetect, Rule) {
  Scratch s;
  auto detect = [&](const std::string& sub) { return detect_family((s.dir / sub).string()); };
  s.file("a/config.json", R"({"model_type": "deepseek_v41"})");
  EXPECT_EQ(detect("a"), ChatFamily::V41);
  s.file("b/config.json", R"({"model_type": "deepseek_v4", "dspark_block_size": 5})");
  EXPECT_EQ(detect("b"), ChatFamily::V4_0731);
  s.file("c/config.json", R"({"model_type": "deepseek_v4", "dspark_block_size": 5})");
  s.file("c/encoding/encoding_dsv4.py", "REASONING_EFFORT_MAX = (\n");  // the preview "-DSpark" variant
  EXPECT_EQ(detect("c"), ChatFamily::V4);
  s.file("d/config.json", R"({"model_type": "deepseek_v4"})");
  s.file("d/encoding/encoding_dsv4.py", "REASONING_EFFORT_PROMPTS: Dict[str, str] = {\n");
  EXPECT_EQ(detect("d"), ChatFamily::V4_0731);
  s.file("e/config.json", R"({"model_type": "deepseek_v4"})");
  s.file("e/tokenizer_config.json", R"({"chat_template": "{% if x %}Reasoning Effort: Beyond maximum{% endif %}"})");
  EXPECT_EQ(detect("e"), ChatFamily::V4_0731);
  s.file("f/config.json", R"({"model_type": "deepseek_v4"})");
  std::string why;
  EXPECT_EQ(detect_family((s.dir / "f").string(), &why), ChatFamily::V4);
  EXPECT_FALSE(why.empty());
  EXPECT_THROW(detect("missing"), std::runtime_error);
  EXPECT_EQ(parse_family("v4.1"), ChatFamily::V41);
  EXPECT_FALSE(parse_family("v5").has_value());
}
