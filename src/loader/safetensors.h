// Safetensors shards and checkpoint directories, mapped read-only.
// A checkpoint directory is either one `model.safetensors` or shards listed by
// `model.safetensors.index.json` (or, failing both, every *.safetensors file in the folder).
// Parsing validates every header against the file before any tensor is handed out: a
// truncated shard, offsets that lie or overlap, an unknown dtype all throw LoadError naming
// the file and the tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace deepinfer {

struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType { BF16, F16, F32, F64, F8_E4M3, F8_E8M0, I8, U8, I16, I32, I64, BOOL };

const char* dtype_name(DType t);
size_t dtype_size(DType t);

// A typed, shaped view into a mapped shard. Never owns memory.
struct TensorView {
  std::string name;
  std::string file;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  std::string shape_str() const;
};

// Parses and validates a whole safetensors image held in memory (header and every tensor's
// range); `name` is used in error messages. Views point into `data`.
std::map<std::string, TensorView> parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// One mapped .safetensors file with its parsed header.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws LoadError
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return file_.path(); }
  const MappedFile& mapped() const { return file_; }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
};

// Throws LoadError naming the tensor, its file and its first element whose code is NaN or
// Inf (e4m3 0x7f / 0xff, ue8m0 0xff, bf16 / f16 / f32 / f64 exponent all ones). Integer
// tensors (FP4 codes are packed in I8 / U8) have no such codes.
void verify_finite(const TensorView& t);

// Owned anonymous memory (mmap) holding one safetensors image built in memory (deepinfer
// bench --synthetic); move-only, freed with the object. The pages are asked for as transparent
// huge pages, as the mapped shards are (core/mapped_file.cpp).
class MemoryImage {
 public:
  MemoryImage() = default;
  // Zero-filled; throws LoadError naming `name` and the bytes when the memory cannot be had.
  MemoryImage(size_t bytes, std::string name);
  ~MemoryImage();
  MemoryImage(const MemoryImage&) = delete;
  MemoryImage& operator=(const MemoryImage&) = delete;
  MemoryImage(MemoryImage&& o) noexcept;
  MemoryImage& operator=(MemoryImage&& o) noexcept;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
};

// Every tensor of a checkpoint directory, by name.
class TensorStore {
 public:
  explicit TensorStore(const std::string& dir);  // throws LoadError
  // The same over safetensors images held in memory (each parsed and validated as a shard
  // is; a tensor's `file` is its image's name). The store owns them.
  explicit TensorStore(std::vector<MemoryImage> images);  // throws LoadError
  // The in-memory images (empty for a directory's store).
  const std::vector<MemoryImage>& images() const { return images_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& all() const { return tensors_; }
  // Tensors for which skip(name) is true (another rank's experts) are never read: left out of
  // the sums, the scan and the populate below. An empty skip keeps every tensor.
  using Skip = std::function<bool(const std::string& name)>;
  size_t total_bytes(const Skip& skip = {}) const;
  // verify_finite over every tensor (reads all of the data once).
  void verify_finite(const Skip& skip = {}) const;
  // Brings every shard into memory and into the page table (MappedFile::populate), in
  // steps; progress(bytes done, bytes in all) after each. With skip: only the kept tensors'
  // byte ranges (merged where adjacent), so the skipped ones' pages are never touched.
  // In-memory images are resident already: nothing is done for them.
  void populate(const std::function<void(size_t, size_t)>& progress, const Skip& skip = {}) const;
  // The same for bytes [data, data + n) of one of the shards (a part of a tensor).
  void populate_bytes(const uint8_t* data, size_t n) const;
  // Keeps the kept tensors' pages in memory (mlock), so that streaming other data through the
  // page cache cannot evict them. Returns the bytes locked; on a refusal (RLIMIT_MEMLOCK,
  // no privilege) unlocks what it had and sets *error.
  size_t lock(const Skip& skip, std::string* error) const;
  // The mapped shards' paths (empty for in-memory images).
  std::vector<std::string> shard_paths() const;
  // Where bytes [data, data + n) lie: the index of their shard in shard_paths() and their byte
  // offset in it. False for in-memory images and for bytes outside every shard.
  bool locate(const uint8_t* data, size_t n, size_t* shard, uint64_t* offset) const;

 private:
  void add(const std::map<std::string, TensorView>& tensors, const std::string& source);
  // Per shard, the merged byte ranges [begin, end) of the tensors skip keeps (the whole file
  // without skip).
  std::vector<std::vector<std::pair<size_t, size_t>>> kept_ranges(const Skip& skip) const;

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<MemoryImage> images_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace deepinfer
