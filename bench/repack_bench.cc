// Rows in lanes (core/rows16.h), the CPU's layout of copied q4_K and q6_K weights, against the
// file's layouts on a batch-1 decode step.
//
//   BM_LayoutDecodeOrder    a batch-1 token of a 2048-wide 8-layer llama in q4_K_M's types, in
//                           the file's layouts and in rows in lanes, timed alternately.
//
// bench/matmul_bench.cc's BM_Matmul/q4_K_r16 and /q6_K_r16 time the layouts one matrix at a
// time, beside BM_Matmul/q4_K and /q6_K.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "bench_threads.h"
#include "core/host_bytes.h"
#include "core/matmul.h"
#include "core/quant.h"
#include "core/rows16.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

// A batch-1 token of a 2048-wide, 8-layer llama in q4_K_M's types (q, k, o, gate, up in Q4_K; v
// and down in Q6_K, as llama.cpp's mix has them on some layers; the 32000-row output in Q6_K:
// 245 MiB), one column each in decode order, on the bench pool: once in the file's layout and
// once in rows in lanes (core/rows16.h), alternately, the first one alternating too. Counters:
// file_GBps, r16_GBps (weight bytes per second of each), ratio = file time / r16 time. The two
// are timed in the same seconds, so the memory's swings on a VM (up to 2x within minutes) cancel
// out of the ratio.
void BM_LayoutDecodeOrder(benchmark::State& state) {
  constexpr int64_t kEmbd = 2048, kKv = 256, kFf = 5632, kLayers = 8, kVocab = 32000;
  struct Matrix {
    DType dtype;
    int64_t n, k;
    HostBytes file, r16;
  };
  std::vector<Matrix> mats;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  // 64 distinct rows per matrix, repeated (quantize_rows).
  const auto add = [&](DType t, int64_t n, int64_t k) {
    Matrix m{t, n, k, {}, {}};
    const size_t row_bytes = dtype_row_bytes(t, k);
    m.file.resize(row_bytes * static_cast<size_t>(n));
    m.r16.resize(m.file.size());
    quantize_rows(t, m.file.data(), n, k, 64, rng, dist);
    rows16_pack(*rows16_layout(t), m.file.data(), m.r16.data(), n, k);
    mats.push_back(std::move(m));
  };
  for (int64_t l = 0; l < kLayers; ++l) {
    add(DType::kQ4_K, kEmbd, kEmbd);
    add(DType::kQ4_K, kKv, kEmbd);
    add(DType::kQ6_K, kKv, kEmbd);
    add(DType::kQ4_K, kEmbd, kEmbd);
    add(DType::kQ4_K, kFf, kEmbd);
    add(DType::kQ4_K, kFf, kEmbd);
    add(DType::kQ6_K, kEmbd, kFf);
  }
  add(DType::kQ6_K, kVocab, kEmbd);
  size_t bytes = 0;
  for (const Matrix& m : mats) bytes += m.file.size();
  std::vector<float> x(kFf), y(kVocab);
  for (float& v : x) v = dist(rng) * 50.0f;
  ThreadPool& p = bench_pool();
  using Clock = std::chrono::steady_clock;
  const auto pass = [&](bool r16) {
    const auto t = Clock::now();
    for (const Matrix& m : mats) {
      matmul(p, r16 ? *rows16_layout(m.dtype) : m.dtype, (r16 ? m.r16 : m.file).data(),
             dtype_row_bytes(m.dtype, m.k), m.n, m.k, x.data(), m.k, 1, y.data(), m.n);
    }
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  double file_s = 0.0, r16_s = 0.0;
  bool r16_first = false;
  for (auto _ : state) {
    const double a = pass(r16_first);
    const double b = pass(!r16_first);
    file_s += r16_first ? b : a;
    r16_s += r16_first ? a : b;
    state.SetIterationTime(a + b);
    r16_first = !r16_first;
    benchmark::DoNotOptimize(y.data());
  }
  const double total = static_cast<double>(state.iterations()) * static_cast<double>(bytes);
  state.counters["file_GBps"] = total / file_s / 1e9;
  state.counters["r16_GBps"] = total / r16_s / 1e9;
  state.counters["ratio"] = file_s / r16_s;
  state.counters["threads"] = p.size();
}
BENCHMARK(BM_LayoutDecodeOrder)->Unit(benchmark::kMillisecond)->UseManualTime();

}  // namespace
}  // namespace strata
