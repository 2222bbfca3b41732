// A candidate layout for batch-1 Q4_K, measured against today's kernel before the engine gets it.
//
//   BM_Q4KRowsInLanes/hot   128 rows of k = 2048 (147 KiB, in L2) or, hot = 0, copies of them
//                           adding up to 256 MiB (from memory); one thread.
//
// Today's one-column Q4_K kernel (matmul_k_avx512.cc) keeps each row's 8 integer lanes in its
// own register and spends most of its instructions moving one row's scales and lanes within a
// register: about 166 instructions per two super-blocks of two rows, 32 of them products. Here
// 16 rows are interleaved so that lane r of every register is row r. Each register of quants
// holds 4 quant bytes of each of the 16 rows, its activations are one broadcast 32-bit word, and
// a sub-block's scales are one 16-byte load. The integer lanes and the float operations are the
// AVX2 kernel's, lane by lane: the benchmark first checks that the outputs are today's, bit for
// bit, and reports an error if not.
//
// Counters: packed_GBps and today_GBps (Q4_K bytes per second, each kernel timed alternately on
// the same rows), ratio = packed / today. Today's time includes quantising the activation
// column (what `matmul` does; 8% of the in-L2 case under perf), the packed kernel's does not.
#include <benchmark/benchmark.h>
// g++ 12 warns inside its own avx512fintrin.h (the undefined upper half of a 256-to-512-bit
// cast), not about this file: CMakeLists.txt turns the same warnings off for the _avx512 files.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "core/host_bytes.h"
#include "core/isa.h"
#include "core/matmul.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

constexpr int64_t kLaneRows = 16;

// One super-block of 16 rows. qs[j][g][r] holds bytes 4g..4g+3 of row r's 32-byte chunk j (low
// nibbles: sub-block 2j, high nibbles: sub-block 2j + 1); the scales and mins unpacked to bytes,
// by sub-block then row.
struct RowsInLanes {
  uint8_t qs[4][8][kLaneRows][4];
  uint8_t scales[8][kLaneRows];
  uint8_t mins[8][kLaneRows];
  uint16_t d[kLaneRows];
  uint16_t dmin[kLaneRows];
};

// Rows [16 i, 16 i + 16) of a Q4_K matrix as super-blocks [i * nb, (i + 1) * nb).
std::vector<RowsInLanes> pack_rows(const uint8_t* w, size_t row_bytes, int64_t n, int64_t k) {
  const int64_t nb = k / kQKK;
  std::vector<RowsInLanes> out(static_cast<size_t>(n / kLaneRows * nb));
  for (int64_t r = 0; r < n; ++r) {
    const auto* row = reinterpret_cast<const BlockQ4_K*>(w + r * row_bytes);
    const int64_t lane = r % kLaneRows;
    for (int64_t b = 0; b < nb; ++b) {
      RowsInLanes& p = out[static_cast<size_t>(r / kLaneRows * nb + b)];
      for (int j = 0; j < 4; ++j) {
        for (int g = 0; g < 8; ++g) std::memcpy(p.qs[j][g][lane], row[b].qs + 32 * j + 4 * g, 4);
      }
      for (int s = 0; s < 8; ++s)
        kscale_min(s, row[b].scales, &p.scales[s][lane], &p.mins[s][lane]);
      p.d[lane] = row[b].d;
      p.dmin[lane] = row[b].dmin;
    }
  }
  return out;
}

// 16 rows' dots with one Q8_K column. Lane L of a row's AVX2 accumulator sums, over the
// super-block's chunks j, scale(2j) * (products of its low nibbles 4L..4L+3) + scale(2j + 1) *
// (the same of the high ones): here register L, lane r. maddubs forms pairs of products and
// dpwssd multiplies both by the scale (in both words) into the lane: the same integers.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c"))) void rows_in_lanes(
    const RowsInLanes* p, int64_t nb, const BlockQ8_K* x, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const RowsInLanes& w = p[b];
    const BlockQ8_K& xb = x[b];
    __m512i lanes[8];
    for (__m512i& l : lanes) l = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      __m512i s_l =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales[2 * j])));
      __m512i s_h = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales[2 * j + 1])));
      s_l = _mm512_or_si512(s_l, _mm512_slli_epi32(s_l, 16));
      s_h = _mm512_or_si512(s_h, _mm512_slli_epi32(s_h, 16));
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        int32_t x_l, x_h;
        std::memcpy(&x_l, xb.qs + 64 * j + 4 * g, 4);
        std::memcpy(&x_h, xb.qs + 64 * j + 32 + 4 * g, 4);
        const __m512i q = _mm512_loadu_si512(w.qs[j][g]);
        const __m512i ql = _mm512_and_si512(q, m4);
        const __m512i qh = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        lanes[g] =
            _mm512_dpwssd_epi32(lanes[g], _mm512_maddubs_epi16(ql, _mm512_set1_epi32(x_l)), s_l);
        lanes[g] =
            _mm512_dpwssd_epi32(lanes[g], _mm512_maddubs_epi16(qh, _mm512_set1_epi32(x_h)), s_h);
      }
    }
    // acc += (dx * d) * float(lanes); acc += -(dx * dmin) * float(min * the sub-block's sums),
    // lane L of the mins term being sub-block L's.
    const __m512 dx = _mm512_set1_ps(xb.d);
    const __m512 d = _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.d))), dx);
    const __m512 dmin = _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.dmin))), dx);
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m512i mins =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.mins[l])));
      const __m512i pm = _mm512_mullo_epi32(
          mins, _mm512_set1_epi32(int32_t{xb.bsums[2 * l]} + int32_t{xb.bsums[2 * l + 1]}));
      acc[l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes[l]), acc[l]);
      acc[l] = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(pm), acc[l]);
    }
  }
  // avx2::hsum's order over a row's 8 lanes: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)).
  const __m512 even = _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6]));
  const __m512 odd = _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7]));
  _mm512_storeu_ps(y, _mm512_add_ps(even, odd));
}

void BM_Q4KRowsInLanes(benchmark::State& state) {
  if (isa_active() != Isa::kAvx512) {
    state.SkipWithError("needs AVX-512 with VNNI");
    return;
  }
  constexpr int64_t kK = 2048, kN = 128;
  const bool hot = state.range(0) != 0;
  const int64_t nb = kK / kQKK;
  const size_t row_bytes = dtype_row_bytes(DType::kQ4_K, kK);
  const size_t mat_bytes = row_bytes * kN;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> src(kK), x(kK);
  std::vector<uint8_t> w(mat_bytes);
  for (int64_t r = 0; r < kN; ++r) {
    for (float& v : src) v = dist(rng);
    quantize_row(DType::kQ4_K, src.data(), w.data() + r * row_bytes, kK);
  }
  for (float& v : x) v = dist(rng);
  std::vector<BlockQ8_K> xq(static_cast<size_t>(nb));
  quantize_row(DType::kQ8_K, x.data(), xq.data(), kK);

  ThreadPool one(1);
  std::vector<float> today(kN), packed(kN);
  matmul(one, DType::kQ4_K, w.data(), row_bytes, kN, kK, x.data(), kK, 1, today.data(), kN);
  const std::vector<RowsInLanes> pk = pack_rows(w.data(), row_bytes, kN, kK);
  for (int64_t g = 0; g < kN / kLaneRows; ++g) {
    rows_in_lanes(pk.data() + g * nb, nb, xq.data(), packed.data() + g * kLaneRows);
  }
  if (std::memcmp(today.data(), packed.data(), today.size() * sizeof(float)) != 0) {
    state.SkipWithError("the packed rows' outputs are not today's kernel's, bit for bit");
    return;
  }

  // Copies of both layouts: one in L2, or enough to be read from memory.
  const size_t copies = hot ? 1 : (size_t{256} << 20) / mat_bytes;
  const size_t pk_bytes = pk.size() * sizeof(RowsInLanes);
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
    matmul(one, DType::kQ4_K, w_copies.data() + next * mat_bytes, row_bytes, kN, kK, x.data(), kK,
           1, today.data(), kN);
    today_s += std::chrono::duration<double>(Clock::now() - t).count();
    t = Clock::now();
    const auto* base = reinterpret_cast<const RowsInLanes*>(pk_copies.data() + next * pk_bytes);
    for (int64_t g = 0; g < kN / kLaneRows; ++g) {
      rows_in_lanes(base + g * nb, nb, xq.data(), packed.data() + g * kLaneRows);
    }
    packed_s += std::chrono::duration<double>(Clock::now() - t).count();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t).count());
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
BENCHMARK(BM_Q4KRowsInLanes)->ArgName("hot")->Arg(1)->Arg(0)->UseManualTime();

}  // namespace
}  // namespace strata
