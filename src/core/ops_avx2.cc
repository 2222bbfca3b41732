// AVX2 + FMA kernels of the row ops (attention has files of its own). Entered only when
// isa_active() >= Isa::kAvx2 (see ops.cc).
//
// Every reduction here runs in an order fixed by the sizes alone (lane-wise accumulation, then
// one fixed horizontal sum, then the scalar tail), so an output element never depends on the
// thread count or on what else is in the batch.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/ops_avx2.h"
#include "core/ops_internal.h"
#include "core/simd_avx2.h"
#include "core/small_list.h"

namespace strata::internal::avx2 {
namespace {

using ::strata::avx2::hmax;

inline double hsum_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// A mask whose first `rem` (0..8) lanes are set, for masked loads and stores of row tails.
inline __m256i tail_mask(int64_t rem) {
  alignas(32) static constexpr int32_t kBits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                    0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kBits + 8 - rem));
}

}  // namespace

// Products are rounded to float, then summed in double as the reference does (see ops_ref.cc);
// eight double lanes, then a fixed horizontal sum, then the tail in order.
void rms_norm(const float* x, size_t x_stride, const float* weight, float* y, size_t y_stride,
              int64_t n, int64_t rows, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    __m256d a0 = _mm256_setzero_pd();
    __m256d a1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      const __m256 sq = _mm256_mul_ps(v, v);
      a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
      a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    double sum = hsum_pd(_mm256_add_pd(a0, a1));
    for (; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    i = 0;
    if (weight != nullptr) {
      for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vs);
        _mm256_storeu_ps(yr + i, _mm256_mul_ps(v, _mm256_loadu_ps(weight + i)));
      }
      for (; i < n; ++i) yr[i] = (xr[i] * scale) * weight[i];
    } else {
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(xr + i), vs));
      for (; i < n; ++i) yr[i] = xr[i] * scale;
    }
  }
}

void binary(BinaryOp op, const float* a, size_t a_stride, const float* b, size_t b_stride,
            int64_t b_rows, float* y, size_t y_stride, int64_t n, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * a_stride;
    const float* br = b + (r % b_rows) * b_stride;
    float* yr = y + r * y_stride;
    int64_t i = 0;
    if (op == BinaryOp::kAdd) {
      for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(yr + i, _mm256_add_ps(_mm256_loadu_ps(ar + i), _mm256_loadu_ps(br + i)));
      }
      for (; i < n; ++i) yr[i] = ar[i] + br[i];
    } else {
      for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(ar + i), _mm256_loadu_ps(br + i)));
      }
      for (; i < n; ++i) yr[i] = ar[i] * br[i];
    }
  }
}

void swiglu(const float* gate, size_t gate_stride, const float* up, size_t up_stride, float* y,
            size_t y_stride, int64_t n, int64_t rows) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* yr = y + r * y_stride;
    for (int64_t i = 0; i < n; i += 8) {
      // The tail goes through the same vector code under a mask, so every element of a row
      // gets the same exp.
      const __m256i m = tail_mask(std::min<int64_t>(8, n - i));
      const __m256 gv = _mm256_maskload_ps(g + i, m);
      const __m256 uv = _mm256_maskload_ps(u + i, m);
      const __m256 e = exp256(_mm256_xor_ps(gv, sign));
      const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_maskstore_ps(yr + i, m, _mm256_mul_ps(silu, uv));
    }
  }
}

// Each pair becomes (fma(x0, c, -x1*s), fma(x1, c, x0*s)) in both modes and in the scalar
// tails: one fused product, written out because the compiler would otherwise fuse some of them
// on its own (GCC contracts a*b + c even between intrinsics). This is what llama.cpp computes
// when built with FMA; without it (our reference) results differ by at most a product's
// rounding. Normal mode: x * (c0 c0 c1 c1 ..) + swap_pairs(x) * (-s0 s0 -s1 s1 ..).
void rope(float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens, size_t tok_stride,
          const int32_t* pos, int64_t n_rot, RopeMode mode, float freq_base, float freq_scale) {
  STRATA_CHECK(n_rot % 2 == 0 && n_rot <= head_dim, "rope: n_rot must be even, <= head_dim");
  const int64_t half = n_rot / 2;
  // In place up to head size 256 (core/small_list.h).
  SmallList<float, 256> cs(static_cast<size_t>(half) * 2);
  SmallList<float, 512> wide(static_cast<size_t>(n_rot) * 2);  // normal mode: C and S per dim
  float* cos_t = cs.data();
  float* sin_t = cs.data() + half;
  for (int64_t t = 0; t < n_tokens; ++t) {
    rope_angles(pos[t], n_rot, freq_base, freq_scale, cos_t, sin_t);
    if (mode == RopeMode::kNeox) {
      for (int64_t h = 0; h < n_head; ++h) {
        float* xh = x + t * tok_stride + h * head_dim;
        int64_t i = 0;
        for (; i + 8 <= half; i += 8) {
          const __m256 x0 = _mm256_loadu_ps(xh + i);
          const __m256 x1 = _mm256_loadu_ps(xh + i + half);
          const __m256 c = _mm256_loadu_ps(cos_t + i);
          const __m256 s = _mm256_loadu_ps(sin_t + i);
          _mm256_storeu_ps(xh + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
          _mm256_storeu_ps(xh + i + half, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)));
        }
        for (; i < half; ++i) {
          const float x0 = xh[i];
          const float x1 = xh[i + half];
          xh[i] = std::fma(x0, cos_t[i], -(x1 * sin_t[i]));
          xh[i + half] = std::fma(x1, cos_t[i], x0 * sin_t[i]);
        }
      }
    } else {
      float* cw = wide.data();
      float* sw = wide.data() + n_rot;
      for (int64_t i = 0; i < half; ++i) {
        cw[2 * i] = cw[2 * i + 1] = cos_t[i];
        sw[2 * i] = -sin_t[i];
        sw[2 * i + 1] = sin_t[i];
      }
      for (int64_t h = 0; h < n_head; ++h) {
        float* xh = x + t * tok_stride + h * head_dim;
        int64_t d = 0;
        for (; d + 8 <= n_rot; d += 8) {
          const __m256 v = _mm256_loadu_ps(xh + d);
          const __m256 swapped = _mm256_permute_ps(v, 0xb1);
          const __m256 cross = _mm256_mul_ps(swapped, _mm256_loadu_ps(sw + d));
          _mm256_storeu_ps(xh + d, _mm256_fmadd_ps(v, _mm256_loadu_ps(cw + d), cross));
        }
        for (int64_t i = d / 2; i < half; ++i) {
          const float x0 = xh[2 * i];
          const float x1 = xh[2 * i + 1];
          xh[2 * i] = std::fma(x0, cos_t[i], -(x1 * sin_t[i]));
          xh[2 * i + 1] = std::fma(x1, cos_t[i], x0 * sin_t[i]);
        }
      }
    }
  }
}

// The first index of the maximum, as the scalar loop `if (x[i] > best)` from best = -inf
// finds it: NaNs are skipped (max_ps returns its second operand when the first is NaN), and a
// row with nothing above -inf gives 0.
int32_t argmax_row(const float* x, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  __m256 mx = _mm256_set1_ps(neg_inf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(_mm256_loadu_ps(x + i), mx);
  float best = hmax(mx);
  for (; i < n; ++i) {
    if (x[i] > best) best = x[i];
  }
  if (!(best > neg_inf)) return 0;
  i = 0;
  const __m256 vb = _mm256_set1_ps(best);
  for (; i + 8 <= n; i += 8) {
    const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vb, _CMP_EQ_OQ));
    if (bits != 0) return static_cast<int32_t>(i + __builtin_ctz(static_cast<unsigned>(bits)));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return static_cast<int32_t>(i);
  }
  return 0;
}

}  // namespace strata::internal::avx2
