// Shared helpers of the tokenizer tests (declared again where used; see the
// "test helpers" block at the top of each test file).
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

struct CorpusCase {
  std::string name;
  std::string text;  // raw bytes (possibly invalid UTF-8)
};

std::string data_path(const std::string& rel) { return std::string(DI_TEST_DATA_DIR) + "/tokenizer/" + rel; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& rel) { return nlohmann::json::parse(read_file(data_path(rel))); }

std::string from_hex(const std::string& hex) {
  auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(nib(hex[i]) * 16 + nib(hex[i + 1])));
  return out;
}

std::string to_hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

const std::vector<CorpusCase>& corpus() {
  static const std::vector<CorpusCase> cases = [] {
    std::vector<CorpusCase> out;
    const nlohmann::json j = read_json("corpus.json");
    for (const auto& c : j["cases"]) {
      out.push_back({c["name"].get<std::string>(), from_hex(c["hex"].get<std::string>())});
    }
    return out;
  }();
  return cases;
}

// Tokenizer files under tests/data/tokenizer by short name ("tiny", "v4", "tiny_gpt2", ...).
const Tokenizer& test_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, Tokenizer> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::from_file(data_path(name + "_tokenizer.json"))).first;
  return it->second;
}

}  // namespace deepinfer::tokenizer::testing
