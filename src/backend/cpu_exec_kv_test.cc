// A KV cache may keep a cell's kv heads side by side ([head_dim * kv_heads, cells], cell-major)
// or each kv head's cells side by side ([head_dim, cells, kv_heads], head-major, as the engine
// allocates it). The ops that touch a cache (set_rows, get_rows, rope_shift, attention) must
// leave the same values in it and give the same bytes out, whichever layout the graph names.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cpu_test_util.h"
#include "core/fp16.h"
#include "core/kernel_test_util.h"
#include "core/rng.h"
#include "graph/builder.h"

namespace strata {
// Names of their own: the tests are compiled as one unit, beside other files' kHd and kCells.
namespace kv_layout_test {
namespace {

constexpr uint64_t kKvBuffer = 3;
constexpr int64_t kHd = 24, kKvHeads = 3, kHeads = 6, kCells = 40, kTokens = 4;

// One buffer holding every tensor of a graph over a cache of either layout.
class KvGraph : public testing::OneHostBuffer<kKvBuffer> {
 public:
  int32_t add(TensorRef t) {
    t.buffer = kKvBuffer;
    t.offset = (bytes.size() + 63) / 64 * 64;
    bytes.resize(t.offset + t.extent_bytes());
    return builder.external(t);
  }
  template <typename T>
  int32_t values(DType dtype, const std::vector<T>& v, int64_t ne0, int64_t ne1 = 1,
                 int64_t ne2 = 1) {
    const int32_t t = add(make_tensor(0, 0, dtype, ne0, ne1, ne2));
    std::memcpy(at(t), v.data(), v.size() * sizeof(T));
    return t;
  }
  // The builder's tensor, or the finished graph's once it ran (finish() moves them out).
  const TensorRef& tensor(int32_t t) const {
    return graph.tensors.empty() ? builder.tensor(t) : graph.tensors[t];
  }
  uint8_t* at(int32_t t) { return bytes.data() + tensor(t).offset; }
  // Every tensor is external: the plan places nothing.
  Status compute(ThreadPool& pool) {
    builder.plan();
    graph = builder.finish(kKvBuffer);
    return cpu_graph_compute(graph, *this, pool);
  }

  GraphBuilder builder;
  Graph graph;
};

// Where element d of kv head h of cell c sits in an f16 cache r of either layout.
size_t offset_of(const TensorRef& r, bool head_major, int64_t c, int64_t h, int64_t d) {
  return c * r.nb[1] + h * (head_major ? r.nb[2] : kHd * 2) + d * 2;
}

// That element of cache tensor t, as a float.
float cache_at(KvGraph& g, int32_t t, int64_t c, int64_t h, int64_t d, bool head_major) {
  uint16_t v;
  std::memcpy(&v, g.at(t) + offset_of(g.tensor(t), head_major, c, h, d), 2);
  return f16_to_f32(v);
}

struct KvRun {
  std::vector<float> cache_k, cache_v;  // [cell][head][d]
  std::vector<uint8_t> attn, copied;
};

// Writes kTokens new rows, copies three cells to three others through get_rows/set_rows (a
// sequence copy), shifts four cells' keys, then attends with two lists, on `threads` threads.
KvRun run(bool head_major, int threads) {
  Rng rng(5);
  const auto uniform = [&rng](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 2 * rng.uniform() - 1;
    return v;
  };
  KvGraph g;
  // The same starting values in either layout.
  const std::vector<float> start_k = uniform(kCells * kKvHeads * kHd);
  const std::vector<float> start_v = uniform(kCells * kKvHeads * kHd);
  const auto cache = [&](const std::vector<float>& vals) {
    const int32_t t = head_major ? g.add(make_tensor(0, 0, DType::kF16, kHd, kCells, kKvHeads))
                                 : g.add(make_tensor(0, 0, DType::kF16, kHd * kKvHeads, kCells));
    const TensorRef& r = g.tensor(t);
    for (int64_t c = 0; c < kCells; ++c) {
      for (int64_t h = 0; h < kKvHeads; ++h) {
        for (int64_t d = 0; d < kHd; ++d) {
          const uint16_t x = f32_to_f16(vals[(c * kKvHeads + h) * kHd + d]);
          std::memcpy(g.at(t) + offset_of(r, head_major, c, h, d), &x, 2);
        }
      }
    }
    return t;
  };
  const int32_t k = cache(start_k), v = cache(start_v);

  const int32_t new_k =
      g.values(DType::kF32, uniform(kTokens * kKvHeads * kHd), kHd * kKvHeads, kTokens);
  const int32_t new_v =
      g.values(DType::kF32, uniform(kTokens * kKvHeads * kHd), kHd * kKvHeads, kTokens);
  const int32_t idx = g.values(DType::kI32, std::vector<int32_t>{7, 31, 2, 19}, kTokens);
  g.builder.node(Op::kSetRows, k, {k, new_k, idx});
  g.builder.node(Op::kSetRows, v, {v, new_v, idx});

  const int32_t from = g.values(DType::kI32, std::vector<int32_t>{7, 11, 12}, 3);
  const int32_t to = g.values(DType::kI32, std::vector<int32_t>{25, 26, 39}, 3);
  const int32_t copied = g.add(make_tensor(0, 0, DType::kF32, kHd * kKvHeads, 3));
  g.builder.node(Op::kGetRows, copied, {k, from});
  g.builder.node(Op::kSetRows, k, {k, copied, to});

  const int32_t shifted = g.values(DType::kI32, std::vector<int32_t>{3, 25, 8, 19}, 4);
  const int32_t delta = g.values(DType::kI32, std::vector<int32_t>{-2, -30, 5, -1000}, 4);
  g.builder.node(Op::kRopeShift, k, {k, shifted, delta}, {kHd, 2, kHd}, {10000.0f, 1.0f});

  std::vector<int32_t> lists(2 * kCells);
  std::iota(lists.begin(), lists.end(), 0);
  for (int64_t i = 0; i < kCells; ++i) lists[kCells + i] = static_cast<int32_t>(kCells - 1 - i);
  const int32_t cells = g.values(DType::kI32, lists, kCells, 2);
  const int32_t tok =
      g.values(DType::kI32, std::vector<int32_t>{0, 40, 1, 17, 0, 1, 1, 33}, 2, kTokens);
  const int32_t q = g.values(DType::kF32, uniform(kTokens * kHeads * kHd), kHd, kHeads, kTokens);
  const int32_t out = g.add(make_tensor(0, 0, DType::kF32, kHd, kHeads, kTokens));
  g.builder.node(Op::kAttention, out, {q, k, v, cells, tok}, {kKvHeads}, {0.2f});

  ThreadPool pool(threads);
  const Status s = g.compute(pool);
  EXPECT_TRUE(s.is_ok()) << s.message();
  KvRun r;
  for (int64_t c = 0; c < kCells; ++c) {
    for (int64_t h = 0; h < kKvHeads; ++h) {
      for (int64_t d = 0; d < kHd; ++d) {
        r.cache_k.push_back(cache_at(g, k, c, h, d, head_major));
        r.cache_v.push_back(cache_at(g, v, c, h, d, head_major));
      }
    }
  }
  const auto bytes_of = [&g](int32_t t) {
    return std::vector<uint8_t>(g.at(t), g.at(t) + g.tensor(t).extent_bytes());
  };
  r.attn = bytes_of(out);
  r.copied = bytes_of(copied);
  return r;
}

TEST(CpuExecKvLayout, HeadMajorCacheGivesTheCellMajorBytes) {
  for (Isa isa : testing::isas()) {
    testing::IsaScope scope(isa);
    const KvRun want = run(false, 1);
    for (int threads : {1, 2, 3}) {
      const KvRun got = run(true, threads);
      EXPECT_TRUE(testing::bitwise_equal(got.cache_k, want.cache_k)) << isa_name(isa);
      EXPECT_TRUE(testing::bitwise_equal(got.cache_v, want.cache_v)) << isa_name(isa);
      EXPECT_EQ(got.copied, want.copied) << isa_name(isa) << " threads=" << threads;
      EXPECT_EQ(got.attn, want.attn) << isa_name(isa) << " threads=" << threads;
    }
  }
}

// The run must change the caches: otherwise equal caches would prove nothing.
TEST(CpuExecKvLayout, TheOpsChangeTheCache) {
  const KvRun a = run(true, 2);
  Rng rng(5);
  std::vector<float> start(kCells * kKvHeads * kHd);
  for (float& x : start) x = f16_to_f32(f32_to_f16(2 * rng.uniform() - 1));
  size_t changed = 0;
  for (size_t i = 0; i < start.size(); ++i) changed += a.cache_k[i] != start[i];
  // Cells 7, 31, 2, 19 written, 25, 26, 39 copied into, 3 and 8 shifted: 9 of 40 cells.
  EXPECT_GE(changed, size_t{8 * kKvHeads * kHd});
}

// A peer's graph whose planes do not match is refused, naming the op's shapes.
TEST(CpuExecKvLayout, MismatchedPlanesAreRefused) {
  KvGraph g;
  const int32_t cache = g.add(make_tensor(0, 0, DType::kF16, kHd, kCells, kKvHeads));
  const int32_t rows = g.add(make_tensor(0, 0, DType::kF32, kHd * (kKvHeads - 1), 2));
  const int32_t idx = g.values(DType::kI32, std::vector<int32_t>{0, 1}, 2);
  g.builder.node(Op::kSetRows, cache, {cache, rows, idx});
  ThreadPool pool(1);
  const Status s = g.compute(pool);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("planes"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kv_layout_test
}  // namespace strata
