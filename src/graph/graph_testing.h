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

// One token's attention with sinks (the one op of six inputs): 2 query heads of 4 over an f16
// cache of 2 kv heads and 4 cells, in buffer `buf`; tensors q, k, v, cells, tok, sinks, out.
inline Graph sink_attention_graph(uint64_t buf = 1) {
  Graph g;
  g.tensors.push_back(make_tensor(buf, 0, DType::kF32, 4, 2, 1));
  g.tensors.push_back(make_tensor(buf, 64, DType::kF16, 8, 4));
  g.tensors.push_back(make_tensor(buf, 128, DType::kF16, 8, 4));
  g.tensors.push_back(make_tensor(buf, 192, DType::kI32, 4, 1));
  g.tensors.push_back(make_tensor(buf, 256, DType::kI32, 2, 1));
  g.tensors.push_back(make_tensor(buf, 320, DType::kF32, 2));
  g.tensors.push_back(make_tensor(buf, 384, DType::kF32, 4, 2, 1));
  Node n;
  n.op = Op::kAttentionSink;
  for (int s = 0; s < 6; ++s) n.src[s] = s;
  n.out = 6;
  n.iparams[0] = 2;
  n.fparams[0] = 0.5f;
  g.nodes.push_back(n);
  return g;
}

}  // namespace strata::testing
