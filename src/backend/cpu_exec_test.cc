// The CPU executor runs matmuls that share their input (and the op that produces it) as one
// pass: the bytes a graph leaves must be those of its nodes run one at a time, whatever the
// thread count, also when a node writes what another of the run reads.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cpu_test_util.h"
#include "core/alloc_count_testing.h"
#include "core/kernel_test_util.h"
#include "core/quant.h"
#include "core/rng.h"

namespace strata {
namespace {

constexpr uint64_t kBuffer = 1;

// A graph over one host buffer, with the bytes it starts from.
class HostGraph : public testing::OneHostBuffer<kBuffer> {
 public:
  // A new tensor at the end of the buffer (64-byte aligned), filled from the seed: uniform in
  // [-1, 1) converted to its dtype.
  int32_t tensor(DType dtype, int64_t ne0, int64_t ne1 = 1) {
    return place(make_tensor(kBuffer, (bytes.size() + 63) / 64 * 64, dtype, ne0, ne1), true);
  }
  // A tensor over bytes that another tensor already covers, from byte `offset` of the buffer.
  int32_t alias(uint64_t offset, DType dtype, int64_t ne0, int64_t ne1 = 1) {
    return place(make_tensor(kBuffer, offset, dtype, ne0, ne1), false);
  }
  void node(Op op, int32_t out, std::initializer_list<int32_t> src, float f0 = 0.0f) {
    Node n;
    n.op = op;
    n.out = out;
    int i = 0;
    for (int32_t s : src) n.src[i++] = s;
    n.fparams[0] = f0;
    graph.nodes.push_back(n);
  }

  Graph graph;

 private:
  int32_t place(const TensorRef& t, bool fill) {
    const size_t end = t.offset + t.extent_bytes();
    if (bytes.size() < end) bytes.resize(end);
    if (fill) {
      std::vector<float> row(static_cast<size_t>(t.ne[0]));
      for (int64_t r = 0; r < t.ne[1]; ++r) {
        for (float& v : row) v = 2 * rng_.uniform() - 1;
        quantize_row(t.dtype, row.data(), &bytes[t.offset + r * t.nb[1]], t.ne[0]);
      }
    }
    graph.tensors.push_back(t);
    return static_cast<int32_t>(graph.tensors.size() - 1);
  }
  Rng rng_{17};
};

// The buffer after the graph ran on `threads` threads.
std::vector<uint8_t> run_whole(const HostGraph& hg, int threads) {
  HostGraph copy = hg;
  ThreadPool pool(threads);
  const Status s = cpu_graph_compute(copy.graph, copy, pool);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return copy.bytes;
}

// The buffer after each node ran as a graph of its own, in order, on one thread.
std::vector<uint8_t> run_node_by_node(const HostGraph& hg) {
  HostGraph copy = hg;
  ThreadPool pool(1);
  for (const Node& n : hg.graph.nodes) {
    copy.graph.nodes = {n};
    const Status s = cpu_graph_compute(copy.graph, copy, pool);
    EXPECT_TRUE(s.is_ok()) << s.message();
  }
  return copy.bytes;
}

void expect_as_node_by_node(const HostGraph& hg, const char* what) {
  const std::vector<uint8_t> expect = run_node_by_node(hg);
  for (int threads : {1, 2, 3}) {
    const std::vector<uint8_t> got = run_whole(hg, threads);
    ASSERT_EQ(got.size(), expect.size());
    size_t first = 0;
    while (first < got.size() && got[first] == expect[first]) ++first;
    EXPECT_EQ(first, got.size()) << what << ", " << threads << " threads: first differing byte";
  }
}

// A llama layer's projections: norm, then q/k/v of mixed dtypes; norm, then gate/up, the gated
// activation (swiglu, or Gemma's geglu) and down. Matrices large enough to be split over three
// threads.
HostGraph layer_graph(int64_t m, Op gated = Op::kSwiglu) {
  constexpr int64_t kEmbd = 512, kFf = 768;
  HostGraph g;
  const int32_t x = g.tensor(DType::kF32, kEmbd, m);
  const int32_t norm_w = g.tensor(DType::kF32, kEmbd);
  const int32_t h = g.tensor(DType::kF32, kEmbd, m);
  g.node(Op::kRmsNorm, h, {x, norm_w}, 1e-5f);
  const int32_t wq = g.tensor(DType::kQ8_0, kEmbd, kEmbd);
  const int32_t wk = g.tensor(DType::kQ8_0, kEmbd, 128);
  const int32_t wv = g.tensor(DType::kF16, kEmbd, 128);
  for (int32_t w : {wq, wk, wv}) {
    g.node(Op::kMulMat, g.tensor(DType::kF32, g.graph.tensors[w].ne[1], m), {w, h});
  }
  const int32_t h2 = g.tensor(DType::kF32, kEmbd, m);
  g.node(Op::kRmsNorm, h2, {x, norm_w}, 1e-5f);
  const int32_t gate = g.tensor(DType::kF32, kFf, m);
  const int32_t up = g.tensor(DType::kF32, kFf, m);
  g.node(Op::kMulMat, gate, {g.tensor(DType::kQ4_K, kEmbd, kFf), h2});
  g.node(Op::kMulMat, up, {g.tensor(DType::kQ6_K, kEmbd, kFf), h2});
  g.node(gated, gate, {gate, up});
  g.node(Op::kMulMat, g.tensor(DType::kF32, kEmbd, m), {g.tensor(DType::kQ4_0, kFf, kEmbd), gate});
  return g;
}

TEST(CpuExecMatmulRuns, SameBytesAsNodeByNode) {
  for (Isa isa : testing::isas()) {
    testing::IsaScope guard(isa);
    // 40 columns of 512: the norm and quantisation pass is split over the threads too.
    for (int64_t m : {1, 7, 40}) {
      for (Op gated : {Op::kSwiglu, Op::kGeglu}) {
        const std::string what =
            std::string(isa_name(isa)) + " layer, " + op_name(gated) + ", m " + std::to_string(m);
        expect_as_node_by_node(layer_graph(m, gated), what.c_str());
      }
    }
  }
}

// A batch-1 run of the layer touches no heap: each step's lists stay in place and the pool's
// passes copy no callable (core/small_list.h). Counted on every thread, after a first run.
TEST(CpuExecMatmulRuns, ABatchOneLayerAllocatesNothing) {
  if (!testing::heap_allocations_counted()) GTEST_SKIP() << "a sanitizer build counts none";
  HostGraph g = layer_graph(1);
  ThreadPool pool(2);
  Result<CpuPreparedGraph> prepared = cpu_graph_prepare(g.graph, g);
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
  ASSERT_TRUE(cpu_graph_run(*prepared, pool).is_ok());
  const uint64_t barriers = pool.counts().barriers;
  const uint64_t before = testing::heap_allocations();
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(cpu_graph_run(*prepared, pool).is_ok());
  EXPECT_EQ(testing::heap_allocations() - before, 0u);
  EXPECT_GT(pool.counts().barriers, barriers) << "the passes were split over the threads";
}

// At batch 1: q/k/v one pass, gate/up one pass, down one pass.
TEST(CpuExecMatmulRuns, ThreeBarriersForTheLayerAtBatchOne) {
  HostGraph g = layer_graph(1);
  ThreadPool pool(2);
  ASSERT_TRUE(cpu_graph_compute(g.graph, g, pool).is_ok());
  EXPECT_EQ(pool.counts().barriers, 3u);
}

// At 40 columns the norms, the gated activation and the quantisation are worth a split too: two
// passes per run (the producer and the quantisation, then the rows), where one pass per node
// made it 9 (norm, q, k, v, norm, gate, up, swiglu, down).
TEST(CpuExecMatmulRuns, TheProducerSharesTheQuantisationPass) {
  for (Op gated : {Op::kSwiglu, Op::kGeglu}) {
    HostGraph g = layer_graph(40, gated);
    ThreadPool pool(2);
    ASSERT_TRUE(cpu_graph_compute(g.graph, g, pool).is_ok());
    EXPECT_EQ(pool.counts().barriers, 6u) << op_name(gated);
  }
}

// The profile of strata bench --ops: each step of the executor is one call of its op, a run of
// matmuls with the norm or activation feeding it one mul_mat call, and a second run adds to the
// same entries.
TEST(CpuExecOpTimes, EachStepIsOneCallOfItsOp) {
  HostGraph g = layer_graph(1);
  const int32_t down = g.graph.nodes.back().out;
  g.node(Op::kAdd, g.tensor(DType::kF32, 512), {down, down});
  ThreadPool pool(2);
  Result<CpuPreparedGraph> prepared = cpu_graph_prepare(g.graph, g);
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
  OpTimes times;
  for (int64_t run = 1; run <= 2; ++run) {
    ASSERT_TRUE(cpu_graph_run(*prepared, pool, &times).is_ok());
    for (uint32_t id = 0; id < times.size(); ++id) {
      const int64_t want = id == static_cast<uint32_t>(Op::kMulMat) ? 3 * run
                           : id == static_cast<uint32_t>(Op::kAdd)  ? run
                                                                    : 0;
      EXPECT_EQ(times[id].calls.load(), want) << "op " << id << ", run " << run;
      if (want == 0) {
        EXPECT_EQ(times[id].ns.load(), 0) << "op " << id << ", run " << run;
      }
    }
    EXPECT_GT(times[static_cast<uint32_t>(Op::kMulMat)].ns.load(), 0);
  }
  // A run without the profile adds nothing to it.
  ASSERT_TRUE(cpu_graph_run(*prepared, pool).is_ok());
  EXPECT_EQ(times[static_cast<uint32_t>(Op::kMulMat)].calls.load(), 6);
}

// A matmul whose output is the shared input: the next one reads that output.
TEST(CpuExecMatmulRuns, OutputOverTheSharedInputEndsTheRun) {
  for (int64_t m : {1, 5}) {
    HostGraph g;
    const int32_t x = g.tensor(DType::kF32, 256, m);
    g.node(Op::kMulMat, x, {g.tensor(DType::kQ8_0, 256, 256), x});
    g.node(Op::kMulMat, g.tensor(DType::kF32, 512, m), {g.tensor(DType::kQ8_0, 256, 512), x});
    expect_as_node_by_node(g, "output over the input");
  }
}

// A matmul whose output is the next one's weight (its first row).
TEST(CpuExecMatmulRuns, OutputOverALaterWeightEndsTheRun) {
  HostGraph g;
  const int32_t x = g.tensor(DType::kF32, 256, 1);
  const int32_t w2 = g.tensor(DType::kF32, 256, 512);
  const int32_t y1 = g.alias(g.graph.tensors[w2].offset, DType::kF32, 256, 1);
  g.node(Op::kMulMat, y1, {g.tensor(DType::kQ8_0, 256, 256), x});
  g.node(Op::kMulMat, g.tensor(DType::kF32, 512, 1), {w2, x});
  expect_as_node_by_node(g, "output over a weight");
}

// Two matmuls that write one output: the second one's result stays.
TEST(CpuExecMatmulRuns, TwoOutputsInOnePlaceEndTheRun) {
  HostGraph g;
  const int32_t x = g.tensor(DType::kF32, 256, 3);
  const int32_t y = g.tensor(DType::kF32, 512, 3);
  g.node(Op::kMulMat, y, {g.tensor(DType::kQ8_0, 256, 512), x});
  g.node(Op::kMulMat, y, {g.tensor(DType::kQ4_K, 256, 512), x});
  expect_as_node_by_node(g, "one output twice");
}

}  // namespace
}  // namespace strata
