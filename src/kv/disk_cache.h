// Prefix-cache snapshots on disk, so a restarted server still hits (serve --kv-cache-dir).
//
// One file per snapshot, named by the model fingerprint and a hash of its tokens:
//   magic "DIKVSNAP", u32 format version, u32 0, u64 fingerprint, u64 n_tokens,
//   u64 payload bytes, n_tokens x i32 tokens, the payload (the runner's bytes of the state),
//   u64 FNV-1a checksum of everything before it.
// The fingerprint covers the checkpoint (config and tensor index), the numerics and kernels
// and the KV page layout: a file made under anything else is ignored with one log line. Files
// are written to a temporary name, fsynced and renamed, so a crash or kill -9 mid-write
// leaves nothing that will be loaded; temporaries left behind are deleted at start.
//
// Every failure (a full disk, a read-only directory, a file deleted or corrupted while in
// use) is a log line and a miss, never a failed request. Writes happen on a background
// thread; the total size is kept within max_bytes by deleting the least recently used files.
// Reads for the engine happen on another background thread (read_async): the scheduler
// thread runs every stream's steps, and a file of hundreds of MB read and checksummed there
// would stall them all. Reads do not queue behind writes (a write ends with fsync).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace deepinfer::kv {

class DiskCache {
 public:
  static constexpr uint32_t kFormatVersion = 2;  // 2: pending groups indexed by position
  using Payload = std::shared_ptr<const std::vector<char>>;

  // Creates `dir` if needed and indexes the files that match `fingerprint`. An unusable
  // directory is logged and leaves a cache that never hits and never writes.
  DiskCache(std::string dir, int64_t max_bytes, uint64_t fingerprint);
  ~DiskCache();  // finishes the queued writes; queued reads become misses
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  bool usable() const { return usable_; }
  const std::string& dir() const { return dir_; }

  // The longest cached prefix of `tokens` that is shorter than tokens and longer than
  // min_len: its length, or 0.
  int64_t longest_prefix(const std::vector<int32_t>& tokens, int64_t min_len) const;
  bool contains(const int32_t* tokens, int64_t n) const;
  // The payload saved for tokens[0..n), checked against the header and the checksum; null
  // (logged, the entry forgotten) if the file is gone, unreadable or corrupt.
  Payload read(const std::vector<int32_t>& tokens, int64_t n);
  // read(tokens, tokens.size()) on the reader thread; the future gives its answer (null for
  // a miss). Never waits for the disk.
  std::future<Payload> read_async(std::vector<int32_t> tokens);
  // Test hook: while held, queued reads wait on the reader thread (a test can then step the
  // engine with a load in flight, and count that nothing read the file meanwhile).
  void hold_reads(bool hold);
  // Queues a snapshot for writing (dropped with a log line if too much is already queued).
  void put(std::vector<int32_t> tokens, std::vector<char> payload);
  // Waits until every queued write is done (tests, shutdown).
  void flush();

  struct Stats {
    uint64_t reads = 0, read_bytes = 0, read_errors = 0;
    uint64_t background_reads = 0;  // of the reads (good or not), those made on the reader thread
    uint64_t writes = 0, write_bytes = 0, write_errors = 0, writes_dropped = 0;
    int64_t entries = 0, bytes_on_disk = 0;
  };
  Stats stats() const;

  // FNV-1a 64 over bytes (the checksum and the token hashes).
  static uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

 private:
  struct Entry {
    std::string path;
    int64_t n_tokens = 0;
    int64_t bytes = 0;
    uint64_t last_use = 0;
  };
  struct Pending {
    std::vector<int32_t> tokens;
    std::vector<char> payload;
  };
  struct PendingRead {
    std::vector<int32_t> tokens;
    std::promise<Payload> result;
  };

  void scan();
  void writer_loop();
  void reader_loop();
  void write_one(const Pending& p);
  void evict_locked();
  void forget_locked(uint64_t key);
  std::string path_for(uint64_t key) const;

  std::string dir_;
  int64_t max_bytes_;
  uint64_t fingerprint_;
  bool usable_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::unordered_map<uint64_t, Entry> entries_;  // key: hash of the tokens
  std::map<int64_t, int64_t> lengths_;           // n_tokens -> entries of that length
  uint64_t clock_ = 0;
  std::deque<Pending> queue_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  std::condition_variable read_cv_;
  std::deque<PendingRead> reads_;
  bool reads_held_ = false;
  Stats stats_;
  std::thread writer_, reader_;
};

}  // namespace deepinfer::kv
