#include "graph/serialize.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "graph/graph_testing.h"

namespace strata {
namespace {

// out = a + b over 8 floats in buffer 7.
Graph add_graph() {
  Graph g;
  g.tensors.push_back(make_tensor(7, 0, DType::kF32, 8));
  g.tensors.push_back(make_tensor(7, 32, DType::kF32, 8));
  g.tensors.push_back(make_tensor(7, 64, DType::kF32, 8));
  Node n;
  n.op = Op::kAdd;
  n.src[0] = 0;
  n.src[1] = 1;
  n.out = 2;
  n.fparams[3] = 1.5f;
  n.iparams[2] = -3;
  g.nodes.push_back(n);
  return g;
}

// Attention with sinks (the one op of six inputs), with a window and a soft-cap, in buffer 7.
Graph sink_graph() {
  Graph g = testing::sink_attention_graph(7);
  g.nodes[0].iparams[1] = 3;
  g.nodes[0].fparams[1] = 1.25f;
  return g;
}

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }

TEST(GraphSerialize, RoundTrip) {
  const Graph g = add_graph();
  const std::vector<uint8_t> bytes = graph_serialize(g);
  ASSERT_EQ(bytes.size(), kGraphHeaderBytes + 3 * kGraphTensorBytes + graph_node_bytes(1));
  Result<Graph> back = graph_deserialize(bytes);
  ASSERT_TRUE(back) << back.status().message();
  ASSERT_EQ(back->tensors.size(), 3u);
  ASSERT_EQ(back->nodes.size(), 1u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->tensors[i].buffer, g.tensors[i].buffer);
    EXPECT_EQ(back->tensors[i].offset, g.tensors[i].offset);
    EXPECT_EQ(back->tensors[i].dtype, g.tensors[i].dtype);
    for (int d = 0; d < kMaxDims; ++d) {
      EXPECT_EQ(back->tensors[i].ne[d], g.tensors[i].ne[d]);
      EXPECT_EQ(back->tensors[i].nb[d], g.tensors[i].nb[d]);
    }
  }
  const Node& n = back->nodes[0];
  EXPECT_EQ(n.op, Op::kAdd);
  EXPECT_EQ(n.src[0], 0);
  EXPECT_EQ(n.src[1], 1);
  EXPECT_EQ(n.src[2], -1);
  EXPECT_EQ(n.out, 2);
  EXPECT_EQ(n.iparams[2], -3);
  EXPECT_EQ(n.fparams[3], 1.5f);
  // Serialising the decoded graph gives the same bytes.
  EXPECT_EQ(graph_serialize(*back), bytes);
}

TEST(GraphSerialize, LayoutIsLittleEndianAtDocumentedOffsets) {
  const std::vector<uint8_t> b = graph_serialize(add_graph());
  EXPECT_EQ(b[0], 'S');
  EXPECT_EQ(b[1], 'G');
  EXPECT_EQ(b[2], 'R');
  EXPECT_EQ(b[3], '1');
  EXPECT_EQ(b[8], 3);                            // n_tensors
  EXPECT_EQ(b[12], 1);                           // n_nodes
  EXPECT_EQ(b[16 + kGraphTensorBytes + 8], 32);  // tensor 1 offset
  const size_t node = 16 + 3 * kGraphTensorBytes;
  EXPECT_EQ(b[node], static_cast<uint8_t>(Op::kAdd));  // op
  EXPECT_EQ(b[node + 24], 2);                          // out
}

// A graph of five-input nodes goes as version 1, which every worker reads; one whose node uses
// a sixth input as version 2, 64-byte nodes with the later fields 4 bytes further on.
TEST(GraphSerialize, VersionOneUnlessANodeUsesItsSixthInput) {
  const std::vector<uint8_t> v1 = graph_serialize(add_graph());
  EXPECT_EQ(v1[4], 1);
  const std::vector<uint8_t> b = graph_serialize(sink_graph());
  ASSERT_EQ(b.size(), kGraphHeaderBytes + 7 * kGraphTensorBytes + graph_node_bytes(2));
  EXPECT_EQ(b[4], 2);  // version
  const size_t node = 16 + 7 * kGraphTensorBytes;
  EXPECT_EQ(b[node], static_cast<uint8_t>(Op::kAttentionSink));
  EXPECT_EQ(b[node + 4 + 4 * 5], 5);  // src[5]
  EXPECT_EQ(b[node + 28], 6);         // out
  EXPECT_EQ(b[node + 32], 2);         // iparams[0]
  EXPECT_EQ(b[node + 36], 3);         // iparams[1]
  float f;
  std::memcpy(&f, &b[node + 52], 4);  // fparams[1]
  EXPECT_EQ(f, 1.25f);
  Result<Graph> back = graph_deserialize(b);
  ASSERT_TRUE(back) << back.status().message();
  const Node& n = back->nodes[0];
  for (int s = 0; s < 6; ++s) EXPECT_EQ(n.src[s], s);
  EXPECT_EQ(n.out, 6);
  EXPECT_EQ(n.iparams[1], 3);
  EXPECT_EQ(n.fparams[0], 0.5f);
  EXPECT_EQ(graph_serialize(*back), b);
}

// A version-2 graph of five-input nodes (a newer peer may send one) reads as its version-1 twin.
TEST(GraphSerialize, ReadsVersionTwoOfFiveInputNodes) {
  const std::vector<uint8_t> v1 = graph_serialize(add_graph());
  const size_t node = 16 + 3 * kGraphTensorBytes;
  std::vector<uint8_t> v2(v1.begin(), v1.begin() + node);
  put32(v2, 4, 2);
  v2.insert(v2.end(), v1.begin() + node, v1.begin() + node + 24);  // op, src[0..5)
  v2.insert(v2.end(), {0xff, 0xff, 0xff, 0xff});                   // src[5] = -1
  v2.insert(v2.end(), v1.begin() + node + 24, v1.end());
  Result<Graph> back = graph_deserialize(v2);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(graph_serialize(*back), v1);
  // The sixth input of an op of two is refused, as any extra input is.
  put32(v2, node + 24, 0);
  Result<Graph> extra = graph_deserialize(v2);
  ASSERT_FALSE(extra);
  EXPECT_NE(extra.status().message().find("src5"), std::string::npos) << extra.status().message();
}

TEST(GraphSerialize, EmptyGraph) {
  Result<Graph> g = graph_deserialize(graph_serialize(Graph{}));
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->nodes.empty());
}

TEST(GraphSerialize, RejectsMalformed) {
  const std::vector<uint8_t> good = graph_serialize(add_graph());
  const size_t node = 16 + 3 * kGraphTensorBytes;
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> edit;
    const char* expect;  // a piece of the message
  };
  const std::vector<Case> cases = {
      {"truncated", [](auto& b) { b.resize(b.size() - 1); }, "need"},
      {"too short for header", [](auto& b) { b.resize(10); }, "header"},
      {"trailing byte", [](auto& b) { b.push_back(0); }, "need"},
      {"bad magic", [](auto& b) { b[0] = 'X'; }, "magic"},
      {"bad version", [](auto& b) { put32(b, 4, 9); }, "version"},
      {"too many tensors", [](auto& b) { put32(b, 8, kMaxGraphTensors + 1); }, "n_tensors"},
      {"too many nodes", [](auto& b) { put32(b, 12, 0xffffffffu); }, "n_nodes"},
      {"counts disagree with size", [](auto& b) { put32(b, 8, 4); }, "need"},
      {"unknown dtype", [](auto& b) { put32(b, 16 + 16, 4242); }, "dtype"},
      {"reserved", [](auto& b) { put32(b, 16 + 20, 1); }, "reserved"},
      {"unknown op", [node](auto& b) { put32(b, node, 999); }, "op"},
      {"dangling src", [node](auto& b) { put32(b, node + 4, 3); }, "src[0]"},
      {"negative src", [node](auto& b) { put32(b, node + 8, static_cast<uint32_t>(-2)); },
       "src[1]"},
      {"dangling out", [node](auto& b) { put32(b, node + 24, 1000); }, "out"},
      {"missing required src", [node](auto& b) { put32(b, node + 8, static_cast<uint32_t>(-1)); },
       "src1"},
      {"extra src", [node](auto& b) { put32(b, node + 12, 0); }, "src2"},
      {"shape mismatch", [](auto& b) { put32(b, 16 + 2 * kGraphTensorBytes + 24, 16); }, "add"},
      {"zero dim", [](auto& b) { put32(b, 16 + 24, 0); }, "ne[0]"},
      {"element count overflows",
       [](auto& b) {
         for (int d = 0; d < 4; ++d) put64(b, 16 + 24 + 8 * d, uint64_t{1} << 32);
       },
       "2^40"},
      // 2^17 + 1 rows 2^47 bytes apart: the extent passes 2^64 and would wrap to a small one.
      {"extent wraps",
       [](auto& b) {
         put64(b, 16 + 32, (uint64_t{1} << 17) + 1);
         put64(b, 16 + 64, uint64_t{1} << 47);
       },
       "wraps"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = good;
    c.edit(b);
    Result<Graph> g = graph_deserialize(b);
    ASSERT_FALSE(g) << c.name;
    EXPECT_NE(g.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << g.status().message();
  }
}

}  // namespace
}  // namespace strata
