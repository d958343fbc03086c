// The disk cache's checkpoint fingerprint (engine/checkpoint_fingerprint.h): weights changed
// in place with the same layout (so config.json and the shard headers are unchanged) get a new
// fingerprint, and the public Engine then ignores the snapshots saved under the old weights;
// an unchanged checkpoint keeps its fingerprint and still hits. What is read stays bounded
// however large the shard.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "deepinfer/engine.h"
#include "engine/checkpoint_fingerprint.h"

using namespace deepinfer;
namespace fs = std::filesystem;

namespace {

const std::string kSettings = "numerics=reference kernels=cpu";

fs::path golden_model() { return fs::path(DI_SHARED_DIR) / "golden" / "tiny-v4-c" / "model"; }

// A writable copy of the tiny checkpoint in a fresh temporary directory.
struct CheckpointCopy {
  fs::path root, model, cache;
  CheckpointCopy() {
    root = fs::temp_directory_path() / ("di-fingerprint-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    model = root / "model";
    cache = root / "kv-cache";
    fs::create_directories(model);
    for (const auto& e : fs::directory_iterator(golden_model())) {
      fs::copy_file(e.path(), model / e.path().filename());
      fs::permissions(model / e.path().filename(), fs::perms::owner_write, fs::perm_options::add);
    }
  }
  ~CheckpointCopy() { fs::remove_all(root); }
  fs::path shard() const { return model / "model.safetensors"; }
};

uint64_t data_begin(const fs::path& shard) {
  std::ifstream f(shard, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  return 8 + n;
}

struct timespec mtime_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(stat(p.c_str(), &st), 0);
  return st.st_mtim;
}

void set_mtime(const fs::path& p, struct timespec t) {
  const struct timespec times[2] = {t, t};
  ASSERT_EQ(utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
}

// Changes one weight byte at or after `at`, in place (same size, header untouched), to a value
// that keeps the weights finite: the low bit of a byte that is not the top of an e4m3 / bf16
// exponent range, so no NaN or Inf code appears.
void change_weight_byte(const fs::path& shard, uint64_t at) {
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f);
  for (;; ++at) {
    char b = 0;
    f.seekg(std::streamoff(at));
    ASSERT_TRUE(f.read(&b, 1));
    if ((uint8_t(b) & 0x7f) >= 0x70) continue;
    b = char(b ^ 0x01);
    f.seekp(std::streamoff(at));
    f.write(&b, 1);
    return;
  }
}

std::vector<int32_t> prompt(int64_t n, int32_t salt) {
  std::vector<int32_t> v{0};
  for (int64_t i = 1; i < n; ++i) v.push_back(int32_t((i * 37 + salt * 101) % 1000 + 3));
  return v;
}

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// One Engine over `model` with the disk cache in `cache` runs `p` to the end; returns its
// disk hits, read as its final event arrives.
uint64_t run_and_count_disk_hits(const fs::path& model, const fs::path& cache, std::vector<int32_t> p) {
  EngineOptions o;
  o.model_dir = model.string();
  o.threads = 1;
  o.num_kv_blocks = 400;
  o.prefix_cache_granularity = 64;
  o.kv_cache_dir = cache.string();
  auto eng = Engine::create(o);
  auto s = eng->submit(GenerateRequest{std::move(p), greedy(2), {}});
  for (;;) {
    auto ev = s->next(std::chrono::seconds(60));
    if (!ev) {
      ADD_FAILURE() << "no event in 60 s";
      return ~0ull;
    }
    if (ev->finished) break;
  }
  // Counted before its final event: no wait.
  const EngineStats st = eng->stats();
  EXPECT_EQ(st.requests_finished_length + st.requests_finished_stop, 1u);
  return st.prefix_cache_disk_hits;
}

}  // namespace

TEST(CheckpointFingerprint, ChangesWithWeightsInPlaceNotOtherwise) {
  CheckpointCopy c;
  const uint64_t before = engine::checkpoint_fingerprint(c.model.string(), kSettings);
  EXPECT_EQ(engine::checkpoint_fingerprint(c.model.string(), kSettings), before);  // stable
  EXPECT_NE(engine::checkpoint_fingerprint(c.model.string(), kSettings + " x"), before);

  // Only the mtime moves (weights rewritten with the same bytes, or touched).
  const struct timespec t0 = mtime_of(c.shard());
  struct timespec later = t0;
  later.tv_sec += 1;
  set_mtime(c.shard(), later);
  EXPECT_NE(engine::checkpoint_fingerprint(c.model.string(), kSettings), before);
  set_mtime(c.shard(), t0);
  EXPECT_EQ(engine::checkpoint_fingerprint(c.model.string(), kSettings), before);

  // One weight byte changed inside the 8th sampled block, the mtime put back as it was: the
  // sample sees it.
  const uint64_t d0 = data_begin(c.shard()), size = fs::file_size(c.shard());
  ASSERT_GT(size - d0, uint64_t(engine::kSampleBlocks * engine::kSampleBlockBytes));  // sampled, not read whole
  const uint64_t block7 = d0 + (size - d0 - uint64_t(engine::kSampleBlockBytes)) / uint64_t(engine::kSampleBlocks - 1) * 7;
  change_weight_byte(c.shard(), block7 + 100);
  set_mtime(c.shard(), t0);
  EXPECT_NE(engine::checkpoint_fingerprint(c.model.string(), kSettings), before);
}

// A shard of 1 GiB (sparse: nothing is written but a header): the fingerprint reads the
// header and kSampleBlocks blocks, no more, and a byte changed inside a sampled block (mtime
// restored) still changes it.
TEST(CheckpointFingerprint, ReadsABoundedSampleOfALargeShard) {
  const fs::path dir = fs::temp_directory_path() / ("di-fingerprint-large-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  const fs::path shard = dir / "model-00001-of-00001.safetensors";
  const std::string header = R"({"w":{"dtype":"U8","shape":[1073741000],"data_offsets":[0,1073741000]}})";
  {
    std::ofstream f(shard, std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
  }
  const uint64_t d0 = 8 + header.size(), size = d0 + 1073741000ull;
  fs::resize_file(shard, size);
  int64_t bytes_read = 0;
  const uint64_t before = engine::checkpoint_fingerprint(dir.string(), kSettings, &bytes_read);
  EXPECT_EQ(bytes_read, int64_t(d0) + engine::kSampleBlocks * engine::kSampleBlockBytes);
  EXPECT_LE(bytes_read, int64_t(2) << 20);

  const struct timespec t0 = mtime_of(shard);
  const uint64_t block5 = d0 + (size - d0 - uint64_t(engine::kSampleBlockBytes)) / uint64_t(engine::kSampleBlocks - 1) * 5;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(block5 + 1000));
    f.put('\x05');
  }
  set_mtime(shard, t0);
  EXPECT_NE(engine::checkpoint_fingerprint(dir.string(), kSettings), before);
  fs::remove_all(dir);
}

// Through the public Engine: a run fills the disk cache; a restart over the same files hits it;
// after weight bytes are changed in place (same size, same header, same config) a restart
// does not load the old snapshots, and computes afresh.
TEST(CheckpointFingerprint, EngineIgnoresSnapshotsOfWeightsChangedInPlace) {
  CheckpointCopy c;
  const std::vector<int32_t> first = prompt(200, 21);
  std::vector<int32_t> second(first.begin(), first.begin() + 150);
  for (int32_t i = 0; i < 20; ++i) second.push_back(500 + i);
  EXPECT_EQ(run_and_count_disk_hits(c.model, c.cache, first), 0u);  // fills the cache
  EXPECT_EQ(run_and_count_disk_hits(c.model, c.cache, second), 1u);  // unchanged: hits
  const uint64_t d0 = data_begin(c.shard());
  change_weight_byte(c.shard(), d0 + (fs::file_size(c.shard()) - d0) / 3);
  std::vector<int32_t> third(first.begin(), first.begin() + 150);
  for (int32_t i = 0; i < 20; ++i) third.push_back(700 + i);
  EXPECT_EQ(run_and_count_disk_hits(c.model, c.cache, third), 0u);
}
