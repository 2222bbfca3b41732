// Inline pieces shared by the AVX2 ops kernels (ops_avx2.cc, attention*_avx2.cc): exp and the
// loads of KV cache rows. Include only from the SIMD kernel files (*_avx2.cc, compiled with -mavx2
// -mfma -mf16c, and the *_avx512.cc files, which also have them).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"

// The helpers have internal linkage (the unnamed namespace): each file that includes them gets
// its own copies, compiled for that file's instruction set. An inline function with external
// linkage is merged across files by the linker, which could hand an AVX2-only machine the copy
// compiled for AVX-512.
namespace strata::internal::avx2 {
namespace {

// exp(x) to about 1 ulp: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r (the
// Cephes expf coefficients), then the scale 2^n applied as two factors 2^(n/2) so that n may
// reach 128 (overflow to inf) or -150 (gradual underflow) without a bad exponent field.
// exp(-inf) and anything below -104 give exactly 0; NaN passes through.
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-104.0f);
  const __m256 hi = _mm256_set1_ps(88.8f);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_cvtps_epi32(fx);
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 res = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
  res = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), res);
  return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <bool kF16>
inline __m256 load_kv(const uint8_t* row, int64_t d) {
  if constexpr (kF16) {
    return load_f16(reinterpret_cast<const uint16_t*>(row) + d);
  } else {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  }
}

template <bool kF16>
inline float kv_scalar(const uint8_t* row, int64_t d) {
  if constexpr (kF16) {
    uint16_t h;
    std::memcpy(&h, row + d * 2, 2);
    return f16_to_f32(h);
  } else {
    float f;
    std::memcpy(&f, row + d * 4, 4);
    return f;
  }
}

// An attention sink (AttentionExtra::sinks) in a softmax, as every SIMD attention kernel takes
// it, so that all of them give the same bits: the sink joins the maximum m of the cells' scores,
// and exp(sink - m), by exp256, is added after the cells' exps have been summed.
inline float sink_max(float m, float sink) { return std::max(m, sink); }
inline float sink_sum(float sum, float sink, float m) {
  return sum + _mm256_cvtss_f32(exp256(_mm256_set1_ps(sink - m)));
}

}  // namespace
}  // namespace strata::internal::avx2
