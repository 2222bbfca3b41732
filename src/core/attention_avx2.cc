// AVX2 attention over tiles of query tokens. A tile is a few tokens of one list (consecutive
// tokens of a prompt share almost all their cells) and the query heads of one kv head; the
// list's cells are walked in blocks small enough to stay in L1 (or near it), and each K or V row
// of a block, loaded once (f16 rows of large tiles converted once), serves every token and head
// of the tile.
//
// Only the loop structure differs from attending one token at a time: every output element
// gets the same float operations in the same order as attention_untiled_avx2.cc gives it (the
// score's two accumulators and fixed horizontal sum, the maximum and the exp sum over the
// token's own cells in chunks of 8, the weighted V sum in cell order), so a token's result
// never depends on the tile, the batch or the thread that computed it. No online (rescaled)
// softmax: each token's maximum is known before any exp, as in the untiled kernel.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

constexpr int kMaxHeads = 4;  // query heads of one token that share each load of a V row

// A block of K (or V) rows, as floats, fits in this many floats (32 KiB): it stays in L1 (or
// near it) while every token of the tile uses it. Measured: 8-32 KiB alike, 64 KiB ~15% slower.
constexpr int64_t kBlockFloats = 8192;
constexpr int64_t kMaxBlockCells = 256;

// f16 blocks are converted to f32 once when at least this many rows of queries (tokens x heads)
// will read them: measured ~10% faster for prompt tiles (16 tokens x 4 heads), but 1.3-2x
// slower for decode steps (one token x 1-8 heads), whose rows are better converted as loaded.
constexpr int64_t kConvertMinRows = 16;

// Lists may be in any order and a head's segment is a short piece of a long cache row: the
// hardware prefetcher sees no stream, so fetch a few cells ahead by hand.
constexpr int64_t kPrefetchCells = 6;

inline int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

inline int64_t block_cells(int64_t head_dim) {
  return std::clamp<int64_t>(kBlockFloats / round_up8(head_dim) / 8 * 8, 8, kMaxBlockCells);
}

inline void prefetch_segment(const uint8_t* row, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(row + off), _MM_HINT_T0);
}

// One token of a tile: the positions [begin, end) of its list that it attends to, its query
// (head 0 of the tile) and its output, its scores (one row per head, row_stride apart) and its
// output accumulators (one per head, hd_pad apart).
struct TileToken {
  int64_t begin, end;
  const float* q;
  float* out;
  float* s;
  float* acc;
  float* inv_sum;
};

// A row of a block (K or V) is f32 (converted into the tile's buffer, or an f32 cache row used
// in place) or, when kHalf is set, an f16 cache row read as it is. The f16 to f32 conversion is
// exact: both give the same floats.
struct TileShape {
  int64_t hd, nv, hd_pad, row_stride;
};

// Pointers to the rows of list positions [c0, c1), head segment at `base`; f16 rows are
// converted into buf when kConvert is set, else used in place.
template <bool kF16, bool kConvert>
void block_rows(const AttentionArgs& a, const uint8_t* base, const int32_t* list, int64_t c0,
                int64_t c1, int64_t c_end, const TileShape& sh, float* buf, const uint8_t** rows) {
  const size_t seg_bytes = static_cast<size_t>(sh.hd) * (kF16 ? 2 : 4);
  for (int64_t c = c0; c < c1; ++c) {
    if (c + kPrefetchCells < c_end) {
      prefetch_segment(base + static_cast<size_t>(list[c + kPrefetchCells]) * a.kv_row_bytes,
                       seg_bytes);
    }
    const uint8_t* r = base + static_cast<size_t>(list[c]) * a.kv_row_bytes;
    if constexpr (kF16 && kConvert) {
      float* dst = buf + (c - c0) * sh.hd_pad;
      int64_t d = 0;
      for (; d < sh.nv; d += 8) _mm256_storeu_ps(dst + d, load_kv<true>(r, d));
      for (; d < sh.hd; ++d) dst[d] = kv_scalar<true>(r, d);
      rows[c - c0] = reinterpret_cast<const uint8_t*>(dst);
    } else {
      rows[c - c0] = r;
    }
  }
}

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
// Padding scores are -inf: their exp is exactly 0 and adds nothing to the sum.
float softmax_row(float* s, int64_t len) {
  const int64_t len_pad = round_up8(len);
  for (int64_t c = len; c < len_pad; ++c) s[c] = -std::numeric_limits<float>::infinity();
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < len_pad; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + c));
  const __m256 m = _mm256_set1_ps(hmax(mx));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t c = 0; c < len_pad; c += 8) {
    const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + c), m));
    _mm256_storeu_ps(s + c, p);
    sum = _mm256_add_ps(sum, p);
  }
  return 1.0f / hsum(sum);
}

// Calls fn.template operator()<kNh>(j0) for the heads [0, n) in groups of at most kMaxHeads.
template <typename Fn>
void for_head_groups(int64_t n, const Fn& fn) {
  for (int64_t j = 0; j < n; j += kMaxHeads) {
    switch (std::min<int64_t>(kMaxHeads, n - j)) {
      case 1:
        fn.template operator()<1>(j);
        break;
      case 2:
        fn.template operator()<2>(j);
        break;
      case 3:
        fn.template operator()<3>(j);
        break;
      default:
        fn.template operator()<4>(j);
        break;
    }
  }
}

// kConvert: f16 rows are converted once per block (worth it when many rows of queries read
// them), else read in place.
template <bool kF16, bool kConvert>
void attention_tile_t(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0,
                      int64_t h1, float* scratch) {
  constexpr bool kHalf = kF16 && !kConvert;
  const int64_t hd = a.head_dim;
  const int64_t nh = h1 - h0;
  const int32_t* list = a.cells + static_cast<int64_t>(a.tok[2 * toks[0]]) * a.max_len;
  const int64_t kvh = h0 / (a.n_head / a.n_head_kv);
  const size_t head_off = static_cast<size_t>(kvh * hd) * (kF16 ? 2 : 4);
  const uint8_t* kbase = static_cast<const uint8_t*>(a.k) + head_off;
  const uint8_t* vbase = static_cast<const uint8_t*>(a.v) + head_off;

  TileToken tt[kAttentionMaxTileTokens];
  int64_t span = 0;
  for (int64_t i = 0; i < n; ++i) {
    STRATA_DCHECK(a.tok[2 * toks[i]] == a.tok[2 * toks[0]]);
    int64_t len = 0;
    tt[i].begin = attention_cells(a, toks[i], &len) - list;
    tt[i].end = tt[i].begin + len;
    span = std::max(span, len);
  }
  const TileShape sh{hd, hd / 8 * 8, round_up8(hd), round_up8(span)};
  float* next = scratch;
  for (int64_t i = 0; i < n; ++i) {
    tt[i].q = a.q + toks[i] * a.q_tok_stride + h0 * hd;
    tt[i].out = a.out + toks[i] * a.out_tok_stride + h0 * hd;
    tt[i].s = next;
    next += nh * sh.row_stride;
  }
  for (int64_t i = 0; i < n; ++i) {
    tt[i].acc = next;
    next += nh * sh.hd_pad;
  }
  for (int64_t i = 0; i < n; ++i) {
    tt[i].inv_sum = next;
    next += nh;
  }
  float* buf = next;  // a block of f16 rows as floats

  int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (tt[i].end > tt[i].begin) {
      first = std::min(first, tt[i].begin);
      last = std::max(last, tt[i].end);
    }
  }
  const int64_t nb = block_cells(hd);
  const uint8_t* rows[kMaxBlockCells];
  // The common head sizes get their own unrolled copies (the same operations).
  auto* score_fn = sh.nv == 64    ? &scores<kHalf, 64>
                   : sh.nv == 128 ? &scores<kHalf, 128>
                                  : &scores<kHalf, 0>;

  // Calls fn(token, lo, hi) for the tokens that attend to some of the block [c0, c1), with the
  // block-relative range of those cells.
  auto for_tokens_in = [&](int64_t c0, int64_t c1, const auto& fn) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t lo = std::max(tt[i].begin, c0), hi = std::min(tt[i].end, c1);
      if (lo < hi) fn(tt[i], lo - c0, hi - c0);
    }
  };
  auto block_used = [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      if (std::max(tt[i].begin, c0) < std::min(tt[i].end, c1)) return true;
    }
    return false;
  };

  for (int64_t c0 = first; c0 < last; c0 += nb) {
    const int64_t c1 = std::min(last, c0 + nb);
    if (!block_used(c0, c1)) continue;
    block_rows<kF16, kConvert>(a, kbase, list, c0, c1, last, sh, buf, rows);
    for_tokens_in(c0, c1, [&](const TileToken& t, int64_t lo, int64_t hi) {
      for (int64_t j = 0; j < nh; ++j) {
        score_fn(a, sh, t.q + j * hd, rows, lo, hi, t.s + j * sh.row_stride + (c0 + lo - t.begin));
      }
    });
  }

  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = tt[i].end - tt[i].begin;
    std::memset(tt[i].acc, 0, static_cast<size_t>(nh * sh.hd_pad) * sizeof(float));
    if (len == 0) continue;
    for (int64_t j = 0; j < nh; ++j)
      tt[i].inv_sum[j] = softmax_row(tt[i].s + j * sh.row_stride, len);
  }

  for (int64_t c0 = first; c0 < last; c0 += nb) {
    const int64_t c1 = std::min(last, c0 + nb);
    if (!block_used(c0, c1)) continue;
    block_rows<kF16, kConvert>(a, vbase, list, c0, c1, last, sh, buf, rows);
    for_tokens_in(c0, c1, [&](const TileToken& t, int64_t lo, int64_t hi) {
      for_head_groups(nh, [&]<int kNh>(int64_t j0) {
        const float* p[kNh];
        float* acc[kNh];
        for (int j = 0; j < kNh; ++j) {
          p[j] = t.s + (j0 + j) * sh.row_stride + (c0 + lo - t.begin);
          acc[j] = t.acc + (j0 + j) * sh.hd_pad;
        }
        weigh<kHalf, kNh>(sh, rows, lo, hi, p, acc);
      });
    });
  }

  for (int64_t i = 0; i < n; ++i) {
    const TileToken& t = tt[i];
    for (int64_t j = 0; j < nh; ++j) {
      float* o = t.out + j * hd;
      if (t.end == t.begin) {
        std::memset(o, 0, static_cast<size_t>(hd) * sizeof(float));
        continue;
      }
      const float* acc = t.acc + j * sh.hd_pad;
      const __m256 inv = _mm256_set1_ps(t.inv_sum[j]);
      int64_t d = 0;
      for (; d < sh.nv; d += 8)
        _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
      for (; d < hd; ++d) o[d] = acc[d] * t.inv_sum[j];
    }
  }
}

}  // namespace

size_t attention_tile_scratch_floats(const AttentionArgs& a, int64_t n, int64_t n_heads,
                                     int64_t span) {
  const int64_t hd_pad = round_up8(a.head_dim);
  return static_cast<size_t>(n * n_heads * (round_up8(span) + hd_pad + 1) +
                             block_cells(a.head_dim) * hd_pad);
}

void attention_tile(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
                    float* scratch) {
  STRATA_CHECK(n >= 1 && n <= kAttentionMaxTileTokens, "attention_tile: bad tile size");
  if (a.kv_dtype != DType::kF16) {
    attention_tile_t<false, false>(a, toks, n, h0, h1, scratch);
  } else if (n * (h1 - h0) >= kConvertMinRows) {
    attention_tile_t<true, true>(a, toks, n, h0, h1, scratch);
  } else {
    attention_tile_t<true, false>(a, toks, n, h0, h1, scratch);
  }
}

}  // namespace strata::internal::avx2
