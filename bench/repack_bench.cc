// Rows in lanes (core/rows16.h): the engine's Q4_K layout against the file's, and a prototype of
// the same for Q6_K before the engine gets it.
//
//   BM_Q6KRowsInLanes/hot   128 rows of k = 2048 (in L2) or, hot = 0, copies of them adding up to
//                           kBenchColdBytes for each layout (from memory); one thread.
//   BM_LayoutDecodeOrder    a batch-1 token of a 2048-wide 8-layer llama, all Q4_K, in the
//                           file's layout and in DType::kQ4_K_R16, timed alternately.
//
// The prototype interleaves 16 rows so that lane r of every register is row r: each register of
// quants holds 4 quant bytes of each of the 16 rows, its activations are one broadcast 32-bit
// word, and a sub-block's scales are one 16-byte load. The integer lanes and the float
// operations are the AVX2 kernel's, lane by lane: the benchmark first checks that the outputs
// are today's, bit for bit, and reports an error if not.
//
// Counters: packed_GBps and today_GBps (bytes of the dtype's rows per second, each kernel timed
// alternately on the same rows), ratio = packed / today. Today's time includes quantising the
// activation column (what `matmul` does), the packed kernel's does not.
#include <benchmark/benchmark.h>
// g++ 12 warns inside its own avx512fintrin.h (the undefined upper half of a 256-to-512-bit
// cast), not about this file: CMakeLists.txt turns the same warnings off for the _avx512 files.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "bench_threads.h"
#include "core/host_bytes.h"
#include "core/isa.h"
#include "core/matmul.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/rows16.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

// Each row's 8 float lanes summed in avx2::hsum's order, ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 +
// 7)), into y[0..15].
__attribute__((target("avx512f"))) void store_rows(const __m512* acc, float* y) {
  const __m512 even = _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6]));
  const __m512 odd = _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7]));
  _mm512_storeu_ps(y, _mm512_add_ps(even, odd));
}

// One Q6_K super-block of 16 rows, in the order the kernel reads it: the 16 sub-block scales by
// sub-block then row, d, then for half h and lane L bytes 4L..4L+3 of each row's ql chunks 2h
// (ql0: groups 4h, 4h + 2) and 2h + 1 (ql1: groups 4h + 1, 4h + 3) and of its qh chunk h (two
// bits of each group). A whole number of cache lines: with the quants first and the scales
// after them, read back and forth, the kernel ran at 8.3 GB/s from memory.
struct Q6KRows {
  int8_t scales[16][kLaneRows];
  uint16_t d[kLaneRows];
  uint8_t pad[32];
  struct Quants {
    uint8_t ql0[kLaneRows][4], ql1[kLaneRows][4], qh[kLaneRows][4];
  } q[2][8];
};
static_assert(sizeof(Q6KRows) % 64 == 0);

// Lane `lane` of a Q6_K super-block of 16 rows, from that row's block.
void fill_q6_k(Q6KRows& p, const BlockQ6_K& src, int64_t lane) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 8; ++l) {
      std::memcpy(p.q[h][l].ql0[lane], src.ql + 64 * h + 4 * l, 4);
      std::memcpy(p.q[h][l].ql1[lane], src.ql + 64 * h + 32 + 4 * l, 4);
      std::memcpy(p.q[h][l].qh[lane], src.qh + 32 * h + 4 * l, 4);
    }
  }
  for (int s = 0; s < 16; ++s) p.scales[s][lane] = src.scales[s];
  p.d[lane] = src.d;
}

// The AVX2 Q6_K kernel's lane L sums, over the 32-element groups i = 4h + g, scale(2i + L / 4) *
// (products of the group's elements 4L..4L+3, quants as q + 32), then takes out 32 * (the scales
// against the block sums, lane L: sums 2L and 2L + 1); acc += (dx * d) * float(lanes).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c"))) void q6_k_rows(
    const Q6KRows* p, int64_t nb, const BlockQ8_K* x, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
  const __m512i low_word = _mm512_set1_epi32(0xffff);
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KRows& w = p[b];
    const BlockQ8_K& xb = x[b];
    __m512i lanes[8];
    for (__m512i& l : lanes) l = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        // The scale of group 4h + g's sub-block 2(4h + g) + half, in both words of each lane.
        __m512i sc[4];
        for (int g = 0; g < 4; ++g) {
          const __m512i v = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales[2 * (4 * h + g) + half])));
          sc[g] = _mm512_or_si512(_mm512_and_si512(v, low_word), _mm512_slli_epi32(v, 16));
        }
#pragma GCC unroll 4
        for (int l = 4 * half; l < 4 * half + 4; ++l) {
          const __m512i ql0 = _mm512_loadu_si512(w.q[h][l].ql0);
          const __m512i ql1 = _mm512_loadu_si512(w.q[h][l].ql1);
          const __m512i qh = _mm512_loadu_si512(w.q[h][l].qh);
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) {
            const __m512i src = g % 2 == 0 ? ql0 : ql1;
            const __m512i lo =
                g < 2 ? _mm512_and_si512(src, m4) : _mm512_and_si512(_mm512_srli_epi16(src, 4), m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qh, 2 * g), m3);
            const __m512i q = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
            int32_t xv;
            std::memcpy(&xv, xb.qs + 128 * h + 32 * g + 4 * l, 4);
            lanes[l] = _mm512_dpwssd_epi32(lanes[l], _mm512_maddubs_epi16(q, _mm512_set1_epi32(xv)),
                                           sc[g]);
          }
        }
      }
    }
    const __m512 d =
        _mm512_mul_ps(_mm512_set1_ps(xb.d),
                      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.d))));
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m512i s0 =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales[2 * l])));
      const __m512i s1 = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales[2 * l + 1])));
      const __m512i off =
          _mm512_add_epi32(_mm512_mullo_epi32(s0, _mm512_set1_epi32(xb.bsums[2 * l])),
                           _mm512_mullo_epi32(s1, _mm512_set1_epi32(xb.bsums[2 * l + 1])));
      const __m512i tot = _mm512_sub_epi32(lanes[l], _mm512_slli_epi32(off, 5));
      acc[l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(tot), acc[l]);
    }
  }
  store_rows(acc, y);
}

// The layout, as the benchmark takes it.
struct Q6KLayout {
  static constexpr DType kDType = DType::kQ6_K;
  using Source = BlockQ6_K;
  using Block = Q6KRows;
  static constexpr auto fill = fill_q6_k;
  static constexpr auto rows = q6_k_rows;
};

// Rows [16 i, 16 i + 16) of a matrix as super-blocks [i * nb, (i + 1) * nb) of the layout.
template <typename Layout>
std::vector<typename Layout::Block> pack_rows(const uint8_t* w, size_t row_bytes, int64_t n,
                                              int64_t k) {
  const int64_t nb = k / kQKK;
  std::vector<typename Layout::Block> out(static_cast<size_t>(n / kLaneRows * nb));
  for (int64_t r = 0; r < n; ++r) {
    const auto* row = reinterpret_cast<const typename Layout::Source*>(w + r * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      Layout::fill(out[static_cast<size_t>(r / kLaneRows * nb + b)], row[b], r % kLaneRows);
    }
  }
  return out;
}

template <typename Layout>
void BM_RowsInLanes(benchmark::State& state) {
  if (isa_active() != Isa::kAvx512) {
    state.SkipWithError("needs AVX-512 with VNNI");
    return;
  }
  constexpr int64_t kK = 2048, kN = 128;
  const bool hot = state.range(0) != 0;
  const int64_t nb = kK / kQKK;
  const size_t row_bytes = dtype_row_bytes(Layout::kDType, kK);
  const size_t mat_bytes = row_bytes * kN;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> src(kK), x(kK);
  std::vector<uint8_t> w(mat_bytes);
  for (int64_t r = 0; r < kN; ++r) {
    for (float& v : src) v = dist(rng);
    quantize_row(Layout::kDType, src.data(), w.data() + r * row_bytes, kK);
  }
  for (float& v : x) v = dist(rng);
  std::vector<BlockQ8_K> xq(static_cast<size_t>(nb));
  quantize_row(DType::kQ8_K, x.data(), xq.data(), kK);

  ThreadPool one(1);
  std::vector<float> today(kN), packed(kN);
  matmul(one, Layout::kDType, w.data(), row_bytes, kN, kK, x.data(), kK, 1, today.data(), kN);
  const std::vector<typename Layout::Block> pk = pack_rows<Layout>(w.data(), row_bytes, kN, kK);
  for (int64_t g = 0; g < kN / kLaneRows; ++g) {
    Layout::rows(pk.data() + g * nb, nb, xq.data(), packed.data() + g * kLaneRows);
  }
  if (std::memcmp(today.data(), packed.data(), today.size() * sizeof(float)) != 0) {
    state.SkipWithError("the packed rows' outputs are not today's kernel's, bit for bit");
    return;
  }

  // Copies of both layouts: one in L2, or enough to be read from memory.
  const size_t copies =
      hot ? 1 : std::max<size_t>(2, (kBenchColdBytes + mat_bytes - 1) / mat_bytes);
  const size_t pk_bytes = pk.size() * sizeof(typename Layout::Block);
  HostBytes w_copies, pk_copies;
  w_copies.resize(mat_bytes * copies);
  pk_copies.resize(pk_bytes * copies);
  for (size_t c = 0; c < copies; ++c) {
    std::memcpy(w_copies.data() + c * mat_bytes, w.data(), mat_bytes);
    std::memcpy(pk_copies.data() + c * pk_bytes, pk.data(), pk_bytes);
  }
  using Clock = std::chrono::steady_clock;
  double today_s = 0.0, packed_s = 0.0;
  size_t next = 0;
  for (auto _ : state) {
    auto t = Clock::now();
    matmul(one, Layout::kDType, w_copies.data() + next * mat_bytes, row_bytes, kN, kK, x.data(), kK,
           1, today.data(), kN);
    today_s += std::chrono::duration<double>(Clock::now() - t).count();
    t = Clock::now();
    const auto* base =
        reinterpret_cast<const typename Layout::Block*>(pk_copies.data() + next * pk_bytes);
    for (int64_t g = 0; g < kN / kLaneRows; ++g) {
      Layout::rows(base + g * nb, nb, xq.data(), packed.data() + g * kLaneRows);
    }
    const double packed_step = std::chrono::duration<double>(Clock::now() - t).count();
    packed_s += packed_step;
    state.SetIterationTime(packed_step);
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(today.data());
    benchmark::DoNotOptimize(packed.data());
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(mat_bytes);
  state.counters["today_GBps"] = bytes / today_s / 1e9;
  state.counters["packed_GBps"] = bytes / packed_s / 1e9;
  state.counters["ratio"] = today_s / packed_s;
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_RowsInLanes<Q6KLayout>)
    ->Name("BM_Q6KRowsInLanes")
    ->ArgName("hot")
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime();

// A batch-1 token of a 2048-wide, 8-layer llama with every matrix in Q4_K (q, k, v, o, gate, up,
// down per layer: 199 MiB), one column each in decode order, on the bench pool: once in the file's
// layout and once in rows in lanes (DType::kQ4_K_R16), alternately, the first one alternating
// too. Counters: file_GBps, r16_GBps (weight bytes per second of each), ratio = file time / r16
// time. The two are timed in the same seconds, so the memory's swings on a VM (up to 2x within
// minutes) cancel out of the ratio.
void BM_LayoutDecodeOrder(benchmark::State& state) {
  constexpr int64_t kEmbd = 2048, kKv = 256, kFf = 5632, kLayers = 8;
  struct Matrix {
    int64_t n, k;
    HostBytes file, r16;
  };
  std::vector<Matrix> mats;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  // 64 distinct rows per matrix, repeated (the kernels' cost does not depend on the values).
  const auto add = [&](int64_t n, int64_t k) {
    Matrix m{n, k, {}, {}};
    const size_t row_bytes = dtype_row_bytes(DType::kQ4_K, k);
    m.file.resize(row_bytes * static_cast<size_t>(n));
    m.r16.resize(m.file.size());
    std::vector<float> src(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      if (r < 64) {
        for (float& v : src) v = dist(rng);
        quantize_row(DType::kQ4_K, src.data(), m.file.data() + r * row_bytes, k);
      } else {
        std::memcpy(m.file.data() + r * row_bytes, m.file.data() + (r % 64) * row_bytes, row_bytes);
      }
    }
    rows16_pack(DType::kQ4_K_R16, m.file.data(), m.r16.data(), n, k);
    mats.push_back(std::move(m));
  };
  for (int64_t l = 0; l < kLayers; ++l) {
    add(kEmbd, kEmbd);
    add(kKv, kEmbd);
    add(kKv, kEmbd);
    add(kEmbd, kEmbd);
    add(kFf, kEmbd);
    add(kFf, kEmbd);
    add(kEmbd, kFf);
  }
  size_t bytes = 0;
  for (const Matrix& m : mats) bytes += m.file.size();
  std::vector<float> x(kFf), y(kFf);
  for (float& v : x) v = dist(rng) * 50.0f;
  ThreadPool& p = bench_pool();
  using Clock = std::chrono::steady_clock;
  const auto pass = [&](bool r16) {
    const auto t = Clock::now();
    for (const Matrix& m : mats) {
      matmul(p, r16 ? DType::kQ4_K_R16 : DType::kQ4_K, (r16 ? m.r16 : m.file).data(),
             dtype_row_bytes(DType::kQ4_K, m.k), m.n, m.k, x.data(), m.k, 1, y.data(), m.n);
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
