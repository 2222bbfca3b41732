// The rows gpt-oss added to the op table (attention_sink, swiglu_oai, add_id): a well-formed node
// validates, and what a peer could send wrong is refused by graph_validate with the field named,
// before any kernel runs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "graph/graph_testing.h"
#include "graph/op_table.h"

namespace strata {
namespace {

using testing::sink_attention_graph;

void expect_gptoss_refused(const Graph& g, const std::string& what) {
  const Status s = graph_validate(g);
  ASSERT_FALSE(s.is_ok()) << "accepted; expected: " << what;
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(OpGptOss, AttentionSinkNeedsOneSinkPerQueryHead) {
  EXPECT_TRUE(graph_validate(sink_attention_graph()).is_ok());
  {
    Graph g = sink_attention_graph();
    g.tensors[5] = make_tensor(1, 320, DType::kF32, 3);
    expect_gptoss_refused(g, "sinks must be contiguous f32 [n_head = 2]");
  }
  {
    Graph g = sink_attention_graph();
    g.tensors[5] = make_tensor(1, 320, DType::kF16, 2);
    expect_gptoss_refused(g, "sinks must be contiguous f32");
  }
  {
    Graph g = sink_attention_graph();
    g.nodes[0].src[5] = -1;
    expect_gptoss_refused(g, "src5");
  }
  {
    Graph g = sink_attention_graph();  // attention_ext's own checks still apply
    g.nodes[0].iparams[1] = -1;
    expect_gptoss_refused(g, "window");
  }
}

// gate, up and out F32 [8, 3].
Graph swiglu_oai_graph(float alpha, float limit) {
  Graph g;
  for (uint64_t i = 0; i < 3; ++i) g.tensors.push_back(make_tensor(1, 96 * i, DType::kF32, 8, 3));
  Node n;
  n.op = Op::kSwigluOai;
  n.src[0] = 0;
  n.src[1] = 1;
  n.out = 2;
  n.fparams[0] = alpha;
  n.fparams[1] = limit;
  g.nodes.push_back(n);
  return g;
}

TEST(OpGptOss, SwigluOaiNeedsAPositiveLimitAndAFiniteAlpha) {
  EXPECT_TRUE(graph_validate(swiglu_oai_graph(1.702f, 7.0f)).is_ok());
  expect_gptoss_refused(swiglu_oai_graph(1.702f, 0.0f), "limit");
  expect_gptoss_refused(swiglu_oai_graph(1.702f, INFINITY), "limit");
  expect_gptoss_refused(swiglu_oai_graph(NAN, 7.0f), "alpha");
  Graph g = swiglu_oai_graph(1.702f, 7.0f);
  g.tensors[1] = make_tensor(1, 96, DType::kF32, 8, 1);
  expect_gptoss_refused(g, "operands must be f32 [n, r]");
}

// x F32 [16, 2, 3] (out in place), biases F32 [16, 4], ids I32 [2, 3].
Graph add_id_graph() {
  Graph g;
  g.tensors.push_back(make_tensor(1, 0, DType::kF32, 16, 2, 3));
  g.tensors.push_back(make_tensor(1, 384, DType::kF32, 16, 4));
  g.tensors.push_back(make_tensor(1, 640, DType::kI32, 2, 3));
  Node n;
  n.op = Op::kAddId;
  n.src[0] = 0;
  n.src[1] = 1;
  n.src[2] = 2;
  n.out = 0;
  g.nodes.push_back(n);
  return g;
}

TEST(OpGptOss, AddIdRefusesBiasesAndIdsThatDoNotFit) {
  EXPECT_TRUE(graph_validate(add_id_graph()).is_ok());
  {
    Graph g = add_id_graph();
    g.tensors[1] = make_tensor(1, 384, DType::kF32, 8, 4);
    expect_gptoss_refused(g, "biases must be f32 [n, n_expert]");
  }
  {
    Graph g = add_id_graph();
    g.tensors[1] = make_tensor(1, 384, DType::kQ8_0, 32, 4);
    g.tensors[0] = make_tensor(1, 0, DType::kF32, 32, 2, 3);
    expect_gptoss_refused(g, "biases must be f32");
  }
  {
    Graph g = add_id_graph();
    g.tensors[2] = make_tensor(1, 640, DType::kI32, 3, 3);
    expect_gptoss_refused(g, "ids must be i32 [n_used = 2, r]");
  }
  {
    Graph g = add_id_graph();
    g.tensors[2] = make_tensor(1, 640, DType::kI32, 2, 2);
    expect_gptoss_refused(g, "ids must be contiguous i32 [k, 3]");
  }
  {
    Graph g = add_id_graph();
    g.tensors.push_back(make_tensor(1, 800, DType::kF32, 16, 2, 2));
    g.nodes[0].out = 3;
    expect_gptoss_refused(g, "x and out must be f32 [n, n_used, r] alike");
  }
}

}  // namespace
}  // namespace strata
