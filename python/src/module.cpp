// deepinfer._core: the compiled half of the Python package. It binds the public engine API
// (include/deepinfer/) and the text library (src/tokenizer/) and nothing else: the Python
// half (python/deepinfer/) shapes the results like vLLM's. No second engine lives here.
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"

namespace deepinfer::python {

NB_MODULE(_core, m) {
  m.doc() = "DeepInfer engine bindings (use the deepinfer package, not this module)";
  nb::exception<EngineError>(m, "EngineError", PyExc_RuntimeError);
  m.def("default_model_dir", [] { return std::string(DEEPINFER_DEFAULT_MODEL_DIR); },
        "models/default of the source tree this package was built from (the embedded default: a small "
        "DeepSeek-V4 trained on the King James Bible); the package prefers its own installed copy");
  bind_text(m);
  bind_engine(m);
}

}  // namespace deepinfer::python
