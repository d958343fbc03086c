#include "engine/checkpoint_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "kv/disk_cache.h"

namespace deepinfer::engine {

namespace {

// Safetensors caps its JSON header at 100 MB; a longer length field is garbage, hashed as is.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

// Up to n bytes at offset (fewer at the end of the file or on an error).
std::vector<char> read_some(int fd, uint64_t offset, uint64_t n, int64_t* bytes_read) {
  std::vector<char> buf(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, buf.data() + got, n - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  buf.resize(got);
  *bytes_read += int64_t(got);
  return buf;
}

uint64_t hash_value(uint64_t v, uint64_t h) { return kv::DiskCache::fnv1a(&v, sizeof v, h); }

// One shard: name, size, mtime, header, data sample. An unreadable shard hashes what it could
// read (the model load then fails on it anyway).
uint64_t hash_shard(const std::filesystem::path& path, uint64_t h, int64_t* bytes_read) {
  const std::string name = path.filename().string();
  h = kv::DiskCache::fnv1a(name.data(), name.size(), h);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return hash_value(uint64_t(errno), h);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return hash_value(uint64_t(errno), h);
  }
  const uint64_t size = uint64_t(st.st_size);
  h = hash_value(size, h);
  h = hash_value(uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec), h);
  const std::vector<char> len = read_some(fd, 0, 8, bytes_read);
  uint64_t header_bytes = 0;
  if (len.size() == 8) std::memcpy(&header_bytes, len.data(), 8);
  header_bytes = std::min(header_bytes, kMaxHeaderBytes);
  const std::vector<char> header = read_some(fd, 8, header_bytes, bytes_read);
  h = kv::DiskCache::fnv1a(header.data(), header.size(), h);
  // The data: all of it when small, else blocks at offsets spread from its start to its end.
  const uint64_t data_begin = std::min(size, 8 + header_bytes);
  const uint64_t data_bytes = size - data_begin;
  const uint64_t B = uint64_t(kSampleBlockBytes), K = uint64_t(kSampleBlocks);
  if (data_bytes <= B * K) {
    const std::vector<char> all = read_some(fd, data_begin, data_bytes, bytes_read);
    h = kv::DiskCache::fnv1a(all.data(), all.size(), h);
  } else {
    for (uint64_t i = 0; i < K; ++i) {
      const uint64_t at = data_begin + (data_bytes - B) / (K - 1) * i;
      const std::vector<char> block = read_some(fd, at, B, bytes_read);
      h = kv::DiskCache::fnv1a(block.data(), block.size(), h);
    }
  }
  close(fd);
  return h;
}

}  // namespace

uint64_t checkpoint_fingerprint(const std::string& dir, const std::string& settings, int64_t* bytes_read) {
  int64_t read_total = 0;
  uint64_t h = kv::DiskCache::fnv1a(settings.data(), settings.size());
  {
    std::ifstream f(dir + "/config.json", std::ios::binary);
    std::string config(size_t(1) << 24, '\0');
    f.read(config.data(), std::streamsize(config.size()));
    config.resize(size_t(f.gcount()));
    h = kv::DiskCache::fnv1a(config.data(), config.size(), h);
  }
  std::vector<std::filesystem::path> shards;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path());
  std::sort(shards.begin(), shards.end());
  for (const auto& s : shards) h = hash_shard(s, h, &read_total);
  if (bytes_read) *bytes_read = read_total;
  return h;
}

}  // namespace deepinfer::engine
