// Malformed checkpoints give one clear error naming the file and tensor, never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
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

// verify_finite: every float dtype's NaN / Inf codes are named with the tensor, file and
// element; finite extremes (e4m3 448 = 0x7e, ue8m0 2^127 = 0xfe, the largest bf16) and
// integer tensors pass.
namespace {

TensorView view_of(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::string& bytes) {
  TensorView t;
  t.name = name;
  t.file = "mem.safetensors";
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const uint8_t*>(bytes.data());
  t.nbytes = bytes.size();
  return t;
}

std::string verify_error(const TensorView& t) {
  try {
    verify_finite(t);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

template <class U>
std::string le_bytes(std::vector<U> v) {
  std::string s(v.size() * sizeof(U), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

}  // namespace

TEST(Safetensors, VerifyFiniteNamesTheFirstBadElement) {
  struct Case {
    DType dtype;
    std::string bytes;
    std::vector<int64_t> shape;
    std::string expect;  // "" = finite
  } cases[] = {
      {DType::F8_E4M3, std::string("\x7e\xfe\x00\x80\x01\x7f", 6), {2, 3}, "NaN at element [1, 2] (code 0x7f)"},
      {DType::F8_E4M3, std::string("\x00\xff\x7f\x00", 4), {4}, "NaN at element [1] (code 0xff)"},
      {DType::F8_E4M3, std::string("\x7e\xfe\x78\xf8", 4), {2, 2}, ""},
      {DType::F8_E8M0, std::string("\x7f\xfe\x00\xff", 4), {2, 2}, "NaN at element [1, 1] (code 0xff)"},
      {DType::F8_E8M0, std::string("\x7f\xfe\x00\x80", 4), {2, 2}, ""},
      {DType::BF16, le_bytes<uint16_t>({0x3f80, 0x7f7f, 0xff80, 0x7fc0}), {2, 2}, "Inf at element [1, 0] (code 0xff80)"},
      {DType::BF16, le_bytes<uint16_t>({0x3f80, 0x7f81}), {1, 2}, "NaN at element [0, 1] (code 0x7f81)"},
      {DType::BF16, le_bytes<uint16_t>({0x3f80, 0x7f7f, 0xff7f, 0x0001}), {4}, ""},
      {DType::F16, le_bytes<uint16_t>({0x3c00, 0x7bff, 0x7c00}), {3}, "Inf at element [2] (code 0x7c00)"},
      {DType::F32, le_bytes<uint32_t>({0x3f800000u, 0x7f7fffffu, 0x7fc00000u}), {1, 1, 3}, "NaN at element [0, 0, 2]"},
      {DType::F32, le_bytes<uint32_t>({0x3f800000u, 0xff7fffffu}), {2}, ""},
      {DType::F64, le_bytes<uint64_t>({0x3ff0000000000000ull, 0xfff0000000000000ull}), {2}, "Inf at element [1]"},
      // FP4 codes (packed in I8) and ids have no NaN: every byte is a value.
      {DType::I8, std::string("\xff\x7f\x77", 3), {3}, ""},
      {DType::I32, le_bytes<uint32_t>({0x7fc00000u, 0xffffffffu}), {2}, ""},
  };
  for (const auto& c : cases) {
    const TensorView t = view_of("layers.3.ffn.w", c.dtype, c.shape, c.bytes);
    const std::string err = verify_error(t);
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " expecting '" + c.expect + "'");
    if (c.expect.empty()) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err.find(c.expect), std::string::npos) << err;
      EXPECT_NE(err.find("mem.safetensors: tensor 'layers.3.ffn.w'"), std::string::npos) << err;
      EXPECT_NE(err.find(dtype_name(c.dtype)), std::string::npos) << err;
    }
  }
}

// The shared checkpoint is clean; one e4m3 code patched to NaN in a copy is found through
// TensorStore::verify_finite.
TEST(Safetensors, VerifyFiniteFindsAPatchedCodeInACheckpoint) {
  const std::string src = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model/model.safetensors";
  TensorStore clean(fs::path(src).parent_path().string());
  EXPECT_NO_THROW(clean.verify_finite());

  TempDir d;
  std::string blob = read_all(src);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(blob[size_t(i)]);
  const auto header = nlohmann::json::parse(blob.substr(8, n));
  const auto& info = header.at("layers.1.attn.wq_a.weight");  // e4m3 [128, 256]
  const size_t at = 8 + n + info["data_offsets"][0].get<size_t>() + 7 * 256 + 9;
  blob[at] = char(0xff);
  std::ofstream(d.path / "model.safetensors", std::ios::binary) << blob;
  TensorStore bad(d.path.string());
  std::string err;
  try {
    bad.verify_finite();
  } catch (const LoadError& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("tensor 'layers.1.attn.wq_a.weight' (F8_E4M3 [128, 256]) holds NaN at element [7, 9] (code 0xff)"),
            std::string::npos)
      << err;
}
