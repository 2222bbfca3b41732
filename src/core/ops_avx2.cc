// AVX2 + FMA + F16C kernels. Entered only when isa_active() >= Isa::kAvx2 (see ops.cc).
//
// Every reduction here runs in an order fixed by the sizes alone (lane-wise accumulation, then
// one fixed horizontal sum, then the scalar tail), so an output element never depends on the
// thread count or on what else is in the batch.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "core/ops_internal.h"
#include "core/simd_avx2.h"

namespace strata::internal::avx2 {
namespace {

using ::strata::avx2::hmax;
using ::strata::avx2::hsum;

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

// A head's K (or V) segment is a short piece of a long cache row and lists may be in any
// order: the hardware prefetcher sees no stream, so fetch a few cells ahead by hand.
constexpr int64_t kPrefetchCells = 6;

inline void prefetch_segment(const uint8_t* base, int32_t cell, const AttentionArgs& a,
                             size_t bytes) {
  const uint8_t* p = base + static_cast<size_t>(cell) * a.kv_row_bytes;
  for (size_t off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

constexpr int kMaxHeads = 4;  // query heads sharing one pass over the K and V rows

inline int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

// Attention for kNh query heads h0.. of one kv group. Each head's arithmetic is the same
// whatever kNh is (its own accumulators, same order), so grouping heads to share the loads of
// K and V rows never changes a result.
template <int kNh, bool kF16>
void attention_group(const AttentionArgs& a, int64_t t, int64_t h0, float* scratch) {
  const int64_t hd = a.head_dim;
  int64_t len = 0;
  const int32_t* cells = attention_cells(a, t, &len);
  const int64_t kvh = h0 / (a.n_head / a.n_head_kv);
  const size_t head_off = static_cast<size_t>(kvh * hd) * (kF16 ? 2 : 4);
  const uint8_t* kbase = static_cast<const uint8_t*>(a.k) + head_off;
  const uint8_t* vbase = static_cast<const uint8_t*>(a.v) + head_off;
  const int64_t len_pad = round_up8(len);
  const int64_t hd_pad = round_up8(hd);
  const int64_t nv = hd / 8 * 8;
  const size_t seg_bytes = static_cast<size_t>(hd) * (kF16 ? 2 : 4);

  const float* q[kNh];
  float* s[kNh];
  float* acc[kNh];
  float* o[kNh];
  for (int j = 0; j < kNh; ++j) {
    q[j] = a.q + t * a.q_tok_stride + (h0 + j) * hd;
    o[j] = a.out + t * a.out_tok_stride + (h0 + j) * hd;
    s[j] = scratch + j * len_pad;
    acc[j] = scratch + kNh * len_pad + j * hd_pad;
  }
  if (len == 0) {
    for (int j = 0; j < kNh; ++j) std::memset(o[j], 0, static_cast<size_t>(hd) * sizeof(float));
    return;
  }

  // Scores. Two accumulators per head (even and odd chunks of head_dim) hide the FMA latency.
  for (int64_t c = 0; c < len; ++c) {
    const uint8_t* kr = kbase + static_cast<size_t>(cells[c]) * a.kv_row_bytes;
    if (c + kPrefetchCells < len) prefetch_segment(kbase, cells[c + kPrefetchCells], a, seg_bytes);
    __m256 s0[kNh], s1[kNh];
    for (int j = 0; j < kNh; ++j) s0[j] = s1[j] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= nv; d += 16) {
      const __m256 k0 = load_kv<kF16>(kr, d);
      const __m256 k1 = load_kv<kF16>(kr, d + 8);
      for (int j = 0; j < kNh; ++j) {
        s0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[j] + d), k0, s0[j]);
        s1[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[j] + d + 8), k1, s1[j]);
      }
    }
    if (d < nv) {
      const __m256 k0 = load_kv<kF16>(kr, d);
      for (int j = 0; j < kNh; ++j) s0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[j] + d), k0, s0[j]);
    }
    for (int j = 0; j < kNh; ++j) {
      float dot = hsum(_mm256_add_ps(s0[j], s1[j]));
      for (int64_t e = nv; e < hd; ++e) dot = std::fma(q[j][e], kv_scalar<kF16>(kr, e), dot);
      s[j][c] = attention_score(a, dot);
    }
  }

  // Softmax with the maximum subtracted. Padding scores are -inf: their exp is exactly 0 and
  // adds nothing to the sum.
  float inv_sum[kNh];
  for (int j = 0; j < kNh; ++j) {
    for (int64_t c = len; c < len_pad; ++c) s[j][c] = -std::numeric_limits<float>::infinity();
    __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t c = 0; c < len_pad; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s[j] + c));
    const __m256 m = _mm256_set1_ps(hmax(mx));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t c = 0; c < len_pad; c += 8) {
      const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s[j] + c), m));
      _mm256_storeu_ps(s[j] + c, p);
      sum = _mm256_add_ps(sum, p);
    }
    inv_sum[j] = 1.0f / hsum(sum);
    std::memset(acc[j], 0, static_cast<size_t>(hd_pad) * sizeof(float));
  }

  // Weighted sum of V rows, in cell order; each V chunk is loaded once for all heads. Four
  // cells per pass halve the loads and stores of the accumulators; every element still gets
  // acc = fma(p_c, v_c, acc) for c = 0, 1, 2... whatever the blocking.
  int64_t c = 0;
  for (; c + 4 <= len; c += 4) {
    const uint8_t* vr[4];
    for (int i = 0; i < 4; ++i) {
      vr[i] = vbase + static_cast<size_t>(cells[c + i]) * a.kv_row_bytes;
      if (c + i + kPrefetchCells < len) {
        prefetch_segment(vbase, cells[c + i + kPrefetchCells], a, seg_bytes);
      }
    }
    for (int64_t d = 0; d < nv; d += 8) {
      const __m256 v0 = load_kv<kF16>(vr[0], d);
      const __m256 v1 = load_kv<kF16>(vr[1], d);
      const __m256 v2 = load_kv<kF16>(vr[2], d);
      const __m256 v3 = load_kv<kF16>(vr[3], d);
      for (int j = 0; j < kNh; ++j) {
        __m256 x = _mm256_loadu_ps(acc[j] + d);
        x = _mm256_fmadd_ps(_mm256_set1_ps(s[j][c]), v0, x);
        x = _mm256_fmadd_ps(_mm256_set1_ps(s[j][c + 1]), v1, x);
        x = _mm256_fmadd_ps(_mm256_set1_ps(s[j][c + 2]), v2, x);
        x = _mm256_fmadd_ps(_mm256_set1_ps(s[j][c + 3]), v3, x);
        _mm256_storeu_ps(acc[j] + d, x);
      }
    }
    for (int64_t e = nv; e < hd; ++e) {
      for (int i = 0; i < 4; ++i) {
        const float vf = kv_scalar<kF16>(vr[i], e);
        for (int j = 0; j < kNh; ++j) acc[j][e] = std::fma(s[j][c + i], vf, acc[j][e]);
      }
    }
  }
  for (; c < len; ++c) {
    const uint8_t* vr = vbase + static_cast<size_t>(cells[c]) * a.kv_row_bytes;
    __m256 p[kNh];
    for (int j = 0; j < kNh; ++j) p[j] = _mm256_set1_ps(s[j][c]);
    for (int64_t d = 0; d < nv; d += 8) {
      const __m256 vv = load_kv<kF16>(vr, d);
      for (int j = 0; j < kNh; ++j) {
        _mm256_storeu_ps(acc[j] + d, _mm256_fmadd_ps(p[j], vv, _mm256_loadu_ps(acc[j] + d)));
      }
    }
    for (int64_t e = nv; e < hd; ++e) {
      const float vf = kv_scalar<kF16>(vr, e);
      for (int j = 0; j < kNh; ++j) acc[j][e] = std::fma(s[j][c], vf, acc[j][e]);
    }
  }
  for (int j = 0; j < kNh; ++j) {
    const __m256 inv = _mm256_set1_ps(inv_sum[j]);
    int64_t d = 0;
    for (; d < nv; d += 8)
      _mm256_storeu_ps(o[j] + d, _mm256_mul_ps(_mm256_loadu_ps(acc[j] + d), inv));
    for (; d < hd; ++d) o[j][d] = acc[j][d] * inv_sum[j];
  }
}

template <bool kF16>
void attention_heads_t(const AttentionArgs& a, int64_t t, int64_t h0, int64_t h1, float* scratch) {
  for (int64_t h = h0; h < h1; h += kMaxHeads) {
    switch (std::min<int64_t>(kMaxHeads, h1 - h)) {
      case 1:
        attention_group<1, kF16>(a, t, h, scratch);
        break;
      case 2:
        attention_group<2, kF16>(a, t, h, scratch);
        break;
      case 3:
        attention_group<3, kF16>(a, t, h, scratch);
        break;
      default:
        attention_group<4, kF16>(a, t, h, scratch);
        break;
    }
  }
}

}  // namespace

size_t attention_scratch_floats(const AttentionArgs& a) {
  return static_cast<size_t>(kMaxHeads * (round_up8(a.max_len) + round_up8(a.head_dim)));
}

void attention_heads(const AttentionArgs& a, int64_t t, int64_t h0, int64_t h1, float* scratch) {
  STRATA_DCHECK(a.tok[2 * t + 1] >= 0 && a.tok[2 * t + 1] <= a.max_len);
  if (a.kv_dtype == DType::kF16) {
    attention_heads_t<true>(a, t, h0, h1, scratch);
  } else {
    attention_heads_t<false>(a, t, h0, h1, scratch);
  }
}

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
  std::vector<float> cs(static_cast<size_t>(half) * 2);
  std::vector<float> wide(static_cast<size_t>(n_rot) * 2);  // normal mode: C and S per dim
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
