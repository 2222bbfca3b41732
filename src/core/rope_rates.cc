#include "core/rope_rates.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace strata {

namespace ref {

// The angles of a token are computed once and applied to every head. Scalar on purpose: the
// cos/sin per (token, pair) dominate and the rotation itself is a few multiplies per element.
void rope_rates(float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens, size_t tok_stride,
                const int32_t* pos, int64_t n_rot, RopeMode mode, const float* rates,
                float mscale) {
  STRATA_CHECK(n_rot % 2 == 0 && n_rot >= 2 && n_rot <= head_dim,
               "rope_rates: n_rot must be even and in [2, head_dim]");
  const int64_t half = n_rot / 2;
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float p = static_cast<float>(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float theta = p * rates[i];
      cos_t[static_cast<size_t>(i)] = std::cos(theta) * mscale;
      sin_t[static_cast<size_t>(i)] = std::sin(theta) * mscale;
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* xh = x + static_cast<size_t>(t) * tok_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = mode == RopeMode::kNeox ? i : 2 * i;
        const int64_t i1 = mode == RopeMode::kNeox ? i + half : 2 * i + 1;
        const float x0 = xh[i0];
        const float x1 = xh[i1];
        xh[i0] = x0 * cos_t[static_cast<size_t>(i)] - x1 * sin_t[static_cast<size_t>(i)];
        xh[i1] = x0 * sin_t[static_cast<size_t>(i)] + x1 * cos_t[static_cast<size_t>(i)];
      }
    }
  }
}

}  // namespace ref

void rope_rates(ThreadPool& pool, float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens,
                size_t tok_stride, const int32_t* pos, int64_t n_rot, RopeMode mode,
                const float* rates, float mscale) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n_head * n_rot, 1));
  pool.parallel_for(n_tokens, grain, [&](int, int64_t begin, int64_t end) {
    ref::rope_rates(x + static_cast<size_t>(begin) * tok_stride, head_dim, n_head, end - begin,
                    tok_stride, pos + begin, n_rot, mode, rates, mscale);
  });
}

}  // namespace strata
