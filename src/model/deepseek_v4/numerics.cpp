#include "model/deepseek_v4/numerics.h"

#include <stdexcept>

namespace deepinfer::v4 {

NumericsMode parse_numerics(const std::string& name) {
  if (name == "reference") return NumericsMode::Reference;
  if (name == "float") return NumericsMode::Float;
  throw std::invalid_argument("--numerics must be 'reference' or 'float', got '" + name + "'");
}

const char* numerics_name(NumericsMode m) { return m == NumericsMode::Reference ? "reference" : "float"; }

void rms_norm(const float* x, const float* w, int64_t n, float eps, const Numerics& num, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i] * x[i]);  // fp32 squares, exact-order sum
  const float mean = float(ss / double(n));
  const float r = rsqrt_f(mean + eps);
  for (int64_t i = 0; i < n; ++i) {
    float t = x[i] * r;
    y[i] = num.bf16(w ? w[i] * t : t);
  }
}

}  // namespace deepinfer::v4
