// A read-only hook for measurements (deepinfer bench): which routed experts the tokens of the
// forwards since the last clear() chose, per layer. Installed on the calling thread only; when
// none is installed moe_forward pays one thread-local pointer test per call and nothing else.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace deepinfer::v4 {

struct RoutingTrace {
  // chosen[id][e]: how many tokens chose expert e in the MoE of layer id (LayerWeights::id:
  // the backbone's layers first, then the MTP stages), i.e. the rows of that expert's
  // products; grown on demand.
  std::vector<std::vector<uint32_t>> chosen;

  void clear() {
    for (auto& layer : chosen) std::fill(layer.begin(), layer.end(), 0u);
  }
  // Distinct experts chosen in layer id.
  int64_t distinct(int64_t id) const {
    if (id < 0 || id >= int64_t(chosen.size())) return 0;
    int64_t n = 0;
    for (uint32_t c : chosen[size_t(id)]) n += c != 0;
    return n;
  }
};

// Installs trace (null: none) for this thread's forwards; returns the one it replaces.
RoutingTrace* set_routing_trace(RoutingTrace* trace);

}  // namespace deepinfer::v4
