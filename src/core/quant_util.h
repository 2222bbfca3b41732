// Scalar helpers shared by the quantisers of quant_legacy.cc and quant_k.cc.
#pragma once

#include <cmath>

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

}  // namespace strata::quant_util
