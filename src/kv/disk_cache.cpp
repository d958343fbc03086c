#include "kv/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/log.h"

namespace deepinfer::kv {

namespace {

constexpr char kMagic[8] = {'D', 'I', 'K', 'V', 'S', 'N', 'A', 'P'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;
constexpr int64_t kMaxQueuedBytes = int64_t(512) << 20;  // writes waiting beyond this are dropped
constexpr const char* kSuffix = ".dikv";

struct Header {
  uint32_t version = 0;
  uint64_t fingerprint = 0, n_tokens = 0, payload_bytes = 0;
};

void put_u32(std::vector<char>& b, uint32_t v) { b.insert(b.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 4); }
void put_u64(std::vector<char>& b, uint64_t v) { b.insert(b.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 8); }

bool parse_header(const char* p, Header* h) {
  if (std::memcmp(p, kMagic, 8) != 0) return false;
  std::memcpy(&h->version, p + 8, 4);
  std::memcpy(&h->fingerprint, p + 16, 8);
  std::memcpy(&h->n_tokens, p + 24, 8);
  std::memcpy(&h->payload_bytes, p + 32, 8);
  return true;
}

// Reads exactly n bytes at offset; false on a short read or an error.
bool read_at(int fd, void* dst, size_t n, off_t offset) {
  char* d = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = pread(fd, d, n, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    d += r;
    n -= size_t(r);
    offset += r;
  }
  return true;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

uint64_t token_key(const int32_t* tokens, int64_t n) { return DiskCache::fnv1a(tokens, size_t(n) * sizeof(int32_t)); }

}  // namespace

uint64_t DiskCache::fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

DiskCache::DiskCache(std::string dir, int64_t max_bytes, uint64_t fingerprint)
    : dir_(std::move(dir)), max_bytes_(max_bytes), fingerprint_(fingerprint) {
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    log_warn("kv disk cache: cannot create %s (%s); the disk cache is off", dir_.c_str(), std::strerror(errno));
    return;
  }
  // mkdir's EEXIST also means a file of that name: root's access() passes an executable one.
  struct stat st {};
  if (stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    log_warn("kv disk cache: %s is not a directory; the disk cache is off", dir_.c_str());
    return;
  }
  if (access(dir_.c_str(), R_OK | W_OK | X_OK) != 0) {
    log_warn("kv disk cache: %s is not writable (%s); the disk cache is off", dir_.c_str(), std::strerror(errno));
    return;
  }
  usable_ = true;
  scan();
  {
    std::lock_guard<std::mutex> lock(mu_);
    evict_locked();
  }
  writer_ = std::thread([this] { writer_loop(); });
  reader_ = std::thread([this] { reader_loop(); });
}

DiskCache::~DiskCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  read_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

std::string DiskCache::path_for(uint64_t key) const {
  char name[64];
  std::snprintf(name, sizeof name, "/%016" PRIx64 "-%016" PRIx64 "%s", fingerprint_, key, kSuffix);
  return dir_ + name;
}

// Indexes the files of this fingerprint; deletes temporaries of interrupted writes; logs
// (once per kind) and skips everything else.
void DiskCache::scan() {
  DIR* d = opendir(dir_.c_str());
  if (!d) return;
  int64_t foreign = 0, bad = 0, temporaries = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir_ + "/" + name;
    if (name.rfind(".tmp-", 0) == 0) {
      ++temporaries;
      unlink(path.c_str());
      continue;
    }
    if (name.size() <= std::strlen(kSuffix) || name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) != 0)
      continue;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char head[kHeaderBytes];
    Header h;
    struct stat st {};
    bool ok = read_at(fd, head, kHeaderBytes, 0) && parse_header(head, &h) && fstat(fd, &st) == 0;
    if (ok && (h.version != kFormatVersion || h.fingerprint != fingerprint_)) {
      ++foreign;
      close(fd);
      continue;
    }
    ok = ok && h.n_tokens > 0 && h.n_tokens < (uint64_t(1) << 32) &&
         uint64_t(st.st_size) == kHeaderBytes + h.n_tokens * 4 + h.payload_bytes + 8;
    std::vector<int32_t> tokens;
    if (ok) {
      tokens.resize(h.n_tokens);
      ok = read_at(fd, tokens.data(), tokens.size() * 4, kHeaderBytes);
    }
    close(fd);
    if (!ok) {
      ++bad;
      continue;
    }
    const uint64_t key = token_key(tokens.data(), int64_t(tokens.size()));
    if (path != path_for(key)) {  // renamed by hand: the name no longer says what it holds
      ++bad;
      continue;
    }
    Entry& en = entries_[key];
    en.path = path;
    en.n_tokens = int64_t(tokens.size());
    en.bytes = int64_t(st.st_size);
    en.last_use = uint64_t(st.st_mtime);  // older files are evicted first
    ++lengths_[en.n_tokens];
    stats_.bytes_on_disk += en.bytes;
  }
  closedir(d);
  // Continue the LRU clock after the newest file time, so later uses rank above old files.
  for (const auto& [k, en] : entries_) clock_ = std::max(clock_, en.last_use);
  stats_.entries = int64_t(entries_.size());
  if (foreign) log_info("kv disk cache: ignoring %" PRId64 " file(s) in %s made for another model, numerics or layout", foreign, dir_.c_str());
  if (bad) log_warn("kv disk cache: ignoring %" PRId64 " unreadable or malformed file(s) in %s", bad, dir_.c_str());
  if (temporaries) log_info("kv disk cache: removed %" PRId64 " unfinished write(s) in %s", temporaries, dir_.c_str());
  log_info("kv disk cache: %s: %" PRId64 " snapshot(s), %.1f MiB (limit %.1f MiB)", dir_.c_str(), stats_.entries,
           double(stats_.bytes_on_disk) / (1 << 20), double(max_bytes_) / (1 << 20));
}

int64_t DiskCache::longest_prefix(const std::vector<int32_t>& tokens, int64_t min_len) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!usable_ || lengths_.empty()) return 0;
  // Hashes of every prefix in one pass; then the cached lengths, longest first.
  const int64_t limit = int64_t(tokens.size()) - 1;
  if (limit <= min_len) return 0;
  std::vector<uint64_t> prefix(size_t(limit) + 1);
  uint64_t h = fnv1a(nullptr, 0);
  prefix[0] = h;
  for (int64_t i = 0; i < limit; ++i) prefix[size_t(i) + 1] = h = fnv1a(&tokens[size_t(i)], sizeof(int32_t), h);
  for (auto it = lengths_.rbegin(); it != lengths_.rend(); ++it) {
    const int64_t n = it->first;
    if (n > limit) continue;
    if (n <= min_len) break;
    if (entries_.count(prefix[size_t(n)])) return n;
  }
  return 0;
}

bool DiskCache::contains(const int32_t* tokens, int64_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(token_key(tokens, n)) > 0;
}

void DiskCache::forget_locked(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (--lengths_[it->second.n_tokens] == 0) lengths_.erase(it->second.n_tokens);
  stats_.bytes_on_disk -= it->second.bytes;
  entries_.erase(it);
  stats_.entries = int64_t(entries_.size());
}

DiskCache::Payload DiskCache::read(const std::vector<int32_t>& tokens, int64_t n) {
  const uint64_t key = token_key(tokens.data(), n);
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (!usable_ || it == entries_.end()) return nullptr;
    path = it->second.path;
  }
  auto fail = [&](const char* why) -> Payload {
    log_warn("kv disk cache: %s: %s; treated as a miss and forgotten", path.c_str(), why);
    std::lock_guard<std::mutex> lock(mu_);
    forget_locked(key);
    ++stats_.read_errors;
    return nullptr;
  };
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(std::strerror(errno));
  // Header, tokens, payload and checksum each straight into their own buffer: the payload is
  // not copied again after the read.
  struct stat st {};
  char head[kHeaderBytes];
  Header h;
  const bool header_ok = fstat(fd, &st) == 0 && read_at(fd, head, kHeaderBytes, 0) && parse_header(head, &h) &&
                         h.version == kFormatVersion && h.fingerprint == fingerprint_ && h.n_tokens == uint64_t(n) &&
                         uint64_t(st.st_size) == kHeaderBytes + h.n_tokens * 4 + h.payload_bytes + 8;
  if (!header_ok) {
    close(fd);
    return fail("its header does not match");
  }
  std::vector<int32_t> file_tokens(size_t(n), 0);
  auto payload = std::make_shared<std::vector<char>>(size_t(h.payload_bytes));
  uint64_t sum = 0;
  const off_t payload_at = off_t(kHeaderBytes + size_t(n) * 4);
  const bool got = read_at(fd, file_tokens.data(), size_t(n) * 4, off_t(kHeaderBytes)) &&
                   read_at(fd, payload->data(), payload->size(), payload_at) &&
                   read_at(fd, &sum, 8, payload_at + off_t(payload->size()));
  close(fd);
  if (!got) return fail("cannot read it");
  uint64_t h_sum = fnv1a(head, kHeaderBytes);
  h_sum = fnv1a(file_tokens.data(), size_t(n) * 4, h_sum);
  h_sum = fnv1a(payload->data(), payload->size(), h_sum);
  if (h_sum != sum) return fail("checksum mismatch");
  if (file_tokens != std::vector<int32_t>(tokens.begin(), tokens.begin() + n)) return fail("its tokens differ");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) it->second.last_use = ++clock_;
    ++stats_.reads;
    stats_.read_bytes += uint64_t(st.st_size);
  }
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // LRU order survives a restart
  return payload;
}

std::future<DiskCache::Payload> DiskCache::read_async(std::vector<int32_t> tokens) {
  PendingRead r{std::move(tokens), {}};
  std::future<Payload> result = r.result.get_future();
  std::lock_guard<std::mutex> lock(mu_);
  if (!usable_ || stop_) {
    r.result.set_value(nullptr);
    return result;
  }
  reads_.push_back(std::move(r));
  read_cv_.notify_all();
  return result;
}

void DiskCache::hold_reads(bool hold) {
  std::lock_guard<std::mutex> lock(mu_);
  reads_held_ = hold;
  read_cv_.notify_all();
}

void DiskCache::reader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    read_cv_.wait(lock, [this] { return stop_ || (!reads_.empty() && !reads_held_); });
    if (stop_) break;
    PendingRead r = std::move(reads_.front());
    reads_.pop_front();
    ++stats_.background_reads;
    lock.unlock();
    Payload payload;
    try {
      payload = read(r.tokens, int64_t(r.tokens.size()));
    } catch (const std::exception& e) {  // no memory for a huge file: a miss like any other
      log_warn("kv disk cache: a read failed (%s); treated as a miss", e.what());
    }
    r.result.set_value(std::move(payload));
    lock.lock();
  }
  // Shutting down: nobody will wait for these.
  for (PendingRead& r : reads_) r.result.set_value(nullptr);
  reads_.clear();
}

void DiskCache::put(std::vector<int32_t> tokens, std::vector<char> payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!usable_ || stop_) return;
  const int64_t bytes = int64_t(payload.size() + tokens.size() * 4);
  if (queued_bytes_ + bytes > kMaxQueuedBytes) {
    ++stats_.writes_dropped;
    log_warn("kv disk cache: %" PRId64 " MiB of writes already queued; a snapshot of %zu tokens is not saved",
             queued_bytes_ >> 20, tokens.size());
    return;
  }
  queued_bytes_ += bytes;
  queue_.push_back(Pending{std::move(tokens), std::move(payload)});
  cv_.notify_all();
}

void DiskCache::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

DiskCache::Stats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DiskCache::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping with nothing left
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write_one(p);
    lock.lock();
    queued_bytes_ -= int64_t(p.payload.size() + p.tokens.size() * 4);
    writing_ = false;
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

// Temporary file, fsync, rename, fsync of the directory: a file under its final name is
// always complete.
void DiskCache::write_one(const Pending& p) {
  const int64_t n = int64_t(p.tokens.size());
  const uint64_t key = token_key(p.tokens.data(), n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.count(key)) return;
  }
  std::vector<char> head;
  head.insert(head.end(), kMagic, kMagic + 8);
  put_u32(head, kFormatVersion);
  put_u32(head, 0);
  put_u64(head, fingerprint_);
  put_u64(head, uint64_t(n));
  put_u64(head, uint64_t(p.payload.size()));
  uint64_t sum = fnv1a(head.data(), head.size());
  sum = fnv1a(p.tokens.data(), size_t(n) * 4, sum);
  sum = fnv1a(p.payload.data(), p.payload.size(), sum);
  const std::string final_path = path_for(key);
  char tmp_name[64];
  std::snprintf(tmp_name, sizeof tmp_name, "/.tmp-%016" PRIx64 "-%d", key, int(getpid()));
  const std::string tmp = dir_ + tmp_name;
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  ok = ok && write_all(fd, head.data(), head.size()) &&
       write_all(fd, reinterpret_cast<const char*>(p.tokens.data()), size_t(n) * 4) &&
       write_all(fd, p.payload.data(), p.payload.size()) &&
       write_all(fd, reinterpret_cast<const char*>(&sum), 8) && fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  ok = ok && rename(tmp.c_str(), final_path.c_str()) == 0;
  if (!ok) {
    unlink(tmp.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.write_errors++ % 100 == 0)  // a full disk would say so for every snapshot
      log_warn("kv disk cache: cannot save a snapshot of %" PRId64 " tokens in %s (%s); it stays in memory only", n,
               dir_.c_str(), std::strerror(err ? err : errno));
    return;
  }
  if (const int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& en = entries_[key];
  en.path = final_path;
  en.n_tokens = n;
  en.bytes = int64_t(head.size() + size_t(n) * 4 + p.payload.size() + 8);
  en.last_use = ++clock_;
  ++lengths_[n];
  stats_.bytes_on_disk += en.bytes;
  stats_.entries = int64_t(entries_.size());
  ++stats_.writes;
  stats_.write_bytes += uint64_t(en.bytes);
  evict_locked();
}

void DiskCache::evict_locked() {
  while (stats_.bytes_on_disk > max_bytes_ && !entries_.empty()) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    unlink(oldest->second.path.c_str());
    forget_locked(oldest->first);
  }
}

}  // namespace deepinfer::kv
