// Scalar helpers shared by the quantisers of quant_legacy.cc and quant_k.cc.
#pragma once

#include <cmath>

#include "core/quant_blocks.h"

namespace strata::quant_util {

// Round half to even (the default FP mode), as _mm256_round_ps does in the SIMD quantisers, and
// clamp in float so that NaN and huge values cannot reach an undefined float->int cast.
inline int round_clamp(float v, float lo, float hi) {
  return static_cast<int>(std::fmin(std::fmax(std::nearbyint(v), lo), hi));
}

inline float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

// The element of largest magnitude, with its sign (the first one on ties).
inline float signed_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Index of the level of kIQ4NLValues nearest to v (the lower one on ties).
inline int iq4_nearest(float v) {
  int best = 0;
  for (int i = 1; i < 16; ++i) {
    if (std::fabs(v - kIQ4NLValues[i]) < std::fabs(v - kIQ4NLValues[best])) best = i;
  }
  return best;
}

}  // namespace strata::quant_util
