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
  const std::vector<uint8_t> again = strata::graph_serialize(*g);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}
