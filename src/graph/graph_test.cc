#include "graph/graph.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "graph/builder.h"
#include "graph/op_table.h"

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

// A q8_0 KV cache is read a head at a time, in whole 32-value blocks: attention over one whose
// heads are 48 values (cell-major: its rows of 2 heads are 96 values, whole blocks) is refused,
// and so are caches whose rows are not whole blocks, while heads of 32 pass.
TEST(GraphValidate, AQ8_0CacheNeedsHeadsOfWholeBlocks) {
  const auto attention = [](int64_t hd, int64_t kv_heads, bool head_major) {
    Graph g;
    const int64_t row = head_major ? hd : hd * kv_heads;
    const int64_t planes = head_major ? kv_heads : 1;
    g.tensors = {make_tensor(1, 0, DType::kF32, hd, 4, 3),
                 make_tensor(2, 0, DType::kQ8_0, row, 16, planes),
                 make_tensor(3, 0, DType::kQ8_0, row, 16, planes),
                 make_tensor(4, 0, DType::kI32, 8, 1),
                 make_tensor(5, 0, DType::kI32, 2, 3),
                 make_tensor(6, 0, DType::kF32, hd, 4, 3)};
    Node n;
    n.op = Op::kAttention;
    for (int s = 0; s < 5; ++s) n.src[s] = s;
    n.out = 5;
    n.iparams[0] = static_cast<int32_t>(kv_heads);
    n.fparams[0] = 0.125f;
    g.nodes = {n};
    return graph_validate(g);
  };
  EXPECT_TRUE(attention(32, 2, false).is_ok()) << attention(32, 2, false).message();
  EXPECT_TRUE(attention(64, 2, true).is_ok()) << attention(64, 2, true).message();
  const Status s = attention(48, 2, false);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("q8_0 with hd a multiple of 32"), std::string::npos) << s.message();
  // A cache whose rows would put the blocks' f16 scales at odd addresses.
  Graph odd;
  odd.tensors = {make_tensor(1, 0, DType::kQ8_0, 64, 16, 2), make_tensor(2, 0, DType::kF32, 128, 3),
                 make_tensor(3, 0, DType::kI32, 3)};
  odd.tensors[0].nb[1] = 69;
  odd.tensors[0].nb[2] = 69 * 16;
  Node set;
  set.op = Op::kSetRows;
  set.src[0] = 0;
  set.src[1] = 1;
  set.src[2] = 2;
  set.out = 0;
  odd.nodes = {set};
  const Status misaligned = graph_validate(odd);
  EXPECT_FALSE(misaligned.is_ok());
  EXPECT_NE(misaligned.message().find("set_rows"), std::string::npos) << misaligned.message();
  odd.tensors[0].nb[1] = 68;
  odd.tensors[0].nb[2] = 68 * 16;
  EXPECT_TRUE(graph_validate(odd).is_ok()) << graph_validate(odd).message();

  // Head-major heads of 48: rows that are not whole blocks, refused for any op.
  TensorRef cache = make_tensor(1, 0, DType::kQ8_0, 64, 16, 2);
  cache.ne[0] = 48;
  const Status rows = graph_validate(one_copy(cache, cache));
  EXPECT_FALSE(rows.is_ok());
}

TEST(GraphValidate, NamesTheNodeAndOp) {
  const TensorRef a = make_tensor(1, 0, DType::kF32, 8, 4);
  const TensorRef b = make_tensor(1, 0, DType::kF32, 9, 4);
  const Status s = graph_validate(one_copy(a, b));
  EXPECT_NE(s.message().find("node 0 (copy)"), std::string::npos) << s.message();
}

// A device layout's kernels address a group as 16 packed rows: get_rows, mul_mat and mul_mat_id
// of a layout whose rows are wider are refused (a peer's graph may name them), as their base
// type's are not.
TEST(GraphValidate, DeviceLayoutWeightsMustHavePackedRows) {
  for (Op op : {Op::kGetRows, Op::kMulMat, Op::kMulMatId}) {
    for (DType t : {DType::kQ4_K_R16, DType::kQ4_K}) {
      for (bool packed : {true, false}) {
        TensorRef w = make_tensor(1, 0, t, 256, 32, op == Op::kMulMatId ? 2 : 1);
        if (!packed) {
          w.nb[1] += 64;
          w.nb[2] = w.nb[3] = w.nb[1] * 32;
        }
        Graph g;
        Node n;
        n.op = op;
        n.src[0] = 0;
        n.src[1] = 1;
        n.out = 2;
        g.tensors = {w};
        if (op == Op::kGetRows) {
          g.tensors.push_back(make_tensor(2, 0, DType::kI32, 2));
          g.tensors.push_back(make_tensor(2, 64, DType::kF32, 256, 2));
        } else if (op == Op::kMulMat) {
          g.tensors.push_back(make_tensor(2, 0, DType::kF32, 256, 2));
          g.tensors.push_back(make_tensor(2, 4096, DType::kF32, 32, 2));
        } else {
          g.tensors.push_back(make_tensor(2, 0, DType::kF32, 256, 1, 2));
          g.tensors.push_back(make_tensor(2, 4096, DType::kF32, 32, 1, 2));
          g.tensors.push_back(make_tensor(2, 8192, DType::kI32, 1, 2));
          n.src[2] = 3;
        }
        g.nodes = {n};
        const Status s = graph_validate(g);
        const std::string what = std::string(op_name(op)) + " " + std::string(dtype_name(t)) +
                                 (packed ? " packed" : " wide rows");
        if (packed || t == DType::kQ4_K) {
          EXPECT_TRUE(s.is_ok()) << what << ": " << s.message();
        } else {
          EXPECT_FALSE(s.is_ok()) << what;
          EXPECT_NE(s.message().find("device layout's rows must be packed"), std::string::npos)
              << what << ": " << s.message();
        }
      }
    }
  }
}

// The table answers for exactly its rows: a value without a row (from a peer) is no op.
TEST(OpTable, LooksUpEveryRowByValueAndNothingElse) {
  std::set<std::string> names;
  size_t found = 0;
  for (uint32_t id = 0; id < kOpIdLimit + 8; ++id) {
    const OpInfo* info = op_info(id);
    if (info == nullptr) continue;
    ++found;
    EXPECT_EQ(static_cast<uint32_t>(info->op), id);
    EXPECT_TRUE(names.insert(info->name).second) << "two ops named " << info->name;
    EXPECT_STREQ(op_name(info->op), info->name);
  }
  EXPECT_EQ(found, op_table().size());
  EXPECT_EQ(op_set_all().count(), op_table().size());
  EXPECT_EQ(op_info(0), nullptr);
  EXPECT_STREQ(op_name(static_cast<Op>(200)), "unknown");
}

// Optional inputs come from the table: rms_norm may omit its weight, add may not omit b.
TEST(GraphValidate, OptionalInputsFollowTheTable) {
  const TensorRef t = make_tensor(1, 0, DType::kF32, 8, 4);
  Graph g;
  g.tensors = {t, t};
  Node n;
  n.op = Op::kRmsNorm;
  n.src[0] = 0;
  n.out = 1;
  n.fparams[0] = 1e-5f;
  g.nodes = {n};
  EXPECT_TRUE(graph_validate(g).is_ok()) << graph_validate(g).message();
  g.nodes[0].op = Op::kAdd;
  Status s = graph_validate(g);
  EXPECT_NE(s.message().find("node 0 (add): src1 index -1"), std::string::npos) << s.message();
  g.nodes[0].op = Op::kCopy;
  g.nodes[0].src[1] = 0;
  s = graph_validate(g);
  EXPECT_NE(s.message().find("src1 given to an op of 1 inputs"), std::string::npos) << s.message();
  g.nodes[0].op = static_cast<Op>(77);
  s = graph_validate(g);
  EXPECT_NE(s.message().find("unknown op 77"), std::string::npos) << s.message();
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
