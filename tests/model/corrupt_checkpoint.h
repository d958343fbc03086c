// A copy of a checkpoint directory with raw bytes written over one element of one tensor:
// how the tests make corrupt weights (NaN codes) without touching the shared checkpoint.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace deepinfer::testing {

// Copies every file of `from` (a single model.safetensors checkpoint) into `to` and writes
// `code` at element `flat` of tensor `name`. Throws when the tensor is not there.
inline void write_corrupt_copy(const std::filesystem::path& from, const std::filesystem::path& to, const std::string& name,
                               int64_t flat, const std::string& code) {
  namespace fs = std::filesystem;
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), to / e.path().filename());
  const fs::path shard = to / "model.safetensors";
  std::string blob;
  {
    std::ifstream in(shard, std::ios::binary);
    blob.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(blob.at(size_t(i)));
  const auto header = nlohmann::json::parse(blob.substr(8, n));
  if (!header.contains(name)) throw std::runtime_error("no tensor " + name);
  const size_t at = 8 + n + header[name]["data_offsets"][0].get<size_t>() + size_t(flat) * code.size();
  blob.replace(at, code.size(), code);
  fs::permissions(shard, fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << blob;
}

}  // namespace deepinfer::testing
