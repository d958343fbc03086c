// fuzz-sources: src/core/formats.cpp src/core/mapped_file.cpp src/loader/safetensors.cpp
// libFuzzer harness: any byte string given to the safetensors parser either parses into
// views that lie inside the buffer or throws LoadError; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tensors = deepinfer::parse_safetensors(data, size, "fuzz");
    for (const auto& [name, t] : tensors) {
      if (t.data < data || t.data + t.nbytes > data + size) std::abort();
      if (t.nbytes != size_t(t.numel()) * deepinfer::dtype_size(t.dtype)) std::abort();
    }
  } catch (const deepinfer::LoadError&) {
  }
  return 0;
}
