// Malformed checkpoints give one clear error naming the file and tensor, never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loader/safetensors.h"

using namespace deepinfer;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("di_loader_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// Writes a safetensors file from a header object and a data blob.
void write_st(const fs::path& p, const nlohmann::json& header, const std::string& data) {
  std::string h = header.dump();
  std::ofstream out(p, std::ios::binary);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << h << data;
}

std::string load_error(const std::string& dir) {
  try {
    TensorStore s(dir);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, ReadsTheSharedCheckpoint) {
  TensorStore s(std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model");
  const TensorView* t = s.find("layers.1.attn.wq_a.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F8_E4M3);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(s.find("layers.1.attn.wq_a.scale")->dtype, DType::F8_E8M0);
}

TEST(Safetensors, RejectsTruncatedShard) {
  TempDir d;
  std::string blob = read_all(std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model/model.safetensors");
  std::ofstream(d.path / "model.safetensors", std::ios::binary) << blob.substr(0, blob.size() - 1000);
  std::string err = load_error(d.path.string());
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

TEST(Safetensors, RejectsLyingHeaders) {
  struct Case {
    nlohmann::json header;
    std::string data, expect;
  } cases[] = {
      {{{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}}, std::string(4, '\0'), "outside"},
      {{{"a", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0'), "does not match"},
      {{{"a", {{"dtype", "Q9_WEIRD"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0'), "unknown dtype"},
      {{{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
        {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}},
       std::string(12, '\0'), "overlap"},
      {{{"a", {{"dtype", "F32"}, {"shape", {-2}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0'), "bad dimension"},
      {{{"a", {{"dtype", "F32"}, {"shape", {2}}}}}, std::string(8, '\0'), "lacks"},
  };
  for (const auto& c : cases) {
    TempDir d;
    write_st(d.path / "model.safetensors", c.header, c.data);
    std::string err = load_error(d.path.string());
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
  TempDir d;
  std::ofstream(d.path / "model.safetensors", std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{not json}xxxxxx", 24);
  EXPECT_NE(load_error(d.path.string()).find("malformed JSON"), std::string::npos);
}

TEST(Safetensors, ShardedIndexAndMissingShard) {
  TempDir d;
  write_st(d.path / "model-00001-of-00002.safetensors",
           {{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}, std::string(4, '\0'));
  write_st(d.path / "model-00002-of-00002.safetensors",
           {{"b", {{"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {0, 4}}}}}, std::string(4, '\0'));
  nlohmann::json index = {{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(d.path / "model.safetensors.index.json") << index.dump();
  TensorStore s(d.path.string());
  EXPECT_NE(s.find("a"), nullptr);
  EXPECT_NE(s.find("b"), nullptr);
  fs::remove(d.path / "model-00002-of-00002.safetensors");
  EXPECT_NE(load_error(d.path.string()).find("missing"), std::string::npos);
}
