// A disk-cache hit while streams decode: does loading the snapshot stall them?
//
//   bench_disk_hit --model DIR [--prefix 8000] [--streams 4] [--tokens 64] [--rounds 3]
//                  [--threads 1] [--cold] [--json]
//
// One engine fills a fresh --kv-cache-dir with `rounds` prompts of `prefix` tokens and is shut
// down. A second engine over the same directory then runs `rounds` rounds of three phases, each
// `streams` greedy streams of `tokens` tokens:
//   alone:      nothing else;
//   memory hit: once every stream has a quarter of its tokens, a request extends by 8 tokens a
//               prompt of `prefix` tokens this engine ran just before the phase, so it forks
//               that snapshot from memory;
//   disk hit:   the same, but the prompt is one of those saved by the first engine, so its
//               snapshot is read from disk (a memory miss).
// The two hit phases do the same work but for where the snapshot comes from. The streams'
// inter-token latencies (time between two events carrying tokens, seen by one client thread
// per stream) are pooled per phase; reported: p50, p99, max, and the disk-hit p99 over the
// memory-hit and the alone p99. --cold drops the cache files from the page cache first
// (posix_fadvise), so the read comes from the device.
//
// Not a CI test (it times things); tests/engine/test_engine_model.cpp checks the mechanism by
// counting (DiskLoadDoesNotStallRunningStreams).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/engine.h"

using namespace deepinfer;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string model;
  int64_t prefix = 8000, streams = 4, tokens = 64, rounds = 3, threads = 1;
  bool cold = false, json = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--prefix") o.prefix = std::stoll(value());
    else if (a == "--streams") o.streams = std::stoll(value());
    else if (a == "--tokens") o.tokens = std::stoll(value());
    else if (a == "--rounds") o.rounds = std::stoll(value());
    else if (a == "--threads") o.threads = std::stoll(value());
    else if (a == "--cold") o.cold = true;
    else if (a == "--json") o.json = true;
    else throw std::invalid_argument("unknown option " + a);
  }
  if (o.model.empty()) throw std::invalid_argument("--model DIR is required");
  if (o.prefix < 2 || o.streams < 1 || o.tokens < 8 || o.rounds < 1) throw std::invalid_argument("bad sizes");
  return o;
}

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(std::min<int64_t>(vocab, 4096) - 1));
  std::vector<int32_t> p{0};
  while (int64_t(p.size()) < n) p.push_back(tok(rng));
  return p;
}

// Reads `stream` to its end; the time of every event that carries tokens.
void drain(RequestStream& stream, std::vector<Clock::time_point>* times, std::atomic<int64_t>* tokens) {
  for (;;) {
    auto ev = stream.next(std::chrono::seconds(600));
    if (!ev) throw std::runtime_error("a stream stalled for 600 s");
    if (!ev->tokens.empty()) {
      times->push_back(Clock::now());
      *tokens += int64_t(ev->tokens.size());
    }
    if (ev->finished) {
      if (ev->finish_reason == FinishReason::kError) throw std::runtime_error("a request failed: " + ev->error.message);
      return;
    }
  }
}

EngineOptions engine_options(const Options& o, const std::string& cache_dir) {
  EngineOptions e;
  e.model_dir = o.model;
  e.threads = int(o.threads);
  e.kv_cache_dir = cache_dir;
  e.max_running = std::max<int64_t>(8, o.streams + 1);
  e.speculative = "off";  // every step one token per stream: the latencies compare step times
  return e;
}

// One round: the streams to the end, with (hit non-empty) the disk-hit request submitted
// once every stream has a quarter of its tokens. Adds the streams' inter-token latencies.
void round_of(Engine& eng, const Options& o, uint32_t seed, const std::vector<int32_t>& hit, std::vector<double>* itl) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<GenerateRequest> reqs;
  for (int64_t i = 0; i < o.streams; ++i)
    reqs.push_back(GenerateRequest{random_prompt(16, eng.info().vocab_size, seed * 100 + uint32_t(i)), greedy(o.tokens), {}});
  streams = eng.submit_all(std::move(reqs), nullptr);
  std::vector<std::vector<Clock::time_point>> times(size_t(o.streams));
  std::vector<std::atomic<int64_t>> counts(size_t(o.streams));
  std::vector<std::thread> readers;
  for (size_t i = 0; i < streams.size(); ++i) readers.emplace_back([&, i] { drain(*streams[i], &times[i], &counts[i]); });
  if (!hit.empty()) {
    for (;;) {
      bool ready = true;
      for (auto& c : counts) ready = ready && c.load() >= o.tokens / 4;
      if (ready) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    auto s = eng.submit(GenerateRequest{hit, greedy(1), {}});
    std::vector<Clock::time_point> ignored;
    std::atomic<int64_t> n{0};
    drain(*s, &ignored, &n);
  }
  for (auto& t : readers) t.join();
  for (const auto& t : times)
    for (size_t k = 1; k < t.size(); ++k) itl->push_back(std::chrono::duration<double>(t[k] - t[k - 1]).count());
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

void drop_from_page_cache(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const int fd = open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

struct Phase {
  const char* name;
  std::vector<double> itl;
};

void print_phase(const Phase& p) {
  std::printf("  %-11s p50 %7.2f  p99 %7.2f  max %7.2f  (%zu samples)\n", p.name, 1e3 * percentile(p.itl, 0.5),
              1e3 * percentile(p.itl, 0.99), 1e3 * percentile(p.itl, 1.0), p.itl.size());
}

int run(const Options& o) {
  const fs::path cache = fs::temp_directory_path() / ("di-bench-disk-hit-" + std::to_string(getpid()));
  fs::remove_all(cache);
  std::vector<std::vector<int32_t>> saved;
  int64_t snapshot_bytes = 0;
  {
    auto fill = Engine::create(engine_options(o, cache.string()));
    for (int64_t r = 0; r < o.rounds; ++r) {
      saved.push_back(random_prompt(o.prefix, fill->info().vocab_size, 7000 + uint32_t(r)));
      auto s = fill->submit(GenerateRequest{saved.back(), greedy(1), {}});
      std::vector<Clock::time_point> ignored;
      std::atomic<int64_t> n{0};
      drain(*s, &ignored, &n);
    }
  }  // the engine's destruction finishes the disk writes
  for (const auto& e : fs::directory_iterator(cache)) snapshot_bytes = std::max<int64_t>(snapshot_bytes, int64_t(e.file_size()));

  auto eng = Engine::create(engine_options(o, cache.string()));
  auto extend = [](std::vector<int32_t> p) {
    for (int32_t k = 0; k < 8; ++k) p.push_back(100 + k);
    return p;
  };
  Phase alone{"alone", {}}, memory{"memory hit", {}}, disk{"disk hit", {}};
  for (int64_t r = 0; r < o.rounds; ++r) {
    round_of(*eng, o, uint32_t(3 * r + 1), {}, &alone.itl);
    // A prompt of the same length, run now: in memory for the next round (its disk write is
    // given a moment, so that it does not overlap the round).
    const std::vector<int32_t> warm = random_prompt(o.prefix, eng->info().vocab_size, 9000 + uint32_t(r));
    {
      auto s = eng->submit(GenerateRequest{warm, greedy(1), {}});
      std::vector<Clock::time_point> ignored;
      std::atomic<int64_t> n{0};
      drain(*s, &ignored, &n);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    round_of(*eng, o, uint32_t(3 * r + 2), extend(warm), &memory.itl);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (o.cold) drop_from_page_cache(cache);
    round_of(*eng, o, uint32_t(3 * r + 3), extend(saved[size_t(r)]), &disk.itl);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const EngineStats st = eng->stats();
  eng.reset();
  fs::remove_all(cache);

  const double p99_alone = percentile(alone.itl, 0.99), p99_memory = percentile(memory.itl, 0.99);
  const double p99_disk = percentile(disk.itl, 0.99);
  const double vs_memory = p99_memory > 0 ? p99_disk / p99_memory : 0.0, vs_alone = p99_alone > 0 ? p99_disk / p99_alone : 0.0;
  if (o.json) {
    std::printf("{\"model\":\"%s\",\"prefix_tokens\":%lld,\"snapshot_bytes\":%lld,\"streams\":%lld,\"rounds\":%lld,"
                "\"cold\":%s,\"disk_hits\":%llu,\"itl_p99_ms\":{\"alone\":%.3f,\"memory_hit\":%.3f,\"disk_hit\":%.3f},"
                "\"itl_max_ms\":{\"alone\":%.3f,\"memory_hit\":%.3f,\"disk_hit\":%.3f},"
                "\"disk_over_memory_p99\":%.3f,\"disk_over_alone_p99\":%.3f}\n",
                o.model.c_str(), (long long)o.prefix, (long long)snapshot_bytes, (long long)o.streams, (long long)o.rounds,
                o.cold ? "true" : "false", (unsigned long long)st.prefix_cache_disk_hits, 1e3 * p99_alone, 1e3 * p99_memory,
                1e3 * p99_disk, 1e3 * percentile(alone.itl, 1.0), 1e3 * percentile(memory.itl, 1.0),
                1e3 * percentile(disk.itl, 1.0), vs_memory, vs_alone);
  } else {
    std::printf("snapshot on disk: %.1f MiB (%lld-token prompt%s); disk hits: %llu of %lld\n",
                double(snapshot_bytes) / (1 << 20), (long long)o.prefix, o.cold ? ", page cache dropped" : "",
                (unsigned long long)st.prefix_cache_disk_hits, (long long)o.rounds);
    std::printf("inter-token latency of %lld streams, ms:\n", (long long)o.streams);
    for (const Phase* p : {&alone, &memory, &disk}) print_phase(*p);
    std::printf("  disk-hit p99 / memory-hit p99: %.2fx;  / alone p99: %.2fx\n", vs_memory, vs_alone);
  }
  return st.prefix_cache_disk_hits == uint64_t(o.rounds) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_disk_hit: %s\n", e.what());
    return 2;
  }
}
