// The CPU executor's mixture-of-experts rows: a whole MoE feed-forward built with the graph
// builder gives each token the same bits alone and in a batch, on any thread count; an expert
// id outside the layer (ids may come from a peer) fails the step, naming the op, the token, the
// slot and the id, before anything is read or written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/alloc_count_testing.h"
#include "core/quant.h"
#include "core/rng.h"
#include "graph/builder.h"

namespace strata {
namespace {

constexpr uint64_t kHost = 1;     // inputs, weights and outputs
constexpr uint64_t kScratch = 2;  // the builder's intermediates

class Buffers : public CpuBufferTable {
 public:
  uint8_t* resolve(uint64_t handle, uint64_t* size) const override {
    std::vector<uint8_t>* b = handle == kHost ? &host : handle == kScratch ? &scratch : nullptr;
    if (b == nullptr) return nullptr;
    *size = b->size();
    return b->data();
  }
  uint64_t generation() const override { return 0; }  // each graph runs once
  // A tensor at the end of the host buffer (64-byte aligned), random rows of its dtype.
  TensorRef add(DType dtype, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
    const TensorRef t = make_tensor(kHost, (host.size() + 63) / 64 * 64, dtype, ne0, ne1, ne2);
    host.resize(t.offset + t.extent_bytes());
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      for (float& v : row) v = 2 * rng_.uniform() - 1;
      if (dtype == DType::kI32) continue;
      quantize_row(dtype, row.data(), &host[t.offset + r * t.nb[1]], ne0);
    }
    return t;
  }
  mutable std::vector<uint8_t> host;
  mutable std::vector<uint8_t> scratch;

 private:
  Rng rng_{23};
};

// A qwen3moe-style feed-forward of `tokens` tokens: router, top-8 of 16 experts with the
// softmax normalised, gate/up (one input per token), swiglu, down (one input per slot), sum.
struct MoeFfn {
  static constexpr int64_t kEmbd = 256, kFf = 256, kExperts = 16, kUsed = 4;
  Buffers buf;
  Graph graph;
  TensorRef h, out;

  // The weights come first from a fixed seed: the same for every token count.
  MoeFfn(int64_t tokens, DType dtype) {
    const TensorRef router = buf.add(DType::kF32, kEmbd, kExperts);
    const TensorRef gate_w = buf.add(dtype, kEmbd, kFf, kExperts);
    const TensorRef up_w = buf.add(dtype, kEmbd, kFf, kExperts);
    const TensorRef down_w = buf.add(dtype, kFf, kEmbd, kExperts);
    h = buf.add(DType::kF32, kEmbd, tokens);
    out = buf.add(DType::kF32, kEmbd, tokens);
    GraphBuilder b;
    const int32_t hi = b.external(h);
    const int32_t logits =
        b.node(Op::kMulMat, b.scratch(DType::kF32, kExperts, tokens), {b.external(router), hi});
    const int32_t ids = b.moe_top_k(logits, kUsed);
    const int32_t weights = b.moe_gate(logits, ids, MoeGating::kSoftmax, true, 1.0f);
    const uint64_t row = kEmbd * sizeof(float);
    const int32_t h3 = b.view(hi, kEmbd, 1, tokens, row, row);
    const int32_t gate = b.mul_mat_id(b.external(gate_w), h3, ids);
    const int32_t up = b.mul_mat_id(b.external(up_w), h3, ids);
    // As the engine builds it: the activation in place over [kFf, kUsed * tokens] views, the
    // down experts reading it as [kFf, kUsed, tokens].
    const uint64_t ff_row = kFf * sizeof(float);
    const int32_t gate_rows = b.view(gate, kFf, kUsed * tokens, 1, ff_row, ff_row * kUsed * tokens);
    const int32_t up_rows = b.view(up, kFf, kUsed * tokens, 1, ff_row, ff_row * kUsed * tokens);
    const int32_t act = b.node(Op::kSwiglu, gate_rows, {gate_rows, up_rows});
    const int32_t act_slots = b.view(act, kFf, kUsed, tokens, ff_row, ff_row * kUsed);
    const int32_t down = b.mul_mat_id(b.external(down_w), act_slots, ids);
    const int32_t sum = b.moe_sum(down, weights);
    b.node(Op::kCopy, b.external(out), {sum});
    buf.scratch.resize(b.plan());
    graph = b.finish(kScratch);
  }
  std::vector<float> run(int threads) {
    ThreadPool pool(threads);
    const Status s = cpu_graph_compute(graph, buf, pool);
    EXPECT_TRUE(s.is_ok()) << s.message();
    std::vector<float> y(static_cast<size_t>(out.n_elements()));
    std::memcpy(y.data(), buf.host.data() + out.offset, y.size() * sizeof(float));
    return y;
  }
};

TEST(CpuExecMoe, ATokensOutputIsTheSameAloneInABatchAndOnAnyThreadCount) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K, DType::kF16}) {
    const int64_t tokens = 7;
    MoeFfn batch(tokens, dtype);
    const std::vector<float> one_thread = batch.run(1);
    EXPECT_EQ(batch.run(3), one_thread) << dtype_name(dtype);
    float sum = 0.0f;
    for (float v : one_thread) sum += v * v;
    EXPECT_GT(sum, 0.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      MoeFfn alone(1, dtype);
      std::memcpy(alone.buf.host.data() + alone.h.offset,
                  batch.buf.host.data() + batch.h.offset + t * batch.h.nb[1], batch.h.nb[1]);
      const std::vector<float> y = alone.run(2);
      EXPECT_EQ(std::memcmp(y.data(), one_thread.data() + t * MoeFfn::kEmbd,
                            MoeFfn::kEmbd * sizeof(float)),
                0)
          << dtype_name(dtype) << " token " << t;
    }
  }
}

// A one-token step of the feed-forward (router, selection, both expert passes, the weighted sum)
// touches no heap after its first run, on two threads.
TEST(CpuExecMoe, AOneTokenStepAllocatesNothing) {
  if (!testing::heap_allocations_counted()) GTEST_SKIP() << "a sanitizer build counts none";
  const MoeFfn ffn(1, DType::kQ4_K);
  Result<CpuPreparedGraph> prepared = cpu_graph_prepare(ffn.graph, ffn.buf);
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
  ThreadPool pool(2);
  ASSERT_TRUE(cpu_graph_run(*prepared, pool).is_ok());
  const uint64_t barriers = pool.counts().barriers;
  const uint64_t before = testing::heap_allocations();
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(cpu_graph_run(*prepared, pool).is_ok());
  EXPECT_EQ(testing::heap_allocations() - before, 0u);
  EXPECT_GT(pool.counts().barriers, barriers) << "the expert passes were split";
}

// The gated activation before the down experts runs in their gathering pass (each pair's column
// made just before it is quantised): one step of the executor, whose bytes, intermediates
// included, are those of the nodes run one at a time, on any thread count.
TEST(CpuExecMoe, TheGatedActivationRunsInTheDownExpertsPassWithTheSameBytes) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K}) {
    for (int64_t tokens : {1, 7}) {
      const MoeFfn ffn(tokens, dtype);
      Result<CpuPreparedGraph> prepared = cpu_graph_prepare(ffn.graph, ffn.buf);
      ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
      int fused = 0;
      for (const CpuPreparedGraph::Step& step : prepared->steps) {
        if (ffn.graph.nodes[step.begin].op != Op::kSwiglu) continue;
        EXPECT_EQ(step.kind, CpuPreparedGraph::Step::Kind::kMatmulIds);
        EXPECT_EQ(step.end - step.begin, 2u);
        EXPECT_GT(step.producer, 0);
        ++fused;
      }
      EXPECT_EQ(fused, 1) << dtype_name(dtype) << ", " << tokens << " tokens";

      MoeFfn one_by_one = ffn;
      ThreadPool single(1);
      for (const Node& n : ffn.graph.nodes) {
        Graph g = ffn.graph;
        g.nodes = {n};
        ASSERT_TRUE(cpu_graph_compute(g, one_by_one.buf, single).is_ok());
      }
      for (int threads : {1, 2, 3}) {
        MoeFfn whole = ffn;
        whole.run(threads);
        EXPECT_TRUE(whole.buf.host == one_by_one.buf.host)
            << dtype_name(dtype) << ", " << tokens << " tokens, " << threads << " threads";
        EXPECT_TRUE(whole.buf.scratch == one_by_one.buf.scratch)
            << dtype_name(dtype) << ", " << tokens << " tokens, " << threads << " threads";
      }
    }
  }
}

// One node with ids from the host buffer: a bad id fails it with the token, slot and id.
TEST(CpuExecMoe, AnExpertIdOutsideTheLayerFailsTheStepAndWritesNothing) {
  for (int32_t bad : {8, -1, 1 << 30}) {
    for (Op op : {Op::kMulMatId, Op::kMoeGate}) {
      Buffers buf;
      const TensorRef w = buf.add(DType::kQ8_0, 64, 16, 8);
      const TensorRef logits = buf.add(DType::kF32, 8, 3);
      const TensorRef x = buf.add(DType::kF32, 64, 1, 3);
      const TensorRef ids = buf.add(DType::kI32, 2, 3);
      const std::vector<int32_t> v = {0, 7, 3, 3, bad, 5};  // token 2, slot 0
      std::memcpy(buf.host.data() + ids.offset, v.data(), v.size() * 4);
      const TensorRef out =
          op == Op::kMulMatId ? buf.add(DType::kF32, 16, 2, 3) : buf.add(DType::kF32, 2, 3);
      std::memset(buf.host.data() + out.offset, 0x5a, out.extent_bytes());
      const std::vector<uint8_t> before = buf.host;
      Graph g;
      g.tensors = {op == Op::kMulMatId ? w : logits, x, ids, out};
      Node n;
      n.op = op;
      n.src[0] = 0;
      if (op == Op::kMulMatId) {
        n.src[1] = 1;
        n.src[2] = 2;
      } else {
        n.src[1] = 2;
      }
      n.out = 3;
      n.fparams[0] = 1.0f;
      g.nodes = {n};
      ASSERT_TRUE(graph_validate(g).is_ok()) << graph_validate(g).message();
      ThreadPool pool(2);
      const Status s = cpu_graph_compute(g, buf, pool);
      ASSERT_FALSE(s.is_ok());
      EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange);
      const std::string want = "node 0 (" + std::string(op_name(op)) +
                               "): token 2, slot 0: expert id " + std::to_string(bad) +
                               " outside [0, 8)";
      EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
      EXPECT_TRUE(buf.host == before) << "the failed node wrote its output";
    }
  }
}

// A bad id in a step whose gated activation runs in the experts' pass: the step fails naming the
// mul_mat_id node, before the activation or any matmul writes.
TEST(CpuExecMoe, ABadExpertIdFailsTheFusedStepBeforeTheActivationWrites) {
  Buffers buf;
  const TensorRef w = buf.add(DType::kQ8_0, 64, 16, 8);
  const TensorRef gate = buf.add(DType::kF32, 64, 2, 3);
  const TensorRef up = buf.add(DType::kF32, 64, 2, 3);
  const TensorRef act = buf.add(DType::kF32, 64, 2, 3);
  const TensorRef ids = buf.add(DType::kI32, 2, 3);
  const std::vector<int32_t> v = {0, 7, 3, 3, 5, 8};  // token 2, slot 1
  std::memcpy(buf.host.data() + ids.offset, v.data(), v.size() * 4);
  const TensorRef out = buf.add(DType::kF32, 16, 2, 3);
  const std::vector<uint8_t> before = buf.host;
  Graph g;
  g.tensors = {gate, up, act, w, ids, out};
  const auto node = [](Op op, std::initializer_list<int32_t> src, int32_t out) {
    Node n;
    n.op = op;
    std::copy(src.begin(), src.end(), n.src);
    n.out = out;
    return n;
  };
  g.nodes = {node(Op::kSwiglu, {0, 1}, 2), node(Op::kMulMatId, {3, 2, 4}, 5)};
  ASSERT_TRUE(graph_validate(g).is_ok()) << graph_validate(g).message();
  Result<CpuPreparedGraph> prepared = cpu_graph_prepare(g, buf);
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
  ASSERT_EQ(prepared->steps.size(), 1u) << "the activation is not in the experts' step";
  ThreadPool pool(2);
  const Status s = cpu_graph_run(*prepared, pool);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(s.message().find("node 1 (mul_mat_id): token 2, slot 1: expert id 8 outside [0, 8)"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(buf.host == before) << "the failed step wrote";
}

}  // namespace
}  // namespace strata
