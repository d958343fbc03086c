// The two numerics policies (issue 2, `--numerics reference|float`) and the small
// elementwise math shared by the forward pass.
//   reference: every bf16 rounding point and quantise-dequantise (QDQ) point of DeepSeek's
//              inference/model.py (docs/model/numerics.md §1-§3), evaluated with canonical
//              rules: reductions and transcendentals in double, rounded once.
//   float:     the same model in fp32 from the exactly decoded weights, with no bf16
//              rounding and no activation / KV / indexer QDQ (what llama.cpp on exact
//              weights and HF transformers in fp32 compute).
#pragma once
#include <cstdint>
#include <string>

#include "core/formats.h"
#include "kernels/backend.h"
#include "kernels/light_ops.h"

namespace deepinfer::v4 {

enum class NumericsMode { Reference, Float };

NumericsMode parse_numerics(const std::string& name);  // "reference" | "float"
const char* numerics_name(NumericsMode m);

// How a forward pass computes: the numerics policy and the kernels that run it.
struct Numerics {
  NumericsMode mode = NumericsMode::Reference;
  const kernels::Backend* backend = &kernels::ref_backend();
  bool reference() const { return mode == NumericsMode::Reference; }
  // A point where the reference holds bf16.
  float bf16(float x) const { return reference() ? round_bf16(x) : x; }
  void bf16(float* x, int64_t n) const {
    if (reference())
      for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
  }
};

// The canonical transcendentals (double inside, rounded once to fp32) are the kernel layer's.
using kernels::exp_f;
using kernels::rsqrt_f;
using kernels::sigmoid_f;
using kernels::softplus_f;

// y = bf16((x * rsqrt(mean(x^2) + eps)) * w), all fp32 inside (docs/model/forward.md §3). w may be null
// (unweighted). In place allowed. The rounding only under reference numerics; the math is
// kernels::rms_norm_ref (light_ops.h).
inline void rms_norm(const float* x, const float* w, int64_t n, float eps, const Numerics& num, float* y) {
  kernels::rms_norm_ref(x, w, n, eps, num.reference(), y);
}

}  // namespace deepinfer::v4
