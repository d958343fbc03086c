// Shared declarations of the extension deepinfer._core (see module.cpp).
#pragma once
#include <nanobind/nanobind.h>

#include <stdexcept>

namespace deepinfer::python {

namespace nb = nanobind;

// deepinfer.EngineError (a RuntimeError): the engine could not start (bad checkpoint,
// KV memory too small) or a request failed while running (e.g. non-finite logits).
// Bad arguments are ValueError instead.
struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void bind_engine(nb::module_& m);  // engine_binding.cpp: Engine, Batch, SamplingParams
void bind_text(nb::module_& m);    // text_binding.cpp: Tokenizer, render, parse_output

}  // namespace deepinfer::python
