// Read-only memory map of a whole file. Checkpoint shards are mapped, never copied:
// a real checkpoint is 150-800 GB and the kernels decode weights straight from the map.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace deepinfer {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws std::runtime_error naming the file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads bytes [offset, offset + n) in and maps them into this process's page table now,
  // so the first forward passes take no page faults on weights (MADV_POPULATE_READ, or a
  // read per page where the kernel lacks it). Returns false if nothing could be done.
  bool populate(size_t offset, size_t n) const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace deepinfer
