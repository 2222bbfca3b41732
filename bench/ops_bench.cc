// Micro-benchmarks of the non-matmul kernels at llama-8B-like shapes (32 query heads, 8 kv
// heads, head_dim 128, 4096 hidden). Run with --benchmark_filter; STRATA_ISA=scalar for the
// reference path. Times depend on the machine: nothing here is asserted.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench_threads.h"
#include "core/fp16.h"
#include "core/host_bytes.h"
#include "core/ops.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// An f16 KV cache of n_cells rows of n_head_kv heads, random values, and the list of its cells
// in order.
struct F16Cache {
  size_t row_bytes;
  std::vector<uint16_t> k, v;
  std::vector<int32_t> cells;
};

F16Cache f16_cache(int64_t n_cells, int64_t n_head_kv, int64_t head_dim) {
  F16Cache c;
  c.row_bytes = n_head_kv * head_dim * 2;
  c.k.resize(n_cells * n_head_kv * head_dim);
  c.v.resize(c.k.size());
  const std::vector<float> kf = random_floats(c.k.size(), 1), vf = random_floats(c.v.size(), 2);
  for (size_t i = 0; i < c.k.size(); ++i) c.k[i] = f32_to_f16(kf[i]), c.v[i] = f32_to_f16(vf[i]);
  c.cells.resize(n_cells);
  std::iota(c.cells.begin(), c.cells.end(), 0);
  return c;
}

// The cache c's values head-major: each kv head's n_cells cells side by side, a head's plane
// plane_cells cells long (the engine's planes are the context's length).
struct HeadMajorCopy {
  std::vector<uint16_t> k, v;
  KvStrides kv;
};
HeadMajorCopy head_major_copy(const F16Cache& c, int64_t n_cells, int64_t plane_cells,
                              int64_t n_head_kv, int64_t head_dim) {
  HeadMajorCopy h;
  const size_t seg = static_cast<size_t>(head_dim) * 2;
  h.kv = {seg, seg * static_cast<size_t>(plane_cells)};
  h.k.resize(static_cast<size_t>(plane_cells * n_head_kv * head_dim));
  h.v.resize(h.k.size());
  for (int64_t cell = 0; cell < n_cells; ++cell) {
    for (int64_t kvh = 0; kvh < n_head_kv; ++kvh) {
      const size_t from = static_cast<size_t>((cell * n_head_kv + kvh) * head_dim);
      const size_t to = static_cast<size_t>((kvh * plane_cells + cell) * head_dim);
      std::memcpy(&h.k[to], &c.k[from], seg);
      std::memcpy(&h.v[to], &c.v[from], seg);
    }
  }
  return h;
}

// args: context length, batch (tokens, each of its own sequence with the full context), kv
// heads (8: grouped-query as llama 3; 32: multi-head as llama 2).
void BM_AttentionF16(benchmark::State& state) {
  const int64_t ctx = state.range(0), batch = state.range(1);
  const int64_t head_dim = 128, n_head = 32, n_head_kv = state.range(2);
  const F16Cache c = f16_cache(ctx * batch, n_head_kv, head_dim);
  std::vector<int32_t> tok(2 * batch);
  for (int64_t t = 0; t < batch; ++t) tok[2 * t] = int32_t(t), tok[2 * t + 1] = int32_t(ctx);
  const std::vector<float> q = random_floats(n_head * head_dim * batch, 3);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    attention(bench_pool(), q.data(), n_head * head_dim, head_dim, n_head, batch, DType::kF16,
              c.k.data(), c.v.data(), kv_cell_major(c.row_bytes, head_dim, DType::kF16), n_head_kv,
              c.cells.data(), ctx, tok.data(), 1.0f / std::sqrt(float(head_dim)), out.data(),
              n_head * head_dim);
    benchmark::DoNotOptimize(out.data());
  }
  // K and V bytes each token reads.
  state.SetBytesProcessed(state.iterations() * batch * ctx * c.row_bytes * 2);
}
BENCHMARK(BM_AttentionF16)
    ->Args({64, 1, 8})
    ->Args({512, 1, 8})
    ->Args({2048, 1, 8})
    ->Args({512, 16, 8})
    ->Args({2048, 16, 8})
    ->Args({512, 1, 32})
    ->Unit(benchmark::kMicrosecond);

// A prompt chunk of one sequence, as the engine runs it: `chunk` consecutive tokens at
// positions start.. attend causally to the cells before them. args: start, chunk, head_dim,
// query heads, kv heads (the 1024/8-layer synthetic models: 64, 16, 4), and the cache's layout.
void BM_AttentionPrompt(benchmark::State& state) {
  const int64_t start = state.range(0), chunk = state.range(1), head_dim = state.range(2);
  const int64_t n_head = state.range(3), n_head_kv = state.range(4);
  const int64_t n_cells = start + chunk;
  const F16Cache c = f16_cache(n_cells, n_head_kv, head_dim);
  // args[5]: 0 the cache cell-major, 1 head-major with planes of 4096 cells (the engine's
  // layout in a context of 4096).
  const bool head_major = state.range(5) != 0;
  const HeadMajorCopy h =
      head_major_copy(c, n_cells, std::max<int64_t>(n_cells, 4096), n_head_kv, head_dim);
  const KvStrides kv = head_major ? h.kv : kv_cell_major(c.row_bytes, head_dim, DType::kF16);
  const void* k = head_major ? h.k.data() : c.k.data();
  const void* v = head_major ? h.v.data() : c.v.data();
  std::vector<int32_t> tok(2 * chunk);
  for (int64_t t = 0; t < chunk; ++t) tok[2 * t] = 0, tok[2 * t + 1] = int32_t(start + t + 1);
  const std::vector<float> q = random_floats(n_head * head_dim * chunk, 3);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    attention(bench_pool(), q.data(), n_head * head_dim, head_dim, n_head, chunk, DType::kF16, k, v,
              kv, n_head_kv, c.cells.data(), n_cells, tok.data(), 1.0f / std::sqrt(float(head_dim)),
              out.data(), n_head * head_dim);
    benchmark::DoNotOptimize(out.data());
  }
  // (query head, cell) pairs: each is one q.k dot and one multiply-add of a V row.
  const int64_t pairs = n_head * (chunk * start + chunk * (chunk + 1) / 2);
  state.counters["pairs/s"] =
      benchmark::Counter(double(pairs), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionPrompt)
    ->Args({0, 512, 64, 16, 4, 0})
    ->Args({1536, 512, 64, 16, 4, 0})
    ->Args({1536, 512, 64, 16, 4, 1})
    ->Args({3584, 512, 64, 16, 4, 0})
    ->Args({1536, 512, 128, 32, 8, 0})
    ->Args({512, 512, 128, 16, 4, 0})
    ->Args({512, 512, 128, 16, 4, 1})
    ->Unit(benchmark::kMillisecond);

// Times `first` and `second` alternately, each on its own of n_layers layers in turn (half the
// layers apart, so that neither finds the other's in a cache): counters first_name and
// second_name (us per call) and ratio = first / second.
template <typename First, typename Second>
void time_alternately(benchmark::State& state, size_t n_layers, First first, const char* first_name,
                      Second second, const char* second_name) {
  double first_s = 0.0, second_s = 0.0;
  size_t l = 0;
  for (auto _ : state) {
    const double a = first(l);
    const double b = second((l + n_layers / 2) % n_layers);
    first_s += a;
    second_s += b;
    state.SetIterationTime(a + b);
    l = (l + 1) % n_layers;
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters[first_name] = first_s / n * 1e6;
  state.counters[second_name] = second_s / n * 1e6;
  state.counters["ratio"] = first_s / second_s;
}

// Attention as a step meets it: the KV cache in memory, not in any cache (the step's weights
// went through the caches since the layer's last visit), in 2 MiB pages as the CPU device
// allocates it. Enough layers' caches to pass well beyond the L3 are used in turn, once
// cell-major (llama.cpp's layout: a cell's kv heads side by side) and once head-major (each kv
// head's cells side by side, the engine's), alternately, so that the memory's swings on a VM
// cancel out of the ratio. Counters: cell_us and head_us per call, ratio = cell / head.
// args: cells before the chunk, chunk (1: a decode step), head_dim, query heads, kv heads.
void BM_AttentionCold(benchmark::State& state) {
  const int64_t start = state.range(0), chunk = state.range(1), head_dim = state.range(2);
  const int64_t n_head = state.range(3), n_head_kv = state.range(4);
  const int64_t n_cells = start + chunk;
  const F16Cache c = f16_cache(n_cells, n_head_kv, head_dim);
  const HeadMajorCopy h = head_major_copy(c, n_cells, n_cells, n_head_kv, head_dim);
  const size_t half_bytes = c.k.size() * sizeof(uint16_t), layer_bytes = 2 * half_bytes;
  const size_t n_layers = std::max<size_t>(2, (size_t{256} << 20) / layer_bytes);
  HostBytes cells(layer_bytes * n_layers), heads(layer_bytes * n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    uint8_t* at_c = cells.data() + l * layer_bytes;
    uint8_t* at_h = heads.data() + l * layer_bytes;
    std::memcpy(at_c, c.k.data(), half_bytes);
    std::memcpy(at_c + half_bytes, c.v.data(), half_bytes);
    std::memcpy(at_h, h.k.data(), half_bytes);
    std::memcpy(at_h + half_bytes, h.v.data(), half_bytes);
  }
  std::vector<int32_t> tok(2 * chunk);
  for (int64_t t = 0; t < chunk; ++t) tok[2 * t] = 0, tok[2 * t + 1] = int32_t(start + t + 1);
  const std::vector<float> q = random_floats(n_head * head_dim * chunk, 3);
  std::vector<float> out(q.size());
  const KvStrides cell_major = kv_cell_major(c.row_bytes, head_dim, DType::kF16);
  const auto call = [&](const HostBytes& arena, KvStrides kv, size_t l) {
    const uint8_t* k = arena.data() + l * layer_bytes;
    const auto t = std::chrono::steady_clock::now();
    attention(bench_pool(), q.data(), n_head * head_dim, head_dim, n_head, chunk, DType::kF16, k,
              k + half_bytes, kv, n_head_kv, c.cells.data(), n_cells, tok.data(),
              1.0f / std::sqrt(float(head_dim)), out.data(), n_head * head_dim);
    benchmark::DoNotOptimize(out.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  time_alternately(
      state, n_layers, [&](size_t l) { return call(cells, cell_major, l); }, "cell_us",
      [&](size_t l) { return call(heads, h.kv, l); }, "head_us");
}
BENCHMARK(BM_AttentionCold)
    ->Args({8, 1, 128, 16, 4})
    ->Args({64, 1, 128, 16, 4})
    ->Args({300, 1, 128, 16, 4})
    ->Args({1024, 1, 128, 16, 4})
    ->Args({4096, 1, 128, 16, 4})
    ->Args({300, 1, 64, 32, 4})
    ->Args({1024, 1, 128, 32, 8})
    ->Args({512, 512, 128, 16, 4})
    ->Args({512, 512, 64, 32, 4})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// A decode step's attention over a sequence's cells side by side (together_us) and over cells
// spread as 8 sequences decoding in turn spread them when each takes the lowest free cell
// (spread_us: every 8th cell of an 8 times larger cache): head-major caches in memory, timed
// alternately as BM_AttentionCold does. ratio = spread / together.
// args: the sequence's cells, head_dim, query heads, kv heads.
void BM_AttentionSpread(benchmark::State& state) {
  constexpr int64_t kSeqs = 8;
  const int64_t n = state.range(0), head_dim = state.range(1);
  const int64_t n_head = state.range(2), n_head_kv = state.range(3);
  const int64_t plane = kSeqs * n;
  const F16Cache c = f16_cache(plane, n_head_kv, head_dim);
  const HeadMajorCopy h = head_major_copy(c, plane, plane, n_head_kv, head_dim);
  const size_t half_bytes = h.k.size() * sizeof(uint16_t), layer_bytes = 2 * half_bytes;
  const size_t n_layers = std::max<size_t>(2, (size_t{256} << 20) / layer_bytes);
  HostBytes arena(layer_bytes * n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    std::memcpy(arena.data() + l * layer_bytes, h.k.data(), half_bytes);
    std::memcpy(arena.data() + l * layer_bytes + half_bytes, h.v.data(), half_bytes);
  }
  std::vector<int32_t> together(n), spread(n);
  for (int64_t i = 0; i < n; ++i) together[i] = int32_t(i), spread[i] = int32_t(i * kSeqs + 3);
  const std::vector<int32_t> tok = {0, int32_t(n)};
  const std::vector<float> q = random_floats(n_head * head_dim, 3);
  std::vector<float> out(q.size());
  const auto call = [&](const std::vector<int32_t>& cells, size_t l) {
    const uint8_t* k = arena.data() + l * layer_bytes;
    const auto t = std::chrono::steady_clock::now();
    attention(bench_pool(), q.data(), n_head * head_dim, head_dim, n_head, 1, DType::kF16, k,
              k + half_bytes, h.kv, n_head_kv, cells.data(), n, tok.data(),
              1.0f / std::sqrt(float(head_dim)), out.data(), n_head * head_dim);
    benchmark::DoNotOptimize(out.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  time_alternately(
      state, n_layers, [&](size_t l) { return call(spread, l); }, "spread_us",
      [&](size_t l) { return call(together, l); }, "together_us");
}
BENCHMARK(BM_AttentionSpread)
    ->Args({300, 128, 16, 4})
    ->Args({1024, 128, 16, 4})
    ->Args({4096, 128, 16, 4})
    ->Args({1024, 64, 32, 4})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = 4096, rows = state.range(0);
  const std::vector<float> x = random_floats(n * rows, 4), w = random_floats(n, 5);
  std::vector<float> y(x.size());
  ThreadPool pool(bench_threads());
  for (auto _ : state) {
    rms_norm(pool, x.data(), n, w.data(), y.data(), n, n, rows, 1e-5f);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * rows * 8);
}
BENCHMARK(BM_RmsNorm)->Arg(1)->Arg(16)->Arg(512);

void BM_Rope(benchmark::State& state) {
  const int64_t tokens = state.range(0), head_dim = 128, n_head = 32;
  std::vector<float> x = random_floats(head_dim * n_head * tokens, 6);
  std::vector<int32_t> pos(tokens);
  std::iota(pos.begin(), pos.end(), 100);
  const RopeMode mode = state.range(1) ? RopeMode::kNeox : RopeMode::kNormal;
  ThreadPool pool(bench_threads());
  for (auto _ : state) {
    rope(pool, x.data(), head_dim, n_head, tokens, head_dim * n_head, pos.data(), head_dim, mode,
         500000.0f, 1.0f);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_Rope)->Args({1, 0})->Args({16, 0})->Args({512, 0})->Args({512, 1});

void BM_Swiglu(benchmark::State& state) {
  const int64_t n = 14336, rows = state.range(0);
  const std::vector<float> g = random_floats(n * rows, 7), u = random_floats(n * rows, 8);
  std::vector<float> y(g.size());
  ThreadPool pool(bench_threads());
  for (auto _ : state) {
    swiglu(pool, g.data(), n, u.data(), n, y.data(), n, n, rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n * rows);
}
BENCHMARK(BM_Swiglu)->Arg(1)->Arg(16);

}  // namespace
}  // namespace strata
