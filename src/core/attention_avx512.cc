// AVX-512 attention: the tiling of attention_tile.h with the AVX2 kernel's arithmetic
// (attention_avx2.cc), 16 lanes at a time, giving its bits. A split over a machine with AVX-512
// and one without must answer as either would alone.
//
// Scores: the AVX2 kernel keeps two 8-lane accumulators per query and cell, s0 for the even
// chunks of 8 dims and s1 for the odd ones. Here one register holds both, [s0 | s1]: one
// 16-float load of q and of the K row and one FMA do the AVX2 kernel's two. An odd last chunk
// of 8 (head_dim % 16 >= 8) goes to the low half alone, as it goes to s0. Then x = s0 + s1 and
// hsum's pairs in hsum's operand order, for eight cells at once (hsum8_halves).
// V: every output element is its own chain acc = fma(p_c, v_c, acc) over the cells in order,
// and the lanes are independent: 16 dims per register, and masked lanes for the dims past the
// last whole vector (an FMA lane rounds as the AVX2 kernel's scalar std::fma does).
// Softmax: exp of 16 scores per instruction (exp256's operations lane for lane); the maximum
// and the sum of the exps run over chunks of 8 in the AVX2 order.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/attention_tile.h"
#include "core/ops_avx2.h"
#include "core/ops_internal.h"
#include "core/simd_avx2.h"

namespace strata::internal {
namespace avx512 {
namespace {

using ::strata::avx2::hmax;
using ::strata::avx2::hsum;
using ::strata::internal::avx2::kv_scalar;
using ::strata::internal::avx2::sink_max;
using ::strata::internal::avx2::sink_sum;

using attention_tiling::PairScoresFn;
using attention_tiling::round_up8;
using attention_tiling::ScoresFn;
using attention_tiling::TileShape;

inline __m256 low_ps(__m512 v) { return _mm512_castps512_ps256(v); }
inline __m256 high_ps(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// The first n (< 16) lanes.
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

// 16 values of a K or V row from dim d, as floats (the f16 conversion is exact).
template <bool kF16>
inline __m512 load16(const uint8_t* row, int64_t d) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + d)));
  } else {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
  }
}

// The lanes of m (the others 0); nothing outside them is read.
template <bool kF16>
inline __m512 load16(const uint8_t* row, int64_t d, __mmask16 m) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + d));
  } else {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + d);
  }
}

// exp256 (ops_avx2.h) on 16 lanes: the same operations lane for lane.
inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f);
  const __m512 hi = _mm512_set1_ps(88.8f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  const __m512i n = _mm512_cvtps_epi32(fx);
  const __m512i n1 = _mm512_srai_epi32(n, 1);
  const __m512i n2 = _mm512_sub_epi32(n, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 res = _mm512_mul_ps(_mm512_mul_ps(y, s1), s2);
  const __mmask16 below = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  res = _mm512_maskz_mov_ps(static_cast<__mmask16>(~below), res);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), res, x);
}

// The dot products of kNh queries (heads of one kv group) with kCells K rows, before their
// horizontal sums: z[j][i] = [s0 | s1], the AVX2 kernel's two accumulators of head j and cell i.
// Each K load (and f16 conversion) serves every head. kNv: the vector part of head_dim when
// known at compile time (the loop unrolls), else 0.
template <bool kHalf, int64_t kNv, int kNh, int kCells>
inline void dot_halves(const TileShape& sh, const float* const* q, const uint8_t* const* k,
                       __m512 (*z)[kCells]) {
  const int64_t nv = kNv > 0 ? kNv : sh.nv;
  for (int j = 0; j < kNh; ++j) {
    for (int i = 0; i < kCells; ++i) z[j][i] = _mm512_setzero_ps();
  }
  int64_t d = 0;
  for (; d + 16 <= nv; d += 16) {
    __m512 qv[kNh];
    for (int j = 0; j < kNh; ++j) qv[j] = _mm512_loadu_ps(q[j] + d);
    for (int i = 0; i < kCells; ++i) {
      const __m512 kv = load16<kHalf>(k[i], d);
      for (int j = 0; j < kNh; ++j) z[j][i] = _mm512_fmadd_ps(qv[j], kv, z[j][i]);
    }
  }
  if (d < nv) {  // one chunk of 8: s0 only
    const __mmask16 m = 0x00ff;
    __m512 qv[kNh];
    for (int j = 0; j < kNh; ++j) qv[j] = _mm512_maskz_loadu_ps(m, q[j] + d);
    for (int i = 0; i < kCells; ++i) {
      const __m512 kv = load16<kHalf>(k[i], d, m);
      for (int j = 0; j < kNh; ++j) z[j][i] = _mm512_mask3_fmadd_ps(qv[j], kv, z[j][i], m);
    }
  }
}

// For each of z[0..8) = [s0 | s1]: hsum(s0 + s1), as one vector. hsum adds lanes
// (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1, the first operand always the lower lane;
// here each step does it for several cells at once, in 128-bit blocks.
inline __m256 hsum8_halves(const __m512* z) {
  // x[2k] and x[2k + 1] = s0 + s1: [s0 of both] + [s1 of both].
  __m512 x[4];
  for (int k = 0; k < 4; ++k) {
    x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Low 4 lanes + high 4 lanes of each x: blocks [cell 0, 1, 2, 3] and [4, 5, 6, 7].
  const __m512 a0 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 a1 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(x[2], x[3], _MM_SHUFFLE(3, 1, 3, 1)));
  // (0+2, 1+3): block t = [cell t: 0+2, 1+3, cell t + 4: 0+2, 1+3].
  const __m512 b = _mm512_add_ps(_mm512_shuffle_ps(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
  // 0+1: block t = [cell t, cell t + 4, (again)].
  const __m512 c = _mm512_add_ps(_mm512_shuffle_ps(b, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(b, b, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return low_ps(_mm512_permutexvar_ps(order, c));
}

// The score of q with a K row: hsum, the scalar tail, scale and cap.
template <bool kHalf, int64_t kNv>
inline float score_one(const AttentionArgs& a, const TileShape& sh, const float* q,
                       const uint8_t* kr) {
  __m512 z[1][1];
  dot_halves<kHalf, kNv, 1, 1>(sh, &q, &kr, z);
  float dot = hsum(_mm256_add_ps(low_ps(z[0][0]), high_ps(z[0][0])));
  for (int64_t e = sh.nv; e < sh.hd; ++e) dot = std::fma(q[e], kv_scalar<kHalf>(kr, e), dot);
  return attention_score(a, dot);
}

// Scores of kNh heads of one token for the block-relative cells [lo, hi): s[j][c - lo]. Eight
// cells at a time share the loads of q and one horizontal-sum pass, and the heads share each
// load of a K row. Every score gets the operations of the one-head pass whatever kNh.
template <bool kHalf, int64_t kNv, int kNh>
void scores(const AttentionArgs& a, const TileShape& sh, const float* const* q,
            const uint8_t* const* krows, int64_t lo, int64_t hi, float* const* s) {
  const int64_t hd = sh.hd, nv = sh.nv;
  const __m256 scale = _mm256_set1_ps(a.scale);
  int64_t c = lo;
  for (; c + 8 <= hi; c += 8) {
    __m512 z[kNh][8];
    dot_halves<kHalf, kNv, kNh, 8>(sh, q, krows + c, z);
    for (int j = 0; j < kNh; ++j) {
      __m256 dot = hsum8_halves(z[j]);
      if (nv < hd) {
        alignas(32) float dots[8];
        _mm256_store_ps(dots, dot);
        for (int i = 0; i < 8; ++i) {
          for (int64_t e = nv; e < hd; ++e) {
            dots[i] = std::fma(q[j][e], kv_scalar<kHalf>(krows[c + i], e), dots[i]);
          }
        }
        dot = _mm256_load_ps(dots);
      }
      float* sc = s[j] + (c - lo);
      _mm256_storeu_ps(sc, _mm256_mul_ps(dot, scale));
      if (a.extra.softcap > 0.0f) {
        for (int i = 0; i < 8; ++i) sc[i] = std::tanh(sc[i] / a.extra.softcap) * a.extra.softcap;
      }
    }
  }
  for (; c < hi; ++c) {
    for (int j = 0; j < kNh; ++j) s[j][c - lo] = score_one<kHalf, kNv>(a, sh, q[j], krows[c]);
  }
}

// One head (the ScoresFn of the tiling).
template <bool kHalf, int64_t kNv>
void scores(const AttentionArgs& a, const TileShape& sh, const float* q,
            const uint8_t* const* krows, int64_t lo, int64_t hi, float* s) {
  scores<kHalf, kNv, 1>(a, sh, &q, krows, lo, hi, &s);
}

// acc[j] += p[j][c - lo] * V row c for the kDv vectors of 16 dims from d and the
// block-relative cells [lo, hi), in cell order; with kTail, the last vector has only the lanes
// `tail` (masked loads cost more than plain ones: only the last vector of a row has them). The
// accumulators stay in registers across the cells; each is one dependent chain of FMAs.
template <bool kHalf, int kNh, int kDv, bool kTail>
void weigh_dims(const uint8_t* const* vrows, int64_t lo, int64_t hi, const float* const* p,
                float* const* acc, int64_t d, __mmask16 tail) {
  constexpr int kFull = kTail ? kDv - 1 : kDv;
  __m512 x[kNh][kDv];
  for (int j = 0; j < kNh; ++j) {
    for (int u = 0; u < kFull; ++u) x[j][u] = _mm512_loadu_ps(acc[j] + d + 16 * u);
    if constexpr (kTail) x[j][kDv - 1] = _mm512_maskz_loadu_ps(tail, acc[j] + d + 16 * (kDv - 1));
  }
  for (int64_t c = lo; c < hi; ++c) {
    __m512 v[kDv];
    for (int u = 0; u < kFull; ++u) v[u] = load16<kHalf>(vrows[c], d + 16 * u);
    if constexpr (kTail) v[kDv - 1] = load16<kHalf>(vrows[c], d + 16 * (kDv - 1), tail);
    for (int j = 0; j < kNh; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j][c - lo]);
      for (int u = 0; u < kDv; ++u) x[j][u] = _mm512_fmadd_ps(pj, v[u], x[j][u]);
    }
  }
  for (int j = 0; j < kNh; ++j) {
    for (int u = 0; u < kFull; ++u) _mm512_storeu_ps(acc[j] + d + 16 * u, x[j][u]);
    if constexpr (kTail) _mm512_mask_storeu_ps(acc[j] + d + 16 * (kDv - 1), tail, x[j][kDv - 1]);
  }
}

// Vectors of 16 dims per pass for kNh heads: up to 16 accumulators (enough FMA chains to
// cover the latency), the V vectors and the broadcast weight in the 32 registers.
template <int kNh>
constexpr int kWeighVectors = kNh <= 2 ? 8 : 4;

// The last pass of a row: n_vec (< kWeighVectors) vectors, the last one with the lanes `tail`
// when kTail.
template <bool kHalf, int kNh, bool kTail, int kDv = kWeighVectors<kNh>>
void weigh_rest(const uint8_t* const* vrows, int64_t lo, int64_t hi, const float* const* p,
                float* const* acc, int64_t d, int64_t n_vec, __mmask16 tail) {
  if constexpr (kDv > 0) {
    if (n_vec == kDv) return weigh_dims<kHalf, kNh, kDv, kTail>(vrows, lo, hi, p, acc, d, tail);
    weigh_rest<kHalf, kNh, kTail, kDv - 1>(vrows, lo, hi, p, acc, d, n_vec, tail);
  }
}

// The AVX-512 arithmetic of the tiled kernel (attention_tile.h).
struct Avx512 {
  static void convert_f16(const uint8_t* r, float* dst, const TileShape& sh) {
    int64_t d = 0;
    for (; d + 16 <= sh.hd; d += 16) _mm512_storeu_ps(dst + d, load16<true>(r, d));
    if (d < sh.hd) {
      const __mmask16 m = first_lanes(sh.hd - d);
      _mm512_mask_storeu_ps(dst + d, m, load16<true>(r, d, m));
    }
  }

  // The common head sizes get their own unrolled copies (the same operations).
  template <bool kHalf>
  static ScoresFn scores_for(const TileShape& sh) {
    return sh.nv == 64    ? &scores<kHalf, 64>
           : sh.nv == 128 ? &scores<kHalf, 128>
                          : &scores<kHalf, 0>;
  }

  // Two heads at once, sharing each K row's load and conversion (the conversion bounded the
  // one-head pass of a decode step).
  template <bool kHalf>
  static PairScoresFn pair_scores_for(const TileShape& sh) {
    return sh.nv == 64    ? &scores<kHalf, 64, 2>
           : sh.nv == 128 ? &scores<kHalf, 128, 2>
                          : &scores<kHalf, 0, 2>;
  }

  // The AVX2 kernel's softmax_row: its maximum over chunks of 8, its exps, its sum of the
  // chunks in order, the sink as sink_max and sink_sum take it.
  static float softmax_row(float* s, int64_t len, const float* sink) {
    const int64_t len_pad = round_up8(len);
    for (int64_t c = len; c < len_pad; ++c) s[c] = -std::numeric_limits<float>::infinity();
    __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t c = 0; c < len_pad; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + c));
    const float mf = sink != nullptr ? sink_max(hmax(mx), *sink) : hmax(mx);
    const __m512 m = _mm512_set1_ps(mf);
    __m256 sum = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= len_pad; c += 16) {
      const __m512 p = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + c), m));
      _mm512_storeu_ps(s + c, p);
      sum = _mm256_add_ps(sum, low_ps(p));
      sum = _mm256_add_ps(sum, high_ps(p));
    }
    if (c < len_pad) {  // one chunk of 8; the row may end there
      const __m256 p = low_ps(exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(0x00ff, s + c), m)));
      _mm256_storeu_ps(s + c, p);
      sum = _mm256_add_ps(sum, p);
    }
    return 1.0f / (sink != nullptr ? sink_sum(hsum(sum), *sink, mf) : hsum(sum));
  }

  template <bool kHalf, int kNh>
  static void weigh(const TileShape& sh, const uint8_t* const* vrows, int64_t lo, int64_t hi,
                    const float* const* p, float* const* acc) {
    constexpr int kDv = kWeighVectors<kNh>;
    const int64_t n_vec = (sh.hd + 15) / 16;
    const bool tail = sh.hd % 16 != 0;
    const __mmask16 lanes = tail ? first_lanes(sh.hd % 16) : __mmask16{0xffff};
    // Whole passes of kDv vectors, and a last pass of up to kDv that holds the tail, if any.
    const int64_t last = (n_vec - 1) / kDv * kDv;
    for (int64_t u = 0; u < last; u += kDv)
      weigh_dims<kHalf, kNh, kDv, false>(vrows, lo, hi, p, acc, 16 * u, lanes);
    if (tail) {
      weigh_rest<kHalf, kNh, true>(vrows, lo, hi, p, acc, 16 * last, n_vec - last, lanes);
    } else {
      weigh_rest<kHalf, kNh, false>(vrows, lo, hi, p, acc, 16 * last, n_vec - last, lanes);
    }
  }

  static void normalise(float* o, const float* acc, float inv_sum, const TileShape& sh) {
    const __m512 inv = _mm512_set1_ps(inv_sum);
    int64_t d = 0;
    for (; d + 16 <= sh.hd; d += 16)
      _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), inv));
    if (d < sh.hd) {
      const __mmask16 m = first_lanes(sh.hd - d);
      _mm512_mask_storeu_ps(o + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + d), inv));
    }
  }
};

}  // namespace

void attention_tile(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
                    float* scratch) {
  attention_tiling::tile<Avx512>(a, toks, n, h0, h1, scratch);
}

}  // namespace avx512
}  // namespace strata::internal
