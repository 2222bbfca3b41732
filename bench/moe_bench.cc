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
//   BM_MoeDecodeOrder             one batch-1 token's matmuls of the synthetic qwen3moe model
//                                 that `strata bench` measures (20 layers, n_embd 1024, 64
//                                 experts of n_ff_exp 256, 8 used; the q4_K_M mix's dtypes: 161
//                                 MiB a token), each pass as the engine runs it: q/k/v in one
//                                 pass, the output projection, the router on the calling thread,
//                                 gate/up experts in one pass, the down experts, then the
//                                 32000-row output matrix. Each step routes to other experts.
//                                 Weights as the engine stores copied ones: q4_K and q6_K in
//                                 the CPU's rows-in-lanes layouts where it has them.
//                                 of_read: a plain read of the same bytes in the same passes,
//                                 timed alternately, over the kernels' time (as BM_DecodeOrder);
//                                 read_GBps: that read's rate, what these passes could reach;
//                                 one_pass_GBps: the same bytes in one pass; contig_GBps: as
//                                 many bytes of one buffer in one pass; probe_GBps: the mean of
//                                 strata bench's probe before and after (what its bound uses).
// bytes_per_second counts the weight bytes read. Threads: STRATA_BENCH_THREADS.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "bench_threads.h"
#include "core/dtype_traits.h"
#include "core/host_bytes.h"
#include "core/matmul.h"
#include "core/membw.h"
#include "core/quant.h"
#include "core/rows16.h"
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

// The arguments of matmul_id for kExperts experts of W dtype t [k, n] at w, kUsed of them per
// token from ids, x_m input columns per token in x (1: one for all its experts), outputs in y.
MatmulIdArgs id_args(DType t, const void* w, size_t row_bytes, int64_t k, int64_t n, const float* x,
                     int64_t x_m, const int32_t* ids, int64_t tokens, float* y) {
  MatmulIdArgs a;
  a.w_dtype = t;
  a.w = w;
  a.w_row_bytes = row_bytes;
  a.w_expert_bytes = row_bytes * static_cast<size_t>(n);
  a.k = k;
  a.n = n;
  a.n_expert = kExperts;
  a.x = x;
  a.x_slot_stride = static_cast<size_t>(k);
  a.x_tok_stride = static_cast<size_t>(k * x_m);
  a.x_m = x_m;
  a.ids = ids;
  a.n_used = kUsed;
  a.n_tokens = tokens;
  a.y = y;
  a.y_slot_stride = static_cast<size_t>(n);
  a.y_tok_stride = static_cast<size_t>(n * kUsed);
  return a;
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
  MatmulIdArgs a =
      id_args(t, nullptr, row_bytes, sh.k, sh.n, x.data(), x_m, ids.data(), tokens, y.data());
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

// One weight tensor of BM_MoeDecodeOrder: `count` matrices (experts) of n rows of dtype t and
// width k, 64 distinct random rows repeated (quantising 700 MiB of random rows would take most
// of the benchmark's time, and the kernels' cost does not depend on the values). Stored as the
// engine stores copied weights: in the CPU's layout of the type where it has one that pays
// (core/rows16.h; 64 rows are 4 whole groups, and every n here is a multiple of 64).
struct Tensor {
  DType t;
  int64_t k, n, count;
  size_t row_bytes;
  HostBytes w;

  Tensor(DType dtype, int64_t k_, int64_t n_, int64_t count_, std::mt19937& rng)
      : t(stored_dtype(dtype)), k(k_), n(n_), count(count_), row_bytes(dtype_row_bytes(dtype, k_)) {
    constexpr int64_t kDistinct = 64;
    w.resize(row_bytes * static_cast<size_t>(n * count));
    std::normal_distribution<float> dist(0.0f, 0.02f);
    quantize_rows(dtype, w.data(), kDistinct, k, kDistinct, rng, dist);
    to_layout(t, w.data(), kDistinct, k);
    // n a multiple of 64 keeps every matrix's groups whole; the last copy is cut to fit anyway.
    for (int64_t r = kDistinct; r < n * count; r += kDistinct) {
      const int64_t m = std::min(kDistinct, n * count - r);
      std::copy_n(w.data(), m * static_cast<int64_t>(row_bytes), w.data() + r * row_bytes);
    }
  }
  // The type the engine stores copied weights of `base` in: the CPU's layout where it offers one.
  static DType stored_dtype(DType base) {
    const std::optional<DType> layout = rows16_layout(base);
    return layout && cpu_device_caps().weight_dtypes.test(static_cast<uint32_t>(*layout)) ? *layout
                                                                                          : base;
  }
  size_t matrix_bytes() const { return row_bytes * static_cast<size_t>(n); }
  const uint8_t* matrix(int64_t e) const { return w.data() + e * matrix_bytes(); }
};

// The bytes of one pass, as (start, bytes) ranges read one after the other.
using Ranges = std::vector<std::pair<const uint8_t*, size_t>>;

// A plain read of the ranges' 64-byte lines, split over the pool's threads as parallel_for
// splits an index range (pool == nullptr: on the calling thread).
uint64_t read_ranges(ThreadPool* pool, const Ranges& ranges) {
  std::vector<int64_t> first{0};  // first line of each range in the concatenation
  for (const auto& [p, bytes] : ranges)
    first.push_back(first.back() + static_cast<int64_t>(bytes / 64));
  std::vector<uint64_t> sums(pool != nullptr ? static_cast<size_t>(pool->size()) : 1);
  const auto read = [&](int t, int64_t b, int64_t e) {
    size_t i =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
    for (; b < e; ++i) {
      const int64_t end = std::min(e, first[i + 1]);
      sums[t] += sum_lines(ranges[i].first, b - first[i], end - first[i]);
      b = end;
    }
  };
  if (pool == nullptr) {
    read(0, 0, first.back());
  } else {
    pool->parallel_for(first.back(), 64, read);
  }
  uint64_t s = 0;
  for (uint64_t v : sums) s += v;
  return s;
}

void BM_MoeDecodeOrder(benchmark::State& state) {
  constexpr int64_t kLayers = 20, kHeadDim = 128, kHeads = 16, kHeadsKv = 4, kVocab = 32000;
  std::mt19937 rng(1);
  struct Layer {
    Tensor q, k, v, o, router, gate, up, down;
  };
  std::vector<Layer> layers;
  for (int64_t l = 0; l < kLayers; ++l) {
    // llama.cpp's Q4_K_M: q6_K for attn_v and ffn_down in these layers, q4_K elsewhere.
    const bool more = l < kLayers / 8 || l >= 7 * kLayers / 8 || (l - kLayers / 8) % 3 == 2;
    const DType vd = more ? DType::kQ6_K : DType::kQ4_K;
    layers.push_back(Layer{Tensor(DType::kQ4_K, kEmbd, kHeads * kHeadDim, 1, rng),
                           Tensor(DType::kQ4_K, kEmbd, kHeadsKv * kHeadDim, 1, rng),
                           Tensor(vd, kEmbd, kHeadsKv * kHeadDim, 1, rng),
                           Tensor(DType::kQ4_K, kHeads * kHeadDim, kEmbd, 1, rng),
                           Tensor(DType::kF32, kEmbd, kExperts, 1, rng),
                           Tensor(DType::kQ4_K, kEmbd, kFf, kExperts, rng),
                           Tensor(DType::kQ4_K, kEmbd, kFf, kExperts, rng),
                           Tensor(vd, kFf, kEmbd, kExperts, rng)});
  }
  const Tensor output(DType::kQ6_K, kEmbd, kVocab, 1, rng);

  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kHeads * kHeadDim * kUsed);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(kVocab), ys(kFf * kUsed * 2);
  ThreadPool& p = bench_pool();
  ThreadPool caller(1);  // the router runs on the calling thread alone
  // Step s routes layer l to experts 8 (s + l) .. 8 (s + l) + 7: a layer's experts come back
  // every 8 steps, after ~1.3 GB of other weights.
  const auto ids_of = [](int64_t s, int64_t l) {
    std::vector<int32_t> ids(kUsed);
    for (int64_t i = 0; i < kUsed; ++i)
      ids[i] = static_cast<int32_t>((kUsed * (s + l) + i) % kExperts);
    return ids;
  };
  const auto tensor_args = [&](const Tensor& w, const int32_t* ids, int64_t x_m, float* out) {
    return id_args(w.t, w.w.data(), w.row_bytes, w.k, w.n, x.data(), x_m, ids, 1, out);
  };
  const auto plain = [&](const Tensor& w) {
    matmul(p, w.t, w.w.data(), w.row_bytes, w.n, w.k, x.data(), static_cast<size_t>(w.k), 1,
           y.data(), static_cast<size_t>(w.n));
  };
  const auto experts = [&](std::initializer_list<const Tensor*> ts,
                           const std::vector<int32_t>& ids) {
    Ranges r;
    for (int32_t e : ids) {
      for (const Tensor* t : ts) r.emplace_back(t->matrix(e), t->matrix_bytes());
    }
    return r;
  };
  const auto whole = [](const Tensor& t) { return std::make_pair(t.w.data(), t.w.size()); };

  // The passes of a step, by kind: each kind's kernel and read times are summed apart.
  // The down experts by dtype: rows of one super-block, q4_K and q6_K kernels of their own.
  enum Kind { kQkv, kO, kRouter, kGateUp, kDownQ4K, kDownQ6K, kOutput, kKinds };
  static constexpr const char* kNames[kKinds] = {"qkv",       "o",         "router", "gate_up",
                                                 "down_q4_K", "down_q6_K", "output"};
  const auto down_kind = [](const Layer& L) {
    return dtype_info(L.down.t).base == DType::kQ6_K ? kDownQ6K : kDownQ4K;
  };
  // As many bytes as a step reads, in one buffer of 2 MiB pages, filled so that its pages are
  // there: read in one pass after each step, it separates what the passes' ranges cost from what
  // a plain read of this machine's memory reaches now (the memory's speed moves between runs).
  size_t step_bytes = output.w.size();
  for (const Layer& L : layers) {
    for (const Tensor* t : {&L.q, &L.k, &L.v, &L.o, &L.router}) step_bytes += t->w.size();
    for (const Tensor* t : {&L.gate, &L.up, &L.down}) step_bytes += kUsed * t->matrix_bytes();
  }
  HostBytes contig;
  contig.resize(step_bytes / 64 * 64);
  std::fill(contig.data(), contig.data() + contig.size(), uint8_t{1});
  const double probe_before = measure_read_bandwidth(p);

  using Clock = std::chrono::steady_clock;
  double kernel_s[kKinds] = {}, read_s[kKinds] = {}, one_s = 0.0, contig_s = 0.0;
  size_t bytes = 0;
  uint64_t sink = 0;
  int64_t step = 0;
  auto t = Clock::now();
  // The time since the last lap, added to acc[kind].
  const auto lap = [&](double* acc, Kind kind) {
    const auto now = Clock::now();
    acc[kind] += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  for (auto _ : state) {
    const auto t0 = Clock::now();
    t = t0;
    for (int64_t l = 0; l < kLayers; ++l) {
      const Layer& L = layers[l];
      const std::vector<int32_t> ids = ids_of(step, l);
      const MatmulPart qkv[] = {
          {L.q.t, L.q.w.data(), L.q.row_bytes, L.q.n, y.data(), 0},
          {L.k.t, L.k.w.data(), L.k.row_bytes, L.k.n, y.data() + L.q.n, 0},
          {L.v.t, L.v.w.data(), L.v.row_bytes, L.v.n, y.data() + L.q.n + L.k.n, 0}};
      matmul_multi(p, qkv, kEmbd, x.data(), kEmbd, 1);
      lap(kernel_s, kQkv);
      plain(L.o);
      lap(kernel_s, kO);
      matmul(caller, L.router.t, L.router.w.data(), L.router.row_bytes, L.router.n, L.router.k,
             x.data(), kEmbd, 1, y.data(), L.router.n);
      lap(kernel_s, kRouter);
      const MatmulIdArgs gate_up[] = {tensor_args(L.gate, ids.data(), 1, ys.data()),
                                      tensor_args(L.up, ids.data(), 1, ys.data() + kFf * kUsed)};
      matmul_id_multi(p, gate_up);
      lap(kernel_s, kGateUp);
      matmul_id(p, tensor_args(L.down, ids.data(), kUsed, y.data()));
      lap(kernel_s, down_kind(L));
    }
    plain(output);
    lap(kernel_s, kOutput);
    const auto t1 = t;
    // The same passes' bytes, for the step after (other experts, none of them cached).
    size_t read = 0;
    const auto read_pass = [&](ThreadPool* pool, const Ranges& r, Kind kind) {
      sink += read_ranges(pool, r);
      lap(read_s, kind);
      for (const auto& [ptr, n] : r) read += n;
    };
    for (int64_t l = 0; l < kLayers; ++l) {
      const Layer& L = layers[l];
      const std::vector<int32_t> ids = ids_of(step + 1, l);
      read_pass(&p, {whole(L.q), whole(L.k), whole(L.v)}, kQkv);
      read_pass(&p, {whole(L.o)}, kO);
      read_pass(nullptr, {whole(L.router)}, kRouter);
      read_pass(&p, experts({&L.gate, &L.up}, ids), kGateUp);
      read_pass(&p, experts({&L.down}, ids), down_kind(L));
    }
    read_pass(&p, {whole(output)}, kOutput);
    // The bytes of yet another step in one pass: what the passes' barriers and starts cost.
    Ranges all;
    for (int64_t l = 0; l < kLayers; ++l) {
      const Layer& L = layers[l];
      const std::vector<int32_t> ids = ids_of(step + 2, l);
      for (const auto& r : {whole(L.q), whole(L.k), whole(L.v), whole(L.o), whole(L.router)}) {
        all.push_back(r);
      }
      for (const auto& r : experts({&L.gate, &L.up, &L.down}, ids)) all.push_back(r);
    }
    all.push_back(whole(output));
    t = Clock::now();
    sink += read_ranges(&p, all);
    one_s += std::chrono::duration<double>(Clock::now() - t).count();
    t = Clock::now();
    sink += read_ranges(&p, {{contig.data(), contig.size()}});
    contig_s += std::chrono::duration<double>(Clock::now() - t).count();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    bytes = read;
    step += 3;
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(sink);
  }
  double kernels = 0.0, reads = 0.0;
  for (int i = 0; i < kKinds; ++i) {
    kernels += kernel_s[i];
    reads += read_s[i];
    state.counters[std::string("of_read_") + kNames[i]] =
        kernel_s[i] > 0.0 ? read_s[i] / kernel_s[i] : 0.0;
  }
  const auto gbps = [&](double s) {
    return s > 0.0 ? static_cast<double>(state.iterations() * bytes) / s / 1e9 : 0.0;
  };
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["of_read"] = kernels > 0.0 ? reads / kernels : 0.0;
  state.counters["read_GBps"] = gbps(reads);
  state.counters["one_pass_GBps"] = gbps(one_s);
  state.counters["contig_GBps"] =
      contig_s > 0.0 ? static_cast<double>(state.iterations() * contig.size()) / contig_s / 1e9
                     : 0.0;
  state.counters["probe_GBps"] = (probe_before + measure_read_bandwidth(p)) / 2 / 1e9;
  state.counters["threads"] = p.size();
}
BENCHMARK(BM_MoeDecodeOrder)->Unit(benchmark::kMillisecond)->UseManualTime();

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
