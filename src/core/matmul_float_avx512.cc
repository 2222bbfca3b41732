// AVX-512 kernels of the plain types (F32, F16, BF16) against F32 activations, bit-identical
// to the AVX2 kernels (matmul_float_avx2.cc). Entered only after the run-time CPU check.
//
// The AVX2 kernel keeps two 8-lane accumulators per output, for elements i..i+7 and i+8..i+15
// of every 16-element step, and ends with hsum(acc0 + acc1) and a scalar tail of fused
// multiply-adds. Here one 16-lane register holds both (acc0 in the low half, acc1 in the high),
// so one fused multiply-add does the step of both, lane for lane. The tile is two rows by up to
// six columns: each weight load serves six columns, each activation load two rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/matmul_avx512.h"
#include "core/quant.h"

namespace strata::matmul_detail::avx512 {
namespace {

// The 16 weights at element i as floats (exact conversions, as the AVX2 kernel's).
struct LoadF32 {
  static constexpr DType kType = DType::kF32;
  static __m512 load(const uint8_t* w, int64_t i) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
};

struct LoadF16 {
  static constexpr DType kType = DType::kF16;
  static __m512 load(const uint8_t* w, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
  }
};

struct LoadBF16 {
  static constexpr DType kType = DType::kBF16;
  static __m512 load(const uint8_t* w, int64_t i) {
    const __m512i v =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
};

template <typename L>
struct FloatKernel {
  static constexpr int kRows = 2;
  static constexpr int kCols = 6;
  static constexpr int64_t kBytes = L::kType == DType::kF32 ? 4 : 2;  // per weight

  // out[r][c] for weight rows w[0..kRows) and C columns.
  template <int C>
  static void tile(const uint8_t* const* w, const float* const* x, int64_t k, float (*out)[C]) {
    __m512 acc[kRows][C];
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    const int64_t kv = k / 16 * 16;
    for (int64_t i = 0; i < kv; i += 16) {
      __m512 wv[kRows];
      for (int r = 0; r < kRows; ++r) {
        avx2::prefetch_ahead<1>(w[r] + i * kBytes);
        wv[r] = L::load(w[r], i);
      }
      for (int c = 0; c < C; ++c) {
        const __m512 xv = _mm512_loadu_ps(x[c] + i);
        for (int r = 0; r < kRows; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float tail[16];  // the last k % 16 weights, by the scalar conversion (exact, the same)
      dequantize_row(L::kType, w[r] + kv * kBytes, tail, k - kv);
      for (int c = 0; c < C; ++c) {
        float s = avx2::hsum(_mm256_add_ps(low_ps(acc[r][c]), high_ps(acc[r][c])));
        for (int64_t i = kv; i < k; ++i) s = std::fma(tail[i - kv], x[c][i], s);
        out[r][c] = s;
      }
    }
  }

  template <int C>
  static void tile_n(int nc, const uint8_t* const* w, const float* const* x, int rows,
                     const MatmulArgs& a, int64_t r, int64_t j) {
    if constexpr (C > 1) {
      if (nc < C) return tile_n<C - 1>(nc, w, x, rows, a, r, j);
    }
    float out[kRows][C];
    tile<C>(w, x, a.k, out);
    for (int i = 0; i < rows; ++i) {
      for (int c = 0; c < C; ++c) a.y[(j + c) * a.y_stride + r + i] = out[i][c];
    }
  }

  // Pairs of rows (a last single row is paired with itself), tiles of kCols columns.
  static void rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
    const float* x[kCols];
    const uint8_t* w[kRows];
    for (int64_t r = r0; r < r1; r += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
      for (int i = 0; i < kRows; ++i) w[i] = a.w + (r + std::min(i, rows - 1)) * a.w_row_bytes;
      for (int64_t j = 0; j < a.m; j += kCols) {
        const int nc = static_cast<int>(std::min<int64_t>(kCols, a.m - j));
        for (int c = 0; c < nc; ++c) x[c] = a.x + (j + c) * a.x_stride;
        tile_n<kCols>(nc, w, x, rows, a, r, j);
      }
    }
  }
};

}  // namespace
}  // namespace strata::matmul_detail::avx512

namespace strata::matmul_detail {

const MatmulKernel kF32Avx512 = {nullptr, nullptr, avx512::FloatKernel<avx512::LoadF32>::rows,
                                 nullptr, avx512::kMinColumns};
const MatmulKernel kF16Avx512 = {nullptr, nullptr, avx512::FloatKernel<avx512::LoadF16>::rows,
                                 nullptr, avx512::kMinColumns};
const MatmulKernel kBF16Avx512 = {nullptr, nullptr, avx512::FloatKernel<avx512::LoadBF16>::rows,
                                  nullptr, avx512::kMinColumns};

}  // namespace strata::matmul_detail
