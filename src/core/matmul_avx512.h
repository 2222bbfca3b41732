// Pieces shared by the AVX-512 matmul kernels (matmul_*_avx512.cc, compiled with AVX-512
// F/BW/VL/VNNI as well as AVX2): the tile driver and 512-bit helpers. Include only from those
// files.
//
// Every AVX-512 kernel gives the same bits as the AVX2 kernel of its dtype. A 512-bit register
// holds two of the AVX2 kernel's 256-bit accumulators: the same activation column against two
// weight rows (rows r and r + 1 in the low and high halves). Each half goes through the AVX2
// kernel's operations on its lanes in its order: the integer parts are exact sums however they
// are grouped (VNNI's dpbusd / dpwssd give the integers that maddubs + madd + add give), and
// the float parts (convert, multiply, fused multiply-add, the final horizontal sum) are the
// same instructions lane for lane. So a split over machines of different instruction sets
// still gives one answer, and the AVX2 tests' bit-for-bit guarantees carry over.
//
// The tile is 2 * RP weight rows by C activation columns: each weight block is loaded once for
// C columns, each activation block once for 2 * RP rows. The driver runs the rows of a thread's
// range in groups of 2 * RP; a last group with fewer rows repeats its last row and drops the
// copies' results.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/matmul_avx2.h"
#include "core/matmul_internal.h"

// The helpers have internal linkage (the unnamed namespace): each file that includes them gets
// its own copies, compiled for that file's instruction set. An inline function with external
// linkage is merged across files by the linker, which could hand an AVX2-only machine the copy
// compiled for AVX-512.
namespace strata::matmul_detail::avx512 {
namespace {

using avx2::load256;

// MatmulKernel::min_columns of the kernels: one column (batch-1 decode) runs the AVX2 kernel,
// which streams a matrix from memory faster (measured with strata_bench_kernels
// BM_Matmul/DTYPE/1/0: q8_0 445 vs 760 us, q6_K 454 vs 584, f16 935 vs 1510, one thread).
inline constexpr int64_t kMinColumns = 2;

// Two 32-byte loads as the low and high halves of one register.
inline __m512i pair256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}

// 32 bytes in both halves (one load).
inline __m512i both256(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// 8 floats in both halves (one load).
inline __m512 both256_ps(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

// One float in the low 8 lanes, another in the high 8.
inline __m512 halves_ps(float lo, float hi) {
  return _mm512_insertf32x4(_mm512_insertf32x4(_mm512_set1_ps(lo), _mm_set1_ps(hi), 2),
                            _mm_set1_ps(hi), 3);
}

inline __m256 low_ps(__m512 v) { return _mm512_castps512_ps256(v); }
inline __m256 high_ps(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// ---- Driver ----
//
// A kernel K cuts a row into K::steps(k) steps and provides one or both of:
//   K::Weights                     one step of two rows, unpacked for the multiplies
//   K::unpack(row a, row b, s, k)  that unpacking, K::kStepBytes of each row (load<K>: with the
//                                  prefetch of each row ahead)
//   K::step<RP, C>(Weights[RP], columns, s, acc[RP][C])   one step of every accumulator
//   (with K::kPrepareMinCols: an Unpacks kernel), and
//   K::step_direct<RP, C>(rows, columns, s, acc)  the same from the stored rows, unpacking as
//                                  it goes
// and, optionally for pair_rows (one column), K::tail(rows, column, k, acc): what the steps
// leave of the row (a kernel whose step is several blocks).
// With at least K::kPrepareMinCols columns (and a work area: MatmulKernel::work_bytes), the
// rows of a group are unpacked once into the thread's work area and every tile of columns
// reads them; with fewer they are unpacked as they are used. Measured (strata_bench_kernels
// BM_Matmul, 2 threads): the work area's stores and loads cost more than unpacking again up to
// about 32 columns for q8_0, q4_0 and mxfp4; the K-quants' step_direct is faster at every
// width (q4_K at 16 columns from memory: 808 vs 1863 us; at 256 in cache: 386 vs 455; a 1B
// q4_K_M model's 512-token prompt alike, its batch-32 decode 150-190 vs 104 tok/s), so they
// have no work area: they provide step_direct only. Either way each accumulator sees the same
// operations.

// A kernel that can unpack rows into the work area: K::Weights, K::unpack, K::kStepBytes, K::step
// and K::kPrepareMinCols.
template <typename K>
concept Unpacks = requires {
  typename K::Weights;
};

// Each of n rows' own stream, prefetched ahead of step s.
template <typename K>
void prefetch_rows(const uint8_t* const* rows, int n, int64_t s) {
  for (int r = 0; r < n; ++r) avx2::prefetch_ahead<K::kStepBytes>(rows[r] + s * K::kStepBytes);
}

// Step s of the rows pair[0] and pair[1], unpacked, with each row's stream prefetched ahead.
template <typename K>
typename K::Weights load(const uint8_t* const* pair, int64_t s, int64_t k) {
  prefetch_rows<K>(pair, 2, s);
  return K::unpack(pair[0], pair[1], s, k);
}

template <typename K>
size_t work_bytes(int64_t k) {
  return static_cast<size_t>(K::steps(k)) * K::kRowPairs * sizeof(typename K::Weights);
}

// 2 * RP rows (prepared: their unpacked weights, else nullptr) by C columns:
// out[row][column].
template <typename K, int RP, int C>
void tile(const void* prepared, const uint8_t* const* w, const void* const* cols, int64_t k,
          float (*out)[C]) {
  __m512 acc[RP][C];
  for (int r = 0; r < RP; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t steps = K::steps(k);
  for (int64_t s = 0; s < steps; ++s) {
    if constexpr (Unpacks<K>) {
      if (prepared != nullptr) {
        K::template step<RP, C>(static_cast<const typename K::Weights*>(prepared) + s * RP, cols, s,
                                acc);
        continue;
      }
    }
    if constexpr (requires { &K::template step_direct<RP, C>; }) {
      prefetch_rows<K>(w, 2 * RP, s);
      K::template step_direct<RP, C>(w, cols, s, acc);
    } else {
      typename K::Weights wv[RP];
      for (int r = 0; r < RP; ++r) wv[r] = load<K>(w + 2 * r, s, k);
      K::template step<RP, C>(wv, cols, s, acc);
    }
  }
  for (int r = 0; r < RP; ++r) {
    for (int c = 0; c < C; ++c) {
      out[2 * r][c] = avx2::hsum(low_ps(acc[r][c]));
      out[2 * r + 1][c] = avx2::hsum(high_ps(acc[r][c]));
    }
  }
}

// tile<K, RP, nc> for a run-time nc in 1..C, results stored for the group's real rows.
template <typename K, int RP, int C>
void tile_n(int nc, const void* prepared, const uint8_t* const* w, int rows, const MatmulArgs& a,
            int64_t r, const void* const* cols, int64_t j) {
  if constexpr (C > 1) {
    if (nc < C) return tile_n<K, RP, C - 1>(nc, prepared, w, rows, a, r, cols, j);
  }
  float out[2 * RP][C];
  tile<K, RP, C>(prepared, w, cols, a.k, out);
  for (int i = 0; i < rows; ++i) {
    for (int c = 0; c < C; ++c) a.y[(j + c) * a.y_stride + r + i] = out[i][c];
  }
}

// The `rows` entry of a kernel K: groups of 2 * K::kRowPairs rows, tiles of K::kCols columns.
// A last group with fewer rows repeats its last row and drops the copies' results.
template <typename K>
void run_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  constexpr int kCols = K::kCols, kRP = K::kRowPairs;
  bool prepare = false;
  if constexpr (Unpacks<K>) prepare = a.m >= K::kPrepareMinCols && a.work != nullptr;
  const void* cols[kCols];
  const uint8_t* w[2 * kRP];
  for (int64_t r = r0; r < r1; r += 2 * kRP) {
    const int rows = static_cast<int>(std::min<int64_t>(2 * kRP, r1 - r));
    for (int i = 0; i < 2 * kRP; ++i) w[i] = a.w + (r + std::min(i, rows - 1)) * a.w_row_bytes;
    if constexpr (Unpacks<K>) {
      if (prepare) {
        auto* work = reinterpret_cast<typename K::Weights*>(a.work);
        for (int64_t s = 0; s < K::steps(a.k); ++s) {
          for (int p = 0; p < kRP; ++p) {
            work[s * kRP + p] = load<K>(w + 2 * p, s, a.k);
          }
        }
      }
    }
    for (int64_t j = 0; j < a.m; j += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, a.m - j));
      for (int c = 0; c < nc; ++c) cols[c] = a.column(j + c);
      tile_n<K, kRP, kCols>(nc, prepare ? a.work : nullptr, w, rows, a, r, cols, j);
    }
  }
}

// The `rows` entry of a kernel K's narrow kernel (MatmulKernel::narrow: one column, batch-1
// decode): rows two at a time as one tile<K, 1, 1> each (a last odd row paired with itself), so
// the bits are the tiles'. The pair's bytes are prefetched as one stream, twice as fast as each
// row: the tiles' prefetch of each row's own stream made two rows at once slower from memory
// than the AVX2 kernels' one row (see docs/engine.md). A kernel whose steps may stop short of
// the row's end (a step of several blocks) finishes it with K::tail(rows, column, k, acc).
template <typename K>
void pair_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const int64_t steps = K::steps(a.k);
  for (int64_t j = 0; j < a.m; ++j) {
    const void* col = a.column(j);
    for (int64_t r = r0; r < r1; r += 2) {
      const uint8_t* rows[2] = {a.w + r * a.w_row_bytes, a.w + r * a.w_row_bytes};
      if (r + 1 < r1) rows[1] += a.w_row_bytes;
      __m512 acc[1][1] = {{_mm512_setzero_ps()}};
      for (int64_t s = 0; s < steps; ++s) {
        avx2::prefetch_ahead<2 * K::kStepBytes>(rows[0] + 2 * s * K::kStepBytes);
        if constexpr (Unpacks<K>) {
          const typename K::Weights w = K::unpack(rows[0], rows[1], s, a.k);
          K::template step<1, 1>(&w, &col, s, acc);
        } else {
          K::template step_direct<1, 1>(rows, &col, s, acc);
        }
      }
      if constexpr (requires { &K::tail; }) {
        // The steps prefetched 2 * steps * kStepBytes of the pair's 2 * w_row_bytes: the rest,
        // kPrefetchBytes ahead of where the tail reads. Without it a row of one super-block
        // (k = 256: a mixture's down experts) was never prefetched.
        for (auto o = static_cast<size_t>(2 * steps) * K::kStepBytes; o < 2 * a.w_row_bytes;
             o += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(rows[0]) + avx2::kPrefetchBytes + o,
                       _MM_HINT_T0);
        }
        K::tail(rows, col, a.k, acc);
      }
      a.y[j * a.y_stride + r] = avx2::hsum(low_ps(acc[0][0]));
      if (r + 1 < r1) a.y[j * a.y_stride + r + 1] = avx2::hsum(high_ps(acc[0][0]));
    }
  }
}

}  // namespace
}  // namespace strata::matmul_detail::avx512
