// Horizontal reductions for the AVX2 kernels, in one fixed order so that a reduction gives the
// same bits wherever it is used. Include only from *_avx2.cc files (compiled with -mavx2).
#pragma once

#include <immintrin.h>

// The helpers have internal linkage (the unnamed namespace): each file that includes them gets
// its own copies, compiled for that file's instruction set. An inline function with external
// linkage is merged across files by the linker, which could hand an AVX2-only machine the copy
// compiled for AVX-512.
namespace strata::avx2 {
namespace {

// Lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace strata::avx2
