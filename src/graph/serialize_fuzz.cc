// libFuzzer target: the graph deserialiser. An accepted graph must survive a round trip and
// name only tensors it has. Build and run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "graph/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::Result<strata::Graph> g = strata::graph_deserialize({data, size});
  if (!g) return 0;
  const int64_t n = static_cast<int64_t>(g->tensors.size());
  for (const strata::Node& node : g->nodes) {
    if (node.out < 0 || node.out >= n) __builtin_trap();
    for (int32_t s : node.src) {
      if (s < -1 || s >= n) __builtin_trap();
    }
  }
  // The writer picks the oldest format that holds the graph (five inputs per node unless one
  // uses the sixth): the same bytes when the input is in that format, else the same graph.
  const std::vector<uint8_t> again = strata::graph_serialize(*g);
  if (again.size() >= 8 && std::memcmp(again.data() + 4, data + 4, 4) == 0) {
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
    return 0;
  }
  strata::Result<strata::Graph> g2 = strata::graph_deserialize(again);
  if (!g2 || strata::graph_serialize(*g2) != again) __builtin_trap();
  if (g2->nodes.size() != g->nodes.size() || g2->tensors.size() != g->tensors.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    if (std::memcmp(g2->nodes[i].src, g->nodes[i].src, sizeof g->nodes[i].src) != 0) {
      __builtin_trap();
    }
  }
  return 0;
}
