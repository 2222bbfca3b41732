// AVX2 + FMA + F16C kernels of the plain types against F32 activations. Entered only after the
// run-time CPU check (matmul.cc); see matmul_avx2.h for the tiling and its determinism rule.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>

#include "core/matmul_avx2.h"
#include "core/quant_blocks.h"

namespace strata::matmul_detail {
namespace {

using avx2::f16;
using avx2::hsum;
using avx2::load256;
using avx2::prefetch_ahead;
using avx2::run_rows;

// ---- F32 / F16 / BF16 weights against F32 activations ----

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
  static float scalar(const uint8_t* w, int64_t i) {
    float v;
    std::memcpy(&v, w + 4 * i, 4);
    return v;
  }
};

struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
  }
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    return f16(h);
  }
};

struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* w, int64_t i) {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

// Two 8-lane accumulators per column over 16 elements a step, then a scalar tail (k need not
// be a multiple of 16 for plain types) fused with explicit FMAs.
template <typename L>
struct FloatKernel {
  static constexpr int kCols = 4;
  template <int C>
  static void tile(const uint8_t* w, const void* const* xs, int64_t k, float* out) {
    const float* x[C];
    __m256 acc0[C], acc1[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const float*>(xs[c]);
      acc0[c] = _mm256_setzero_ps();
      acc1[c] = _mm256_setzero_ps();
    }
    const int64_t kv = k / 16 * 16;
    for (int64_t i = 0; i < kv; i += 16) {
      prefetch_ahead<1>(w + i * L::kBytes);
      const __m256 w0 = L::load(w, i);
      const __m256 w1 = L::load(w, i + 8);
      for (int c = 0; c < C; ++c) {
        acc0[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[c] + i), acc0[c]);
        acc1[c] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[c] + i + 8), acc1[c]);
      }
    }
    for (int c = 0; c < C; ++c) {
      float s = hsum(_mm256_add_ps(acc0[c], acc1[c]));
      for (int64_t i = kv; i < k; ++i) s = std::fma(L::scalar(w, i), x[c][i], s);
      out[c] = s;
    }
  }
};

}  // namespace

const MatmulKernel kF32Avx2 = {nullptr, nullptr, run_rows<FloatKernel<LoadF32>>};
const MatmulKernel kF16Avx2 = {nullptr, nullptr, run_rows<FloatKernel<LoadF16>>};
const MatmulKernel kBF16Avx2 = {nullptr, nullptr, run_rows<FloatKernel<LoadBF16>>};

}  // namespace strata::matmul_detail
