// The expert-indexed matmul of a mixture-of-experts layer against the plain matmul that reads
// the same weight bytes.
//
//   BM_MulMatId/<dtype>/T/shape   64 experts, 8 used per token (uniform random, distinct),
//                                 n_embd 1024, n_ff_exp 256; shape 0: gate/up, W [1024, 256, 64]
//                                 with one input per token; shape 1: down, W [256, 1024, 64] with
//                                 one input per slot. T = 1 reads 8 experts, T = 32 about 62.
//   BM_MatmulSameBytes/<dtype>/T/shape/m
//                                 one matmul over the rows of the experts that T tokens select
//                                 (their count as a plain [k, n_selected * n] matrix) with m
//                                 columns: m = 1 is the read cost of those bytes, m = the mean
//                                 pairs per selected expert the same multiply-adds as mul_mat_id.
// Several copies of the weights are cycled, and within a copy the parts a step reads, so that
// what a step reads is never in the 32 MiB L3.
// bytes_per_second counts the weight bytes read. Threads: STRATA_BENCH_THREADS.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bench_threads.h"
#include "core/matmul.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

constexpr int64_t kExperts = 64, kUsed = 8, kEmbd = 1024, kFf = 256;

struct Shape {
  int64_t k, n;
  bool per_slot;
};
Shape shape_of(int64_t s) { return s == 0 ? Shape{kEmbd, kFf, false} : Shape{kFf, kEmbd, true}; }

// Copies of one set of experts, enough to pass the cold-cache size.
std::vector<std::vector<uint8_t>> expert_copies(DType t, const Shape& sh, size_t row_bytes) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(sh.k));
  std::vector<uint8_t> one(row_bytes * static_cast<size_t>(sh.n * kExperts));
  for (int64_t r = 0; r < sh.n * kExperts; ++r) {
    for (float& v : src) v = dist(rng);
    quantize_row(t, src.data(), one.data() + r * row_bytes, sh.k);
  }
  const size_t copies = std::max<size_t>(2, (kBenchColdBytes + one.size() - 1) / one.size());
  return std::vector<std::vector<uint8_t>>(copies, one);
}

// kUsed distinct experts per token, from a fixed seed.
std::vector<int32_t> routing(int64_t tokens) {
  std::mt19937 rng(7);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(kExperts);
    for (int32_t e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + kUsed);
  }
  return ids;
}

int64_t distinct(const std::vector<int32_t>& ids) {
  std::vector<int32_t> s = ids;
  std::sort(s.begin(), s.end());
  return std::unique(s.begin(), s.end()) - s.begin();
}

void BM_MulMatId(benchmark::State& state, DType t) {
  const int64_t tokens = state.range(0);
  const Shape sh = shape_of(state.range(1));
  const size_t row_bytes = dtype_row_bytes(t, sh.k);
  const auto mats = expert_copies(t, sh, row_bytes);
  const std::vector<int32_t> ids = routing(tokens);
  const int64_t x_m = sh.per_slot ? kUsed : 1;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(sh.k * x_m * tokens));
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(sh.n * kUsed * tokens));
  MatmulIdArgs a;
  a.w_dtype = t;
  a.w_row_bytes = row_bytes;
  a.w_expert_bytes = row_bytes * static_cast<size_t>(sh.n);
  a.k = sh.k;
  a.n = sh.n;
  a.n_expert = kExperts;
  a.x = x.data();
  a.x_slot_stride = static_cast<size_t>(sh.k);
  a.x_tok_stride = static_cast<size_t>(sh.k * x_m);
  a.x_m = x_m;
  a.ids = ids.data();
  a.n_used = kUsed;
  a.n_tokens = tokens;
  a.y = y.data();
  a.y_slot_stride = static_cast<size_t>(sh.n);
  a.y_tok_stride = static_cast<size_t>(sh.n * kUsed);
  // Each copy is read under kVariants routings (expert e + kUsed * v): at T = 1 the 8 experts of
  // one step are 1/8 of a copy, and every step must read bytes that are not in the cache.
  constexpr int kVariants = kExperts / kUsed;
  std::vector<std::vector<int32_t>> routes(kVariants, ids);
  for (int v = 0; v < kVariants; ++v) {
    for (int32_t& e : routes[v]) e = (e + kUsed * v) % kExperts;
  }
  size_t next = 0;
  for (auto _ : state) {
    a.w = mats[next / kVariants].data();
    a.ids = routes[next % kVariants].data();
    matmul_id(bench_pool(), a);
    next = (next + 1) % (mats.size() * kVariants);
    benchmark::DoNotOptimize(y.data());
  }
  const int64_t read = distinct(ids) * sh.n * static_cast<int64_t>(row_bytes);
  state.SetBytesProcessed(state.iterations() * read);
  state.counters["experts_read"] = static_cast<double>(distinct(ids));
  state.counters["threads"] = bench_pool().size();
}

void BM_MatmulSameBytes(benchmark::State& state, DType t) {
  const int64_t tokens = state.range(0);
  const Shape sh = shape_of(state.range(1));
  const int64_t m = state.range(2);
  const size_t row_bytes = dtype_row_bytes(t, sh.k);
  const auto mats = expert_copies(t, sh, row_bytes);
  const int64_t n = distinct(routing(tokens)) * sh.n;
  std::vector<float> x(static_cast<size_t>(sh.k * m), 0.5f);
  std::vector<float> y(static_cast<size_t>(n * m));
  // Each copy holds kExperts * sh.n rows: a step reads the next n of them, never cached.
  const size_t per_copy = static_cast<size_t>(kExperts * sh.n / n);
  size_t next = 0;
  for (auto _ : state) {
    const uint8_t* w = mats[next / per_copy].data() + (next % per_copy) * n * row_bytes;
    matmul(bench_pool(), t, w, row_bytes, n, sh.k, x.data(), static_cast<size_t>(sh.k), m, y.data(),
           static_cast<size_t>(n));
    next = (next + 1) % (mats.size() * per_copy);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(row_bytes));
  state.counters["threads"] = bench_pool().size();
}

// T = 1: 8 experts of 1 pair each; T = 32: ~62 experts of ~4 pairs each.
#define STRATA_MOE_BENCH(name, dtype)                \
  BENCHMARK_CAPTURE(BM_MulMatId, name, dtype)        \
      ->Args({1, 0})                                 \
      ->Args({32, 0})                                \
      ->Args({1, 1})                                 \
      ->Args({32, 1})                                \
      ->Unit(benchmark::kMicrosecond)                \
      ->UseRealTime();                               \
  BENCHMARK_CAPTURE(BM_MatmulSameBytes, name, dtype) \
      ->Args({1, 0, 1})                              \
      ->Args({32, 0, 1})                             \
      ->Args({32, 0, 4})                             \
      ->Args({1, 1, 1})                              \
      ->Args({32, 1, 1})                             \
      ->Args({32, 1, 4})                             \
      ->Unit(benchmark::kMicrosecond)                \
      ->UseRealTime()

STRATA_MOE_BENCH(q8_0, DType::kQ8_0);
STRATA_MOE_BENCH(q4_K, DType::kQ4_K);

}  // namespace
}  // namespace strata
