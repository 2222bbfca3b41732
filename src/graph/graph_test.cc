#include "graph/graph.h"

#include <gtest/gtest.h>

#include "graph/builder.h"

namespace strata {
namespace {

Graph one_copy(const TensorRef& in, const TensorRef& out) {
  Graph g;
  g.tensors = {in, out};
  Node n;
  n.op = Op::kCopy;
  n.src[0] = 0;
  n.out = 1;
  g.nodes.push_back(n);
  return g;
}

TEST(GraphValidate, AcceptsAPlainCopy) {
  const TensorRef t = make_tensor(1, 0, DType::kF32, 8, 4);
  EXPECT_TRUE(graph_validate(one_copy(t, t)).is_ok());
}

TEST(GraphValidate, RefusesElementCountsThatWouldOverflow) {
  TensorRef t = make_tensor(1, 0, DType::kF32, 8, 4);
  t.ne[0] = int64_t{1} << 32;
  t.ne[1] = int64_t{1} << 32;
  t.ne[2] = int64_t{1} << 32;
  const Status s = graph_validate(one_copy(t, t));
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("2^40 elements"), std::string::npos) << s.message();
}

TEST(GraphValidate, RefusesExtentsThatWouldWrap) {
  TensorRef t = make_tensor(1, 0, DType::kF32, 8, 4);
  t.ne[1] = int64_t{1} << 15;
  t.nb[1] = uint64_t{1} << 47;
  t.ne[2] = int64_t{1} << 15;
  t.nb[2] = uint64_t{1} << 47;
  const Status s = graph_validate(one_copy(t, t));
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("2^62 bytes"), std::string::npos) << s.message();
}

TEST(GraphValidate, NamesTheNodeAndOp) {
  const TensorRef a = make_tensor(1, 0, DType::kF32, 8, 4);
  const TensorRef b = make_tensor(1, 0, DType::kF32, 9, 4);
  const Status s = graph_validate(one_copy(a, b));
  EXPECT_NE(s.message().find("node 0 (copy)"), std::string::npos) << s.message();
}

// Tensors alive at the same time never share bytes; the plan reuses memory of dead ones.
TEST(GraphBuilder, PlanKeepsLiveTensorsApartAndReusesDeadOnes) {
  GraphBuilder b;
  const int32_t x = b.external(make_tensor(7, 0, DType::kF32, 256, 4));
  int32_t cur = x;
  std::vector<int32_t> made;
  for (int i = 0; i < 12; ++i) {
    const int32_t y = b.node(Op::kRmsNorm, b.scratch(DType::kF32, 256, 4), {cur, -1}, {}, {1e-5f});
    const int32_t z = b.node(Op::kAdd, b.scratch(DType::kF32, 256, 4), {y, cur});
    made.push_back(y);
    made.push_back(z);
    cur = z;
  }
  const uint64_t bytes = b.plan(64);
  const uint64_t one = 256 * 4 * 4;
  EXPECT_LE(bytes, 4 * one) << "dead intermediates must be reused";
  const Graph g = b.finish(9);
  EXPECT_TRUE(graph_validate(g).is_ok());
  // Each node's output must not overlap any of its inputs that are scratch tensors.
  for (const Node& n : g.nodes) {
    const TensorRef& out = g.tensors[n.out];
    EXPECT_EQ(out.buffer, 9u);
    for (int32_t s : n.src) {
      if (s < 0 || g.tensors[s].buffer != 9u || s == n.out) continue;
      const TensorRef& in = g.tensors[s];
      const bool apart = in.offset + in.extent_bytes() <= out.offset ||
                         out.offset + out.extent_bytes() <= in.offset;
      EXPECT_TRUE(apart) << op_name(n.op);
    }
  }
}

}  // namespace
}  // namespace strata
