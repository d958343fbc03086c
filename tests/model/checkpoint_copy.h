// Test helper: a checkpoint copied with its routed experts' tensors at the end of its one
// shard, so that truncating the file cuts experts only (a cut dense page would be a SIGBUS on
// the mapping, not a read error). Used by the expert-streaming tests of the model and engine.
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/safetensors.h"

namespace deepinfer::testing {

// Returns the byte offset where the experts begin.
inline int64_t copy_with_experts_last(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(to);
  std::filesystem::copy_file(from + "/config.json", to + "/config.json", std::filesystem::copy_options::overwrite_existing);
  const TensorStore store(from);
  std::vector<const TensorView*> order;
  for (const auto& [name, t] : store.all()) order.push_back(&t);
  auto routed = [](const TensorView* t) { return t->name.find(".ffn.experts.") != std::string::npos; };
  std::stable_partition(order.begin(), order.end(), [&](const TensorView* t) { return !routed(t); });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  int64_t off = 0, experts_at = -1;
  for (const TensorView* t : order) {
    if (experts_at < 0 && routed(t)) experts_at = off;
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {off, off + int64_t(t->nbytes)}}};
    off += int64_t(t->nbytes);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream f(to + "/model.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), std::streamsize(h.size()));
  for (const TensorView* t : order) f.write(reinterpret_cast<const char*>(t->data), std::streamsize(t->nbytes));
  return int64_t(8 + h.size()) + experts_at;
}

// A copy of checkpoint `from` in `dir` (experts last, see above) whose shard can be cut just
// past its dense weights and made whole again.
struct TruncatableCheckpoint {
  std::string dir, shard;
  int64_t experts_at = 0;
  std::string bytes;  // the whole shard

  TruncatableCheckpoint(const std::string& from, const std::string& to) : dir(to), shard(to + "/model.safetensors") {
    std::filesystem::remove_all(dir);
    experts_at = copy_with_experts_last(from, dir);
    std::ifstream f(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ~TruncatableCheckpoint() { std::filesystem::remove_all(dir); }
  // Every routed expert cut off.
  void truncate() const { std::filesystem::resize_file(shard, uintmax_t(experts_at + 100)); }
  void restore() const {
    std::ofstream f(shard, std::ios::binary | std::ios::in | std::ios::out);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
};

}  // namespace deepinfer::testing
