// Tokenizer throughput on one core (printed only: CI machines and sanitizer builds vary, so
// what is asserted is work counted per byte, regex_work() and bpe_work(), not time). English text: the English and license cases of
// the corpus, or the file named by $DI_TOKENIZER_BENCH_FILE, repeated to ~16 MiB.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

// ---- test helpers (test_tokenizer_util.cpp) ----
namespace deepinfer::tokenizer::testing {
struct CorpusCase {
  std::string name;
  std::string text;
};
std::string read_file(const std::string& path);
const std::vector<CorpusCase>& corpus();
const Tokenizer& test_tokenizer(const std::string& name);
}  // namespace deepinfer::tokenizer::testing

namespace {

using namespace deepinfer::tokenizer;
using namespace deepinfer::tokenizer::testing;

std::string english_sample() {
  if (const char* f = std::getenv("DI_TOKENIZER_BENCH_FILE")) return read_file(f);
  std::string s;
  for (const CorpusCase& c : corpus()) {
    if (c.name.rfind("english_", 0) == 0 || c.name.rfind("license_", 0) == 0) s += c.text + "\n";
  }
  return s;
}

std::string repeat_to(const std::string& s, std::size_t bytes) {
  std::string out;
  out.reserve(bytes + s.size());
  while (out.size() < bytes) out += s;
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(TokenizerBench, EncodeDecodeThroughput) {
  const Tokenizer& tok = test_tokenizer("v4");
  const std::string sample = english_sample();
  ASSERT_GT(sample.size(), 1000u);
  const std::string text = repeat_to(sample, 16u << 20);
  const double mb = static_cast<double>(text.size()) / (1 << 20);

  {
    // Cold: a fresh tokenizer (empty word cache) on the sample once.
    const Tokenizer fresh = Tokenizer::from_file(std::string(DI_TEST_DATA_DIR) + "/tokenizer/v4_tokenizer.json");
    const auto c0 = std::chrono::steady_clock::now();
    const auto cold_ids = fresh.encode(sample);
    const double t_cold = seconds_since(c0);
    std::printf("[ info ] cold cache: %zu bytes in %.4fs = %.1f MiB/s\n", sample.size(), t_cold,
                static_cast<double>(sample.size()) / (1 << 20) / t_cold);
    EXPECT_EQ(cold_ids, tok.encode(sample));
  }
  (void)tok.encode(sample);  // warm the word cache with the sample once
  const uint64_t r0 = regex_work(), b0 = bpe_work();
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text);
  const double t_enc = seconds_since(t0);
  const double regex_per_byte = double(regex_work() - r0) / double(text.size());
  const uint64_t bpe_ops = bpe_work() - b0;

  t0 = std::chrono::steady_clock::now();
  const std::string back = tok.decode(ids);
  const double t_dec = seconds_since(t0);
  EXPECT_EQ(back, text);

  t0 = std::chrono::steady_clock::now();
  IncrementalDetokenizer detok(tok);
  std::size_t streamed = 0;
  for (int32_t id : ids) streamed += detok.push(id).size();
  streamed += detok.flush().size();
  const double t_stream = seconds_since(t0);
  EXPECT_EQ(streamed, text.size());

  std::printf("[ info ] English %.1f MiB (sample %zu bytes), %zu ids (%.2f bytes/id)\n", mb, sample.size(), ids.size(),
              static_cast<double>(text.size()) / ids.size());
  std::printf("[ info ] encode %.1f MiB/s, decode %.1f MiB/s, incremental detokenize %.1f MiB/s\n", mb / t_enc,
              mb / t_dec, mb / t_stream);
  std::printf("[ info ] regex work %.2f steps/byte, BPE work %llu ops once the cache is warm\n", regex_per_byte,
              static_cast<unsigned long long>(bpe_ops));
  // Pathological slowdowns, counted: the pre-tokenizer's matcher does a few steps per byte
  // of English (about 5.7 when this was written), and every word of the repeated sample is
  // in the BPE cache after the warm-up (only words over the cache's length limit remain).
  EXPECT_LT(regex_per_byte, 12.0);
  EXPECT_LT(double(bpe_ops), 0.01 * double(text.size()));
}

TEST(TokenizerBench, MultilingualThroughput) {
  const Tokenizer& tok = test_tokenizer("v4");
  std::string sample;
  for (const CorpusCase& c : corpus()) {
    if (c.name.rfind("script_", 0) == 0 || c.name.rfind("code_", 0) == 0 || c.name.rfind("emoji_", 0) == 0) {
      sample += c.text + "\n";
    }
  }
  const std::string text = repeat_to(sample, 4u << 20);
  const double mb = static_cast<double>(text.size()) / (1 << 20);
  (void)tok.encode(sample);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text);
  const double t = seconds_since(t0);
  std::printf("[ info ] code+scripts+emoji %.1f MiB: encode %.1f MiB/s (%zu ids)\n", mb, mb / t, ids.size());
  EXPECT_EQ(tok.decode(ids), text);
}

}  // namespace
