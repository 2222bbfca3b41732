// The AVX2 attention kernel as it was before prompt chunks were tiled: one token at a time, for
// a run of query heads of one kv group. Kept unchanged as the tests' bitwise oracle for the
// tiled kernel (attention_avx2.cc), which must repeat its every float operation.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/ops_avx2.h"
#include "core/ops_internal.h"
#include "core/simd_avx2.h"

namespace strata::internal::avx2 {
namespace {

using ::strata::avx2::hmax;
using ::strata::avx2::hsum;

// A head's K (or V) segment is a short piece of a long cache row and lists may be in any
// order: the hardware prefetcher sees no stream, so fetch a few cells ahead by hand.
constexpr int64_t kPrefetchCells = 6;

inline void prefetch_segment(const uint8_t* base, int32_t cell, const AttentionArgs& a,
                             size_t bytes) {
  const uint8_t* p = base + static_cast<size_t>(cell) * a.kv.cell_bytes;
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
  const size_t head_off = static_cast<size_t>(kvh) * a.kv.head_bytes;
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
    const uint8_t* kr = kbase + static_cast<size_t>(cells[c]) * a.kv.cell_bytes;
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
    const float* sink = a.extra.sinks != nullptr ? a.extra.sinks + h0 + j : nullptr;
    const float mf = sink != nullptr ? sink_max(hmax(mx), *sink) : hmax(mx);
    const __m256 m = _mm256_set1_ps(mf);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t c = 0; c < len_pad; c += 8) {
      const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s[j] + c), m));
      _mm256_storeu_ps(s[j] + c, p);
      sum = _mm256_add_ps(sum, p);
    }
    inv_sum[j] = 1.0f / (sink != nullptr ? sink_sum(hsum(sum), *sink, mf) : hsum(sum));
    std::memset(acc[j], 0, static_cast<size_t>(hd_pad) * sizeof(float));
  }

  // Weighted sum of V rows, in cell order; each V chunk is loaded once for all heads. Four
  // cells per pass halve the loads and stores of the accumulators; every element still gets
  // acc = fma(p_c, v_c, acc) for c = 0, 1, 2... whatever the blocking.
  int64_t c = 0;
  for (; c + 4 <= len; c += 4) {
    const uint8_t* vr[4];
    for (int i = 0; i < 4; ++i) {
      vr[i] = vbase + static_cast<size_t>(cells[c + i]) * a.kv.cell_bytes;
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
    const uint8_t* vr = vbase + static_cast<size_t>(cells[c]) * a.kv.cell_bytes;
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

size_t attention_untiled_scratch_floats(const AttentionArgs& a) {
  return static_cast<size_t>(kMaxHeads * (round_up8(a.max_len) + round_up8(a.head_dim)));
}

void attention_heads_untiled(const AttentionArgs& a, int64_t t, int64_t h0, int64_t h1,
                             float* scratch) {
  STRATA_DCHECK(a.tok[2 * t + 1] >= 0 && a.tok[2 * t + 1] <= a.max_len);
  if (a.kv_dtype == DType::kF16) {
    attention_heads_t<true>(a, t, h0, h1, scratch);
  } else {
    attention_heads_t<false>(a, t, h0, h1, scratch);
  }
}

}  // namespace strata::internal::avx2
