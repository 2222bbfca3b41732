// Graphs that tests send to devices and workers.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace strata::testing {

// out = x + y over three f32[n] tensors of buffer `buf`, at byte offsets 0, 4n and 8n.
inline Graph add_graph(uint64_t buf, int64_t n) {
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  Graph g;
  g.tensors = {make_tensor(buf, 0, DType::kF32, n), make_tensor(buf, bytes, DType::kF32, n),
               make_tensor(buf, 2 * bytes, DType::kF32, n)};
  Node node;
  node.op = Op::kAdd;
  node.src[0] = 0;
  node.src[1] = 1;
  node.out = 2;
  g.nodes.push_back(node);
  return g;
}

}  // namespace strata::testing
