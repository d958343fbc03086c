// The prefix cache's files on disk (kv/disk_cache.h): round trip (also on the reader
// thread), found again after a restart, ignored under another fingerprint, and every failure a
// miss: corrupt, truncated or deleted files, leftovers of an interrupted write, an unusable,
// vanished or read-only directory, a disk that fills up mid-write.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "kv/disk_cache.h"

using deepinfer::kv::DiskCache;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("di-disk-cache-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    if (fs::exists(path))
      for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path());
    return out;
  }
};

std::vector<int32_t> toks(int n, int salt = 0) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(i * 31 + salt);
  return v;
}

std::vector<char> bytes(size_t n, char seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(seed + char(i * 7));
  return v;
}

}  // namespace

TEST(DiskCache, RoundTripAndLongestPrefix) {
  TempDir d;
  DiskCache c(d.path.string(), 1 << 20, 42);
  ASSERT_TRUE(c.usable());
  const std::vector<int32_t> prompt = toks(100);
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 32), bytes(1000, 1));
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64), bytes(2000, 2));
  c.put(toks(64, 5), bytes(10, 3));  // another prompt
  c.flush();
  EXPECT_EQ(c.stats().writes, 3u);
  EXPECT_EQ(c.longest_prefix(prompt, 0), 64);
  EXPECT_EQ(c.longest_prefix(prompt, 64), 0);  // nothing longer than the memory hit
  EXPECT_EQ(c.longest_prefix(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64), 0), 32);  // strict prefix
  auto p = c.read(prompt, 64);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, bytes(2000, 2));
  EXPECT_EQ(c.read(prompt, 50), nullptr);  // not cached
  // The same tokens again are not written twice.
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64), bytes(2000, 9));
  c.flush();
  EXPECT_EQ(c.stats().writes, 3u);
  EXPECT_EQ(d.files().size(), 3u);
}

TEST(DiskCache, FoundAfterARestartIgnoredUnderAnotherFingerprint) {
  TempDir d;
  const std::vector<int32_t> prompt = toks(80);
  {
    DiskCache c(d.path.string(), 1 << 20, 7);
    c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40), bytes(500, 4));
  }  // the destructor finishes the write
  {
    DiskCache other(d.path.string(), 1 << 20, 8);  // another model, numerics or layout
    EXPECT_EQ(other.longest_prefix(prompt, 0), 0);
    EXPECT_EQ(other.stats().entries, 0);
  }
  DiskCache again(d.path.string(), 1 << 20, 7);
  EXPECT_EQ(again.longest_prefix(prompt, 0), 40);
  auto p = again.read(prompt, 40);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, bytes(500, 4));
}

TEST(DiskCache, CorruptTruncatedDeletedAndUnfinishedFilesAreMisses) {
  TempDir d;
  const std::vector<int32_t> prompt = toks(90);
  {
    DiskCache c(d.path.string(), 1 << 20, 1);
    for (int n : {10, 20, 30}) c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + n), bytes(size_t(300 + n), char(n)));
  }
  auto files = d.files();
  ASSERT_EQ(files.size(), 3u);
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) { return fs::file_size(a) < fs::file_size(b); });
  // 10 tokens: one payload byte flipped (the checksum catches it at read time).
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char ch = 0;
    f.read(&ch, 1);
    ch = char(ch ^ 0x40);
    f.seekp(100);
    f.write(&ch, 1);
  }
  // 20 tokens: cut short, as a write without the rename protocol would leave it.
  fs::resize_file(files[1], fs::file_size(files[1]) - 17);
  // A temporary of an interrupted write.
  std::ofstream(d.path / ".tmp-0000000000000001-123") << "partial";

  DiskCache c(d.path.string(), 1 << 20, 1);
  EXPECT_FALSE(fs::exists(d.path / ".tmp-0000000000000001-123"));
  EXPECT_EQ(c.stats().entries, 2);  // the truncated one is not indexed
  EXPECT_EQ(c.longest_prefix(prompt, 0), 30);
  // 30 tokens: deleted while the server runs.
  fs::remove(files[2]);
  EXPECT_EQ(c.read(prompt, 30), nullptr);
  EXPECT_EQ(c.longest_prefix(prompt, 0), 10);  // forgotten; the next is the corrupt one
  EXPECT_EQ(c.read(prompt, 10), nullptr);
  EXPECT_EQ(c.longest_prefix(prompt, 0), 0);
  EXPECT_EQ(c.stats().read_errors, 2u);
}

TEST(DiskCache, SizeLimitEvictsTheLeastRecentlyUsed) {
  TempDir d;
  DiskCache c(d.path.string(), 5000, 3);
  const std::vector<int32_t> prompt = toks(200);
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 10), bytes(1500, 1));
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 20), bytes(1500, 2));
  c.flush();
  ASSERT_TRUE(c.read(prompt, 10));  // now the 20-token one is the least recently used
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 30), bytes(1500, 3));
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40), bytes(1500, 4));
  c.flush();
  EXPECT_LE(c.stats().bytes_on_disk, 5000);
  EXPECT_EQ(c.stats().entries, 3);
  EXPECT_EQ(d.files().size(), 3u);
  EXPECT_TRUE(c.contains(prompt.data(), 10));
  EXPECT_FALSE(c.contains(prompt.data(), 20));
  EXPECT_TRUE(c.contains(prompt.data(), 40));
}

TEST(DiskCache, AnUnusableOrVanishedDirectoryIsOnlyAMiss) {
  TempDir d;
  fs::create_directories(d.path);
  std::ofstream(d.path / "plain-file") << "x";
  DiskCache bad((d.path / "plain-file" / "cache").string(), 1 << 20, 1);  // cannot be a directory
  EXPECT_FALSE(bad.usable());
  bad.put(toks(5), bytes(10, 1));
  bad.flush();
  EXPECT_EQ(bad.longest_prefix(toks(9), 0), 0);

  DiskCache c((d.path / "cache").string(), 1 << 20, 1);
  ASSERT_TRUE(c.usable());
  fs::remove_all(d.path / "cache");  // deleted under the running server
  c.put(toks(5), bytes(10, 1));
  c.flush();
  EXPECT_EQ(c.stats().writes, 0u);
  EXPECT_EQ(c.stats().write_errors, 1u);
  EXPECT_EQ(c.longest_prefix(toks(9), 0), 0);
}

// Checks that a cache in `dir` is off from the start and every call a quiet miss.
void expect_cache_off(const std::string& dir) {
  SCOPED_TRACE(dir);
  DiskCache c(dir, 1 << 20, 1);
  EXPECT_FALSE(c.usable());
  c.put(toks(5), bytes(10, 1));
  c.flush();
  EXPECT_EQ(c.longest_prefix(toks(9), 0), 0);
  EXPECT_EQ(c.read(toks(9), 5), nullptr);
  EXPECT_EQ(c.stats().writes + c.stats().write_errors, 0u);
}

// Directories that refuse new files whoever asks (CI runs as root, which writes into a mode
// 0555 directory regardless): /proc/self; an executable regular file where the directory
// should be (root passes access(R|W|X) on it); a path under a regular file; and, in a mount
// namespace of the test's own, a read-only bind mount of the test's directory. A mode 0555
// directory is added when not running as root. The cache is off from the start, says so, and
// every call is a quiet miss.
TEST(DiskCache, ReadOnlyDirectoryTurnsTheCacheOff) {
  TempDir d;
  fs::create_directories(d.path);
  const fs::path file = d.path / "not-a-directory";
  std::ofstream(file) << "x";
  fs::permissions(file, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  fs::create_directories(d.path / "sealed");
  fs::permissions(d.path / "sealed", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                         fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  std::vector<std::string> dirs = {"/proc/self", file.string(), (file / "cache").string()};
  if (geteuid() != 0) dirs.push_back((d.path / "sealed").string());
  for (const std::string& dir : dirs) expect_cache_off(dir);

  // A read-only mount, in a child process that unshares its mount namespace (the mount is
  // never seen outside it). Exit 0: the cache was off in it; 2: it was not; 77: no namespace.
  fs::create_directories(d.path / "ro" / "existing");
  const std::string ro = (d.path / "ro").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount(ro.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      _exit(77);
    bool off = true;
    for (const std::string dir : {ro, ro + "/existing", ro + "/new"}) {
      DiskCache c(dir, 1 << 20, 1);
      c.put(toks(5), bytes(10, 1));
      c.flush();
      off = off && !c.usable() && c.stats().writes + c.stats().write_errors == 0 && c.longest_prefix(toks(9), 0) == 0;
    }
    _exit(off ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77)
    std::printf("note: no mount namespace here (unshare refused); the read-only mount case did not run\n");
  else
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the cache was usable on a read-only mount";
  EXPECT_FALSE(fs::exists(d.path / "ro" / "new"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path / "ro" / "existing"), fs::directory_iterator{}), 0);
  fs::permissions(d.path / "sealed", fs::perms::owner_all);
}

// A disk that fills up mid-write, made with RLIMIT_FSIZE (a write past the limit fails with
// EFBIG, as one on a full disk fails with ENOSPC; SIGXFSZ is ignored so that the write returns
// the error instead of killing the process): the snapshot is not saved, no partial file is
// left or indexed, snapshots already on disk still load, and once there is room again
// writes go on.
TEST(DiskCache, FullDiskLeavesNoPartialFileAndRecovers) {
  TempDir d;
  DiskCache c(d.path.string(), 1 << 24, 1);
  ASSERT_TRUE(c.usable());
  const std::vector<int32_t> prompt = toks(100);
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 10), bytes(1000, 1));
  c.flush();
  ASSERT_EQ(c.stats().writes, 1u);

  struct rlimit before {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit tight = before;
  tight.rlim_cur = 64 << 10;  // the 1 MiB snapshot below stops a sixteenth of the way in
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tight), 0);
  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 50), bytes(1 << 20, 2));
  c.flush();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &before), 0);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(c.stats().writes, 1u);
  EXPECT_EQ(c.stats().write_errors, 1u);
  EXPECT_FALSE(c.contains(prompt.data(), 50));
  EXPECT_EQ(d.files().size(), 1u);  // the earlier snapshot only: no temporary left behind
  EXPECT_EQ(c.longest_prefix(prompt, 0), 10);
  auto p = c.read(prompt, 10);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, bytes(1000, 1));

  c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 50), bytes(1 << 20, 2));
  c.flush();
  EXPECT_EQ(c.stats().writes, 2u);
  EXPECT_EQ(c.longest_prefix(prompt, 0), 50);
  // A restart indexes exactly the complete files.
  DiskCache again(d.path.string(), 1 << 24, 1);
  EXPECT_EQ(again.stats().entries, 2);
}

// read_async answers on the reader thread what read() answers; held reads wait (nothing is
// read meanwhile); reads still queued when the cache is destroyed become misses.
TEST(DiskCache, ReadAsyncOnTheReaderThread) {
  TempDir d;
  const std::vector<int32_t> prompt = toks(100);
  std::future<DiskCache::Payload> queued;
  {
    DiskCache c(d.path.string(), 1 << 20, 5);
    c.put(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40), bytes(3000, 6));
    c.flush();
    auto hit = c.read_async(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40));
    auto miss = c.read_async(std::vector<int32_t>(prompt.begin(), prompt.begin() + 41));
    const DiskCache::Payload p = hit.get();
    ASSERT_TRUE(p);
    EXPECT_EQ(*p, bytes(3000, 6));
    EXPECT_EQ(miss.get(), nullptr);
    EXPECT_EQ(c.stats().background_reads, 2u);
    EXPECT_EQ(c.stats().reads, 1u);

    c.hold_reads(true);
    auto held = c.read_async(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40));
    EXPECT_EQ(held.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
    EXPECT_EQ(c.stats().reads, 1u);
    c.hold_reads(false);
    ASSERT_TRUE(held.get());
    EXPECT_EQ(c.stats().reads, 2u);

    c.hold_reads(true);
    queued = c.read_async(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40));
  }
  EXPECT_EQ(queued.get(), nullptr);
}
