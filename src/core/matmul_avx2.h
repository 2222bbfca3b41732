// Pieces shared by the AVX2 matmul kernels (matmul_*_avx2.cc): loads, the tile driver, the
// integer dot products and the activation quantisation steps. Include only from *_avx2.cc
// files (compiled with -mavx2) and their AVX-VNNI builds (*_avxvnni.cc: the same source again,
// with STRATA_AVX_VNNI defined and -mavxvnni).
//
// Every kernel computes a tile of C activation columns against one weight row, loading each
// weight block once for all C columns. Determinism across batch sizes rests on one rule: the
// operations applied to one column's accumulator are written once, in a loop over c, and are
// the same whatever C is, so column j gives the same bits alone or inside a batch of 17.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/matmul_internal.h"
#include "core/quant_blocks.h"
#include "core/simd_avx2.h"

// The kernel table's entries that a file of these defines: kQ8_0Avx2, or kQ8_0AvxVnni in its
// AVX-VNNI build (STRATA_AVX2_ENTRY(kQ8_0)).
#if defined(STRATA_AVX_VNNI)
#define STRATA_AVX2_ENTRY(name) name##AvxVnni
#else
#define STRATA_AVX2_ENTRY(name) name##Avx2
#endif

// The helpers have internal linkage (the unnamed namespace): each file that includes them gets
// its own copies, compiled for that file's instruction set (an AVX-VNNI build keeps the
// namespace's name). An inline function with external linkage is merged across files by the
// linker, which could hand an AVX2-only machine the copy compiled for AVX-512.
namespace strata::matmul_detail::avx2 {
namespace {

using ::strata::avx2::hmax;
using ::strata::avx2::hsum;

// Software prefetch this far ahead of the weight stream: measured ~20% faster batch-1 GEMV
// than the hardware prefetchers alone on the development machine (Zen). 2048 bytes was
// enough for kernels at ~25 GB/s a core; at 30+ it no longer covers the memory's latency.
// Measured on Zen 5 over the matrices of a 1024-wide 8-layer model in decode order (two
// threads, each distance timed in the same process, medians of 60): from 2048 to 8192 bytes,
// q8_0 61 -> 67 GB/s, q6_K 67 -> 80, q4_K 55 -> 57; 12288 and 16384 were no better.
inline constexpr int kPrefetchBytes = 8192;

// One prefetch per cache line of an object of `bytes` bytes at p, kPrefetchBytes ahead.
template <size_t kBytes>
inline void prefetch_ahead(const void* p) {
#pragma GCC unroll 16
  for (size_t o = 0; o < kBytes; o += 64) {
    _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes + o, _MM_HINT_T0);
  }
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// ---- Integer dot products: AVX2, or AVX-VNNI in the *_avxvnni.cc builds ----
//
// Each int32 lane gets the same integer either way: VNNI's vpdpbusd sums the four u8 * s8
// products of its lane that maddubs + madd(1) sum in two steps, and vpdpwssd adds the lane's
// two i16 * i16 products as madd + add do (wrapping alike). So a kernel written with these
// gives the same bits on both levels, provided maddubs' 16-bit pair sums never saturate, which
// every caller argues (vpdpbusd has no intermediate rounding to saturate).

// Lane i: the sum of u[4i + t] * s[4i + t] over t < 4; u unsigned, s signed bytes.
inline __m256i dot_u8i8(__m256i u, __m256i s) {
#if defined(STRATA_AVX_VNNI)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// dot_u8i8(u0, s0) + dot_u8i8(u1, s1), where each 16-bit lane of the two maddubs summed stays in
// range (the AVX2 path adds them in 16 bits before widening).
inline __m256i dot_u8i8_2(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#if defined(STRATA_AVX_VNNI)
  return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u0, s0), u1, s1);
#else
  const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
#endif
}

// acc + madd(a, b): lane i gains a[2i] * b[2i] + a[2i + 1] * b[2i + 1] (signed words).
inline __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
#if defined(STRATA_AVX_VNNI)
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// [a0+a1, a2+a3, b0+b1, b2+b3] per 128-bit half, as vphaddd but in two shuffles and an add:
// vphaddd is several times slower on Zen 3.
inline __m256i pair_sum(__m256i a, __m256i b) {
  const __m256 fa = _mm256_castsi256_ps(a), fb = _mm256_castsi256_ps(b);
  const __m256i even = _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0x88));
  const __m256i odd = _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0xdd));
  return _mm256_add_epi32(even, odd);
}

// 16 bytes of nibbles -> 32 bytes: the low nibbles (elements 0..15), then the high ones.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
}

// The 32 signed levels (kIQ4NLValues) of an IQ4_NL block or IQ4_XS sub-block's 16 bytes.
inline __m256i iq4_values(const uint8_t* qs) {
  const __m256i grid =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  return _mm256_shuffle_epi8(grid, unpack_nibbles(qs));
}

// Sum of the 8 int32 lanes (exact).
inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ---- Driver ----

// Rows in small groups so that a tile's activations stay in L1 while a few weight rows pass
// over them; the weights themselves are read from memory once.
inline constexpr int64_t kRowGroup = 4;

// K::tile<C>(weight row, C activation columns, k, out[C]).
template <typename K, int C>
void tile_rows(const MatmulArgs& a, int64_t r0, int64_t r1, const void* const* cols, int64_t j) {
  for (int64_t r = r0; r < r1; ++r) {
    float out[C];
    K::template tile<C>(a.w + r * a.w_row_bytes, cols, a.k, out);
    for (int c = 0; c < C; ++c) a.y[(j + c) * a.y_stride + r] = out[c];
  }
}

// tile_rows<K, nc> for a run-time nc in 1..C.
template <typename K, int C>
void tile_rows_n(int nc, const MatmulArgs& a, int64_t r0, int64_t r1, const void* const* cols,
                 int64_t j) {
  if constexpr (C > 1) {
    if (nc < C) return tile_rows_n<K, C - 1>(nc, a, r0, r1, cols, j);
  }
  tile_rows<K, C>(a, r0, r1, cols, j);
}

// The `rows` entry of a kernel K: tiles of K::kCols columns over groups of rows.
template <typename K>
void run_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  constexpr int kCols = K::kCols;
  const void* cols[kCols];
  for (int64_t rg = r0; rg < r1; rg += kRowGroup) {
    const int64_t rg_end = std::min(r1, rg + kRowGroup);
    for (int64_t j = 0; j < a.m; j += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, a.m - j));
      for (int c = 0; c < nc; ++c) {
        cols[c] = a.xq != nullptr ? static_cast<const void*>(a.xq + (j + c) * a.xq_col_bytes)
                                  : static_cast<const void*>(a.x + (j + c) * a.x_stride);
      }
      tile_rows_n<K, kCols>(nc, a, rg, rg_end, cols, j);
    }
  }
}

// ---- Activation quantisation, bit-identical to quantize_row_q8_0 / _q8_k ----

// round half to even and clamp to +-127, as round_clamp() in quant_util.h; then 8 int32 lanes.
inline __m256i quant8(__m256 v, __m256 scale) {
  const __m256 r =
      _mm256_round_ps(_mm256_mul_ps(v, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(c);
}

// 32 floats -> 32 int8 in order.
inline __m256i quant32(const float* x, __m256 scale) {
  const __m256i i0 = quant8(_mm256_loadu_ps(x), scale);
  const __m256i i1 = quant8(_mm256_loadu_ps(x + 8), scale);
  const __m256i i2 = quant8(_mm256_loadu_ps(x + 16), scale);
  const __m256i i3 = quant8(_mm256_loadu_ps(x + 24), scale);
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// n a multiple of 8.
inline float abs_max(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  return hmax(m);
}

}  // namespace
}  // namespace strata::matmul_detail::avx2
