// The mixture-of-experts rows of the op table: what the builder makes validates, and what a peer
// could send wrong (k, n_expert past the limit, a gating mode, shapes that do not fit) is
// refused by graph_validate with the field and the limit named, before any kernel runs.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "graph/builder.h"
#include "graph/op_table.h"
#include "graph/serialize.h"

namespace strata {
namespace {

// One MoE feed-forward over T tokens: router, top-k, gate, gate/up experts per token, swiglu,
// down experts per slot, weighted sum.
struct MoeGraph {
  int64_t n_embd = 64, n_ff = 32, n_expert = 8, n_used = 2, tokens = 3;
  Graph g;
  int32_t logits = -1, ids = -1, weights = -1, up = -1, down = -1, y = -1, out = -1;

  MoeGraph() {
    GraphBuilder b;
    const int32_t h = b.external(make_tensor(1, 0, DType::kF32, n_embd, tokens));
    const int32_t router = b.external(make_tensor(2, 0, DType::kF32, n_embd, n_expert));
    const int32_t gate_w = b.external(make_tensor(2, 0, DType::kQ8_0, n_embd, n_ff, n_expert));
    const int32_t up_w = b.external(make_tensor(2, 0, DType::kQ8_0, n_embd, n_ff, n_expert));
    const int32_t down_w = b.external(make_tensor(2, 0, DType::kQ8_0, n_ff, n_embd, n_expert));
    logits = b.node(Op::kMulMat, b.scratch(DType::kF32, n_expert, tokens), {router, h});
    ids = b.moe_top_k(logits, static_cast<int>(n_used));
    weights = b.moe_gate(logits, ids, MoeGating::kSoftmax, true, 1.0f);
    const uint64_t row = static_cast<uint64_t>(n_embd) * 4;
    const int32_t h3 = b.view(h, n_embd, 1, tokens, row, row);
    const int32_t gate = b.mul_mat_id(gate_w, h3, ids);
    up = b.mul_mat_id(up_w, h3, ids);
    const int32_t act =
        b.node(Op::kSwiglu, b.scratch(DType::kF32, n_ff, n_used, tokens), {gate, up});
    down = b.mul_mat_id(down_w, act, ids);
    y = down;
    out = b.moe_sum(down, weights);
    b.plan();
    g = b.finish(3);
  }
  Node& node_of(Op op) {
    for (Node& n : g.nodes) {
      if (n.op == op) return n;
    }
    static Node none;
    ADD_FAILURE() << "no node " << op_name(op);
    return none;
  }
};

// t with another shape, packed, in the same place.
void reshape(TensorRef& t, int64_t ne0, int64_t ne1, int64_t ne2 = 1) {
  t = make_tensor(t.buffer, t.offset, t.dtype, ne0, ne1, ne2);
}

void expect_refused(const Graph& g, const std::string& what) {
  const Status s = graph_validate(g);
  ASSERT_FALSE(s.is_ok()) << "accepted; expected: " << what;
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(OpMoe, TheBuildersGraphValidatesWithTheShapesOfTheSpec) {
  MoeGraph m;
  ASSERT_TRUE(graph_validate(m.g).is_ok()) << graph_validate(m.g).message();
  const TensorRef& ids = m.g.tensors[m.ids];
  EXPECT_EQ(ids.dtype, DType::kI32);
  EXPECT_EQ(ids.ne[0], 2);
  EXPECT_EQ(ids.ne[1], 3);
  EXPECT_EQ(m.g.tensors[m.weights].dtype, DType::kF32);
  EXPECT_EQ(m.g.tensors[m.weights].ne[0], 2);
  const TensorRef& up = m.g.tensors[m.up];
  EXPECT_EQ(up.ne[0], 32);
  EXPECT_EQ(up.ne[1], 2);
  EXPECT_EQ(up.ne[2], 3);
  EXPECT_EQ(m.g.tensors[m.down].ne[0], 64);
  EXPECT_EQ(m.g.tensors[m.out].ne[0], 64);
  EXPECT_EQ(m.g.tensors[m.out].ne[1], 3);
  const Node& gate = m.node_of(Op::kMoeGate);
  EXPECT_EQ(gate.iparams[0], 0);
  EXPECT_EQ(gate.iparams[1], 1);
  EXPECT_EQ(gate.fparams[0], 1.0f);
  EXPECT_EQ(m.node_of(Op::kMoeTopK).iparams[0], 2);
  EXPECT_EQ(op_info(Op::kMulMatId).weight_src, 0);
}

// The IR carries the new ops as any other: a round trip gives the same graph, every parameter.
TEST(OpMoe, TheGraphSurvivesSerialisation) {
  MoeGraph m;
  const std::vector<uint8_t> bytes = graph_serialize(m.g);
  Result<Graph> back = graph_deserialize(bytes);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(graph_serialize(*back), bytes);
  ASSERT_EQ(back->nodes.size(), m.g.nodes.size());
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    EXPECT_EQ(back->nodes[i].op, m.g.nodes[i].op);
    EXPECT_EQ(std::memcmp(back->nodes[i].iparams, m.g.nodes[i].iparams, sizeof(Node::iparams)), 0);
    EXPECT_EQ(std::memcmp(back->nodes[i].fparams, m.g.nodes[i].fparams, sizeof(Node::fparams)), 0);
  }
  EXPECT_TRUE(graph_validate(*back).is_ok());
}

TEST(OpMoe, TopKRefusesABadKOrTooManyExperts) {
  for (int32_t k : {0, -1, 9}) {
    MoeGraph m;
    m.node_of(Op::kMoeTopK).iparams[0] = k;
    expect_refused(m.g, "k = " + std::to_string(k) + " outside [1, n_expert = 8]");
  }
  MoeGraph m;
  reshape(m.g.tensors[m.ids], 3, 3);  // out is not [k, r]
  expect_refused(m.g, "out must be contiguous i32 [k = 2, 3]");

  // 513 experts: past kMaxExperts, named with the limit.
  GraphBuilder b;
  const int32_t x = b.external(make_tensor(1, 0, DType::kF32, kMaxExperts + 1, 2));
  b.moe_top_k(x, 4);
  b.plan();
  expect_refused(b.finish(2), "n_expert = 513 past the limit 512");
}

TEST(OpMoe, GateRefusesBadModesScalesAndShapes) {
  {
    MoeGraph m;
    m.node_of(Op::kMoeGate).iparams[0] = 3;
    expect_refused(m.g, "gating = 3 is not 0 (softmax)");
  }
  {
    MoeGraph m;
    m.node_of(Op::kMoeGate).iparams[1] = 2;
    expect_refused(m.g, "normalise = 2 is not 0 or 1");
  }
  {
    MoeGraph m;
    m.node_of(Op::kMoeGate).fparams[0] = std::numeric_limits<float>::infinity();
    expect_refused(m.g, "the scale must be finite");
  }
  {
    MoeGraph m;
    reshape(m.g.tensors[m.weights], 3, 3);
    expect_refused(m.g, "out must be f32 [k, r] as the ids");
  }
  {
    MoeGraph m;
    m.g.tensors.push_back(make_tensor(3, 0, DType::kF32, 8, 4));  // logits of 4 rows, ids of 3
    m.node_of(Op::kMoeGate).src[0] = static_cast<int32_t>(m.g.tensors.size() - 1);
    expect_refused(m.g, "ids must be contiguous i32 [k, 4]");
  }
}

TEST(OpMoe, MulMatIdRefusesShapesThatDoNotFit) {
  {
    MoeGraph m;  // gate's input has 64 rows; the weights take 96
    Node& n = m.node_of(Op::kMulMatId);
    reshape(m.g.tensors[n.src[0]], 96, 32, 8);
    expect_refused(m.g, "x must be f32 [k, 1 or n_used, r]");
  }
  {
    MoeGraph m;
    reshape(m.g.tensors[m.up], 32, 3, 3);
    expect_refused(m.g, "out must be f32 [n, n_used, r]");
  }
  {
    MoeGraph m;  // an x of 3 slots for 2 used experts
    Node& n = m.node_of(Op::kMulMatId);
    m.g.tensors[n.src[1]].ne[1] = 3;
    expect_refused(m.g, "x must be f32 [k, 1 or n_used, r]");
  }
  {
    MoeGraph m;  // more slots than experts
    Node& n = m.node_of(Op::kMulMatId);
    m.g.tensors[n.src[0]].ne[2] = 1;
    expect_refused(m.g, "k <= n_expert = 1");
  }
  {
    MoeGraph m;
    Node& n = m.node_of(Op::kMulMatId);
    TensorRef& w = m.g.tensors[n.src[0]];
    w.ne[2] = kMaxExperts + 1;
    expect_refused(m.g, "n_expert <= 512");
  }
  {
    MoeGraph m;
    Node& n = m.node_of(Op::kMulMatId);
    m.g.tensors[n.src[0]].nb[2] = m.g.tensors[n.src[0]].nb[1];
    expect_refused(m.g, "expert matrices overlap");
  }
  {
    MoeGraph m;
    Node& n = m.node_of(Op::kMulMatId);
    m.g.tensors[n.src[0]].dtype = DType::kQ8_K;  // an activation format, no matmul kernel
    m.g.tensors[n.src[0]].nb[0] = dtype_block_bytes(DType::kQ8_K);
    const Status s = graph_validate(m.g);
    EXPECT_FALSE(s.is_ok());
  }
}

TEST(OpMoe, SumRefusesWeightsOrOutputsOfAnotherShape) {
  {
    MoeGraph m;
    Node& n = m.node_of(Op::kMoeSum);
    m.g.tensors.push_back(make_tensor(3, 0, DType::kF32, 3, 3));
    n.src[1] = static_cast<int32_t>(m.g.tensors.size() - 1);
    expect_refused(m.g, "weights must be f32 [n_used, r]");
  }
  {
    MoeGraph m;
    reshape(m.g.tensors[m.out], 32, 3);
    expect_refused(m.g, "out must be f32 [n, r]");
  }
}

}  // namespace
}  // namespace strata
