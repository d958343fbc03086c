// fuzz-sources: src/model/deepseek_v4/config.cpp src/model/deepseek_v4/release.cpp src/model/deepseek_v4/release_v4.cpp src/model/deepseek_v4/release_v4_dspark.cpp src/model/deepseek_v4/release_v41.cpp src/core/log.cpp
// libFuzzer harness: config.json text is either accepted as a consistent config or rejected
// with std::runtime_error naming the field.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "model/deepseek_v4/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto c = deepinfer::v4::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    if (int64_t(c.compress_ratios.size()) < c.n_layers + c.n_mtp_layers) std::abort();
    if (c.n_heads % c.o_groups != 0 || c.rope_dim > c.head_dim) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
