// AVX2 attention over tiles of query tokens: the arithmetic for the tiling of attention_tile.h.
//
// Only the loop structure differs from attending one token at a time: every output element
// gets the same float operations in the same order as attention_untiled_avx2.cc gives it (the
// score's two accumulators and fixed horizontal sum, the maximum and the exp sum over the
// token's own cells in chunks of 8, the weighted V sum in cell order), so a token's result
// never depends on the tile, the batch or the thread that computed it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/attention_tile.h"
#include "core/check.h"
#include "core/ops_avx2.h"
#include "core/ops_internal.h"
#include "core/simd_avx2.h"

namespace strata::internal {
namespace avx2 {
namespace {

using ::strata::avx2::hmax;
using ::strata::avx2::hsum;

using attention_tiling::round_up8;
using attention_tiling::ScoresFn;
using attention_tiling::TileShape;

// hsum of each of x[0..8), as one vector: lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then
// 0+1, the order (and operand order) of hsum, for eight vectors at once.
inline __m256 hsum8(const __m256* x) {
  const __m256 a0 = _mm256_add_ps(_mm256_permute2f128_ps(x[0], x[4], 0x20),
                                  _mm256_permute2f128_ps(x[0], x[4], 0x31));
  const __m256 a1 = _mm256_add_ps(_mm256_permute2f128_ps(x[1], x[5], 0x20),
                                  _mm256_permute2f128_ps(x[1], x[5], 0x31));
  const __m256 a2 = _mm256_add_ps(_mm256_permute2f128_ps(x[2], x[6], 0x20),
                                  _mm256_permute2f128_ps(x[2], x[6], 0x31));
  const __m256 a3 = _mm256_add_ps(_mm256_permute2f128_ps(x[3], x[7], 0x20),
                                  _mm256_permute2f128_ps(x[3], x[7], 0x31));
  // a0 = [x0 partials | x4 partials], ...; now pairs (0+2, 1+3) within each half.
  const __m256 b01 = _mm256_add_ps(_mm256_shuffle_ps(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 b23 = _mm256_add_ps(_mm256_shuffle_ps(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
  // b01 = [x0: b0 b1, x1: b0 b1 | x4: .., x5: ..]; now b0 + b1.
  return _mm256_add_ps(_mm256_shuffle_ps(b01, b23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm256_shuffle_ps(b01, b23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The dot products of q with kCells K rows, before their horizontal sums. Two accumulators per
// row (even and odd chunks of head_dim); x = s0 + s1. kNv: the vector part of head_dim when
// known at compile time (the loop unrolls), else 0.
template <bool kHalf, int64_t kNv, int kCells>
inline void dot_lanes(const TileShape& sh, const float* q, const uint8_t* const* k, __m256* x) {
  const int64_t nv = kNv > 0 ? kNv : sh.nv;
  __m256 s0[kCells], s1[kCells];
  for (int i = 0; i < kCells; ++i) s0[i] = s1[i] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= nv; d += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + d);
    const __m256 q1 = _mm256_loadu_ps(q + d + 8);
    for (int i = 0; i < kCells; ++i) {
      s0[i] = _mm256_fmadd_ps(q0, load_kv<kHalf>(k[i], d), s0[i]);
      s1[i] = _mm256_fmadd_ps(q1, load_kv<kHalf>(k[i], d + 8), s1[i]);
    }
  }
  if (d < nv) {
    const __m256 q0 = _mm256_loadu_ps(q + d);
    for (int i = 0; i < kCells; ++i) s0[i] = _mm256_fmadd_ps(q0, load_kv<kHalf>(k[i], d), s0[i]);
  }
  for (int i = 0; i < kCells; ++i) x[i] = _mm256_add_ps(s0[i], s1[i]);
}

// The score of q with a K row, from its dot product: hsum, the scalar tail, scale and cap.
template <bool kHalf, int64_t kNv>
inline float score_one(const AttentionArgs& a, const TileShape& sh, const float* q,
                       const uint8_t* kr) {
  __m256 x;
  dot_lanes<kHalf, kNv, 1>(sh, q, &kr, &x);
  float dot = hsum(x);
  for (int64_t e = sh.nv; e < sh.hd; ++e) dot = std::fma(q[e], kv_scalar<kHalf>(kr, e), dot);
  return attention_score(a, dot);
}

// Scores of one head of one token for the block-relative cells [lo, hi): s[c - lo]. Two cells
// at a time share the loads of q, and eight share one horizontal-sum pass, which leaves the
// FMA chains of the next cells free to start.
template <bool kHalf, int64_t kNv, int kCells = (kNv > 64 ? 4 : 2)>
void scores(const AttentionArgs& a, const TileShape& sh, const float* q,
            const uint8_t* const* krows, int64_t lo, int64_t hi, float* s) {
  const int64_t hd = sh.hd, nv = sh.nv;
  const __m256 scale = _mm256_set1_ps(a.scale);
  int64_t c = lo;
  for (; c + 8 <= hi; c += 8) {
    __m256 x[8];
    for (int i = 0; i < 8; i += kCells) dot_lanes<kHalf, kNv, kCells>(sh, q, krows + c + i, x + i);
    __m256 dot = hsum8(x);
    if (nv < hd) {
      alignas(32) float dots[8];
      _mm256_store_ps(dots, dot);
      for (int i = 0; i < 8; ++i) {
        for (int64_t e = nv; e < hd; ++e) {
          dots[i] = std::fma(q[e], kv_scalar<kHalf>(krows[c + i], e), dots[i]);
        }
      }
      dot = _mm256_load_ps(dots);
    }
    float* sc = s + (c - lo);
    _mm256_storeu_ps(sc, _mm256_mul_ps(dot, scale));
    if (a.extra.softcap > 0.0f) {
      for (int i = 0; i < 8; ++i) sc[i] = std::tanh(sc[i] / a.extra.softcap) * a.extra.softcap;
    }
  }
  for (; c < hi; ++c) s[c - lo] = score_one<kHalf, kNv>(a, sh, q, krows[c]);
}

// acc[j] += p[j][c - lo] * V row c for dims [d, d + 8 kDv) and the block-relative cells
// [lo, hi), in cell order. The accumulators stay in registers across the cells; each is one
// dependent chain of FMAs, so there must be enough of them (kNh x kDv) to cover the latency.
template <bool kHalf, int kNh, int kDv>
void weigh_dims(const uint8_t* const* vrows, int64_t lo, int64_t hi, const float* const* p,
                float* const* acc, int64_t d) {
  __m256 x[kNh][kDv];
  for (int j = 0; j < kNh; ++j) {
    for (int u = 0; u < kDv; ++u) x[j][u] = _mm256_loadu_ps(acc[j] + d + 8 * u);
  }
  for (int64_t c = lo; c < hi; ++c) {
    __m256 v[kDv];
    for (int u = 0; u < kDv; ++u) v[u] = load_kv<kHalf>(vrows[c], d + 8 * u);
    for (int j = 0; j < kNh; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j][c - lo]);
      for (int u = 0; u < kDv; ++u) x[j][u] = _mm256_fmadd_ps(pj, v[u], x[j][u]);
    }
  }
  for (int j = 0; j < kNh; ++j) {
    for (int u = 0; u < kDv; ++u) _mm256_storeu_ps(acc[j] + d + 8 * u, x[j][u]);
  }
}

// Vectors of 8 dims per pass for kNh heads: about 12 accumulators.
template <int kNh>
constexpr int kWeighVectors = kNh == 1   ? 8
                              : kNh == 2 ? 6
                              : kNh == 3 ? 4
                                         : 3;

template <bool kHalf, int kNh, int kDv = kWeighVectors<kNh>>
void weigh_rest(const uint8_t* const* vrows, int64_t lo, int64_t hi, const float* const* p,
                float* const* acc, int64_t d, int64_t n_vec) {
  if constexpr (kDv > 0) {
    if (n_vec == kDv) return weigh_dims<kHalf, kNh, kDv>(vrows, lo, hi, p, acc, d);
    weigh_rest<kHalf, kNh, kDv - 1>(vrows, lo, hi, p, acc, d, n_vec);
  }
}

// acc[j] += p[j][c - lo] * V row c for the block-relative cells [lo, hi), in cell order.
template <bool kHalf, int kNh>
void weigh(const TileShape& sh, const uint8_t* const* vrows, int64_t lo, int64_t hi,
           const float* const* p, float* const* acc) {
  constexpr int kDv = kWeighVectors<kNh>;
  int64_t d = 0;
  for (; d + 8 * kDv <= sh.nv; d += 8 * kDv) weigh_dims<kHalf, kNh, kDv>(vrows, lo, hi, p, acc, d);
  if (d < sh.nv) weigh_rest<kHalf, kNh>(vrows, lo, hi, p, acc, d, (sh.nv - d) / 8);
  for (int64_t e = sh.nv; e < sh.hd; ++e) {
    for (int64_t c = lo; c < hi; ++c) {
      const float vf = kv_scalar<kHalf>(vrows[c], e);
      for (int j = 0; j < kNh; ++j) acc[j][e] = std::fma(p[j][c - lo], vf, acc[j][e]);
    }
  }
}

// Softmax of one row of len scores with the maximum subtracted; the exps replace the scores.
// Padding scores are -inf: their exp is exactly 0 and adds nothing to the sum. With a sink
// (nullptr: none), as sink_max and sink_sum take it.
float softmax_row(float* s, int64_t len, const float* sink) {
  const int64_t len_pad = round_up8(len);
  for (int64_t c = len; c < len_pad; ++c) s[c] = -std::numeric_limits<float>::infinity();
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < len_pad; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + c));
  const float mf = sink != nullptr ? sink_max(hmax(mx), *sink) : hmax(mx);
  const __m256 m = _mm256_set1_ps(mf);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t c = 0; c < len_pad; c += 8) {
    const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + c), m));
    _mm256_storeu_ps(s + c, p);
    sum = _mm256_add_ps(sum, p);
  }
  return 1.0f / (sink != nullptr ? sink_sum(hsum(sum), *sink, mf) : hsum(sum));
}

// The AVX2 arithmetic of the tiled kernel (attention_tile.h).
struct Avx2 {
  static void convert_f16(const uint8_t* r, float* dst, const TileShape& sh) {
    int64_t d = 0;
    for (; d < sh.nv; d += 8) _mm256_storeu_ps(dst + d, load_kv<true>(r, d));
    for (; d < sh.hd; ++d) dst[d] = kv_scalar<true>(r, d);
  }

  // The common head sizes get their own unrolled copies (the same operations).
  template <bool kHalf>
  static ScoresFn scores_for(const TileShape& sh) {
    return sh.nv == 64    ? &scores<kHalf, 64>
           : sh.nv == 128 ? &scores<kHalf, 128>
                          : &scores<kHalf, 0>;
  }

  static float softmax_row(float* s, int64_t len, const float* sink) {
    return avx2::softmax_row(s, len, sink);
  }

  template <bool kHalf, int kNh>
  static void weigh(const TileShape& sh, const uint8_t* const* vrows, int64_t lo, int64_t hi,
                    const float* const* p, float* const* acc) {
    avx2::weigh<kHalf, kNh>(sh, vrows, lo, hi, p, acc);
  }

  static void normalise(float* o, const float* acc, float inv_sum, const TileShape& sh) {
    const __m256 inv = _mm256_set1_ps(inv_sum);
    int64_t d = 0;
    for (; d < sh.nv; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
    for (; d < sh.hd; ++d) o[d] = acc[d] * inv_sum;
  }
};

}  // namespace
}  // namespace avx2

size_t attention_tile_scratch_floats(const AttentionArgs& a, int64_t n, int64_t n_heads,
                                     int64_t span) {
  return attention_tiling::tile_scratch_floats(a, n, n_heads, span);
}

namespace avx2 {

void attention_tile(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
                    float* scratch) {
  attention_tiling::tile<Avx2>(a, toks, n, h0, h1, scratch);
}

}  // namespace avx2
}  // namespace strata::internal
