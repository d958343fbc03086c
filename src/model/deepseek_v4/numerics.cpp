#include "model/deepseek_v4/numerics.h"

#include <stdexcept>

namespace deepinfer::v4 {

NumericsMode parse_numerics(const std::string& name) {
  if (name == "reference") return NumericsMode::Reference;
  if (name == "float") return NumericsMode::Float;
  throw std::invalid_argument("--numerics must be 'reference' or 'float', got '" + name + "'");
}

const char* numerics_name(NumericsMode m) { return m == NumericsMode::Reference ? "reference" : "float"; }

}  // namespace deepinfer::v4
