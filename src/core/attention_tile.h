// The tiling of the SIMD attention kernels (attention_avx2.cc, attention_avx512.cc), shared so
// that every instruction set walks the same tiles and blocks. A tile is a few tokens of one list
// (consecutive tokens of a prompt share almost all their cells) and the query heads of one kv
// head; the list's cells are walked in blocks small enough to stay in L1 (or near it), and each
// K or V row of a block, loaded once (f16 rows of large tiles converted once), serves every
// token and head of the tile.
//
// The arithmetic is the instruction set's, given as a kernel type K with static members:
//   K::convert_f16(row, dst, shape)     an f16 row segment as head_dim floats (exact)
//   K::scores_for<kHalf>(shape)         the score pass for this head size (a ScoresFn)
//   K::pair_scores_for<kHalf>(shape)    optional: the same for two heads at once (PairScoresFn)
//   K::softmax_row(s, len, sink)        exps of a row of scores in place, 1 / their sum (with
//                                       the head's sink, or nullptr)
//   K::weigh<kHalf, kNh>(shape, rows, lo, hi, p, acc)   acc[j] += p[j][c] V row c, in cell order
//   K::normalise(out, acc, inv, shape)  out = acc * inv
// Each must give every output element the operations of attention_untiled_avx2.cc in its order,
// so that a token's result depends neither on the tile, the batch, the thread nor the
// instruction set. No online (rescaled) softmax: each token's maximum is known before any exp.
//
// Include only from the attention_*.cc kernels. Everything here has internal linkage (the
// unnamed namespace): each kernel file gets its own copy compiled for its instruction set; an
// inline function with external linkage would be merged across files by the linker.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/ops_internal.h"
#include "core/quant_blocks.h"

namespace strata::internal::attention_tiling {
namespace {

constexpr int kMaxHeads = 4;  // query heads of one token that share each load of a V row

// A block of K (or V) rows, as floats, fits in this many floats (32 KiB): it stays in L1 (or
// near it) while every token of the tile uses it. Measured: 8-32 KiB alike, 64 KiB ~15% slower.
constexpr int64_t kBlockFloats = 8192;
constexpr int64_t kMaxBlockCells = 256;

// f16 blocks are converted to f32 once when at least this many rows of queries (tokens x heads)
// will read them: measured ~10% faster for prompt tiles (16 tokens x 4 heads), but 1.3-2x
// slower for decode steps (one token x 1-8 heads), whose rows are better converted as loaded.
constexpr int64_t kConvertMinRows = 16;

inline int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

inline int64_t block_cells(int64_t head_dim) {
  return std::clamp<int64_t>(kBlockFloats / round_up8(head_dim) / 8 * 8, 8, kMaxBlockCells);
}

inline size_t tile_scratch_floats(const AttentionArgs& a, int64_t n, int64_t n_heads,
                                  int64_t span) {
  const int64_t hd_pad = round_up8(a.head_dim);
  return static_cast<size_t>(n * n_heads * (round_up8(span) + hd_pad + 1) +
                             block_cells(a.head_dim) * hd_pad);
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

// hd: head_dim; nv: its part in whole vectors of 8; hd_pad: hd rounded up to 8; row_stride:
// the floats of one head's score row.
struct TileShape {
  int64_t hd, nv, hd_pad, row_stride;
};

// Scores of one head of one token for the block-relative cells [lo, hi): s[c - lo].
using ScoresFn = void (*)(const AttentionArgs& a, const TileShape& sh, const float* q,
                          const uint8_t* const* krows, int64_t lo, int64_t hi, float* s);
// The same for two heads: q[j] and s[j], j = 0, 1.
using PairScoresFn = void (*)(const AttentionArgs& a, const TileShape& sh, const float* const* q,
                              const uint8_t* const* krows, int64_t lo, int64_t hi, float* const* s);

// How a cache's rows reach the kernels: f32 rows and f16 rows read in place, f16 rows converted
// once per block, q8_0 rows (always converted: the kernels read floats or f16).
enum class KvRows { kF32, kF16, kF16Converted, kQ8_0 };

constexpr bool kv_rows_half(KvRows r) { return r == KvRows::kF16; }

// A q8_0 row segment of n values (a multiple of 32) as floats: each value q * d, which is exact
// (an f16 scale times an 8-bit integer needs at most 19 bits), so every instruction set and the
// scalar dequantize_row_q8_0 give the same floats. Plain AVX2: the AVX-512 kernels call it too.
inline void convert_q8_0(const uint8_t* r, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    BlockQ8_0 block;  // copied: a row's blocks need not sit at the struct's alignment
    std::memcpy(&block, r + b * sizeof(BlockQ8_0), sizeof(BlockQ8_0));
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(block.d));
    for (int i = 0; i < kQK8_0 / 8; ++i) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block.qs + 8 * i));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      _mm256_storeu_ps(dst + kQK8_0 * b + 8 * i, _mm256_mul_ps(q, d));
    }
  }
}

// Pointers to the rows of list positions [c0, c1), head segment at `base`; converted rows
// (KvRows::kF16Converted, kQ8_0) are written to buf as floats, the others used in place. A row
// of a block (K or V) is then f32 (converted, or an f32 cache row) or, for KvRows::kF16, an f16
// cache row read as it is: the conversions are exact, each gives the same floats.
// Nothing is prefetched by hand: with the cache head-major, a head's rows are one stream that
// the hardware prefetchers follow. Prefetching each row 6 cells ahead made decode attention
// 8-13% slower, cache in memory or in L2, cells together or spread (docs/bench.md).
template <typename K, KvRows kRows>
void block_rows(const AttentionArgs& a, const uint8_t* base, const int32_t* list, int64_t c0,
                int64_t c1, const TileShape& sh, float* buf, const uint8_t** rows) {
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* r = base + static_cast<size_t>(list[c]) * a.kv.cell_bytes;
    if constexpr (kRows == KvRows::kF16Converted || kRows == KvRows::kQ8_0) {
      float* dst = buf + (c - c0) * sh.hd_pad;
      if constexpr (kRows == KvRows::kQ8_0) {
        convert_q8_0(r, dst, sh.hd);
      } else {
        K::convert_f16(r, dst, sh);
      }
      rows[c - c0] = reinterpret_cast<const uint8_t*>(dst);
    } else {
      rows[c - c0] = r;
    }
  }
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

// kRows: how the cache's rows are read (KvRows); f16 rows are converted once per block when
// many rows of queries read them.
template <typename K, KvRows kRows>
void tile_t(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
            float* scratch) {
  constexpr bool kHalf = kv_rows_half(kRows);
  const int64_t hd = a.head_dim;
  const int64_t nh = h1 - h0;
  const int32_t* list = a.cells + static_cast<int64_t>(a.tok[2 * toks[0]]) * a.max_len;
  const int64_t kvh = h0 / (a.n_head / a.n_head_kv);
  const size_t head_off = static_cast<size_t>(kvh) * a.kv.head_bytes;
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
  const ScoresFn score_fn = K::template scores_for<kHalf>(sh);
  PairScoresFn pair_fn = nullptr;
  if constexpr (requires { K::template pair_scores_for<kHalf>(sh); }) {
    pair_fn = K::template pair_scores_for<kHalf>(sh);
  }

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
    block_rows<K, kRows>(a, kbase, list, c0, c1, sh, buf, rows);
    for_tokens_in(c0, c1, [&](const TileToken& t, int64_t lo, int64_t hi) {
      float* s0 = t.s + (c0 + lo - t.begin);
      int64_t j = 0;
      for (; pair_fn != nullptr && j + 2 <= nh; j += 2) {
        const float* q[2] = {t.q + j * hd, t.q + (j + 1) * hd};
        float* s[2] = {s0 + j * sh.row_stride, s0 + (j + 1) * sh.row_stride};
        pair_fn(a, sh, q, rows, lo, hi, s);
      }
      for (; j < nh; ++j) score_fn(a, sh, t.q + j * hd, rows, lo, hi, s0 + j * sh.row_stride);
    });
  }

  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = tt[i].end - tt[i].begin;
    std::memset(tt[i].acc, 0, static_cast<size_t>(nh * sh.hd_pad) * sizeof(float));
    if (len == 0) continue;
    for (int64_t j = 0; j < nh; ++j) {
      const float* sink = a.extra.sinks != nullptr ? a.extra.sinks + h0 + j : nullptr;
      tt[i].inv_sum[j] = K::softmax_row(tt[i].s + j * sh.row_stride, len, sink);
    }
  }

  for (int64_t c0 = first; c0 < last; c0 += nb) {
    const int64_t c1 = std::min(last, c0 + nb);
    if (!block_used(c0, c1)) continue;
    block_rows<K, kRows>(a, vbase, list, c0, c1, sh, buf, rows);
    for_tokens_in(c0, c1, [&](const TileToken& t, int64_t lo, int64_t hi) {
      for_head_groups(nh, [&]<int kNh>(int64_t j0) {
        const float* p[kNh];
        float* acc[kNh];
        for (int j = 0; j < kNh; ++j) {
          p[j] = t.s + (j0 + j) * sh.row_stride + (c0 + lo - t.begin);
          acc[j] = t.acc + (j0 + j) * sh.hd_pad;
        }
        K::template weigh<kHalf, kNh>(sh, rows, lo, hi, p, acc);
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
      K::normalise(o, t.acc + j * sh.hd_pad, t.inv_sum[j], sh);
    }
  }
}

// The entry of attention_tile's contract (ops_internal.h) for the kernel type K.
template <typename K>
void tile(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
          float* scratch) {
  STRATA_CHECK(n >= 1 && n <= kAttentionMaxTileTokens, "attention_tile: bad tile size");
  if (a.kv_dtype == DType::kQ8_0) {
    tile_t<K, KvRows::kQ8_0>(a, toks, n, h0, h1, scratch);
  } else if (a.kv_dtype != DType::kF16) {
    tile_t<K, KvRows::kF32>(a, toks, n, h0, h1, scratch);
  } else if (n * (h1 - h0) >= kConvertMinRows) {
    tile_t<K, KvRows::kF16Converted>(a, toks, n, h0, h1, scratch);
  } else {
    tile_t<K, KvRows::kF16>(a, toks, n, h0, h1, scratch);
  }
}

}  // namespace
}  // namespace strata::internal::attention_tiling
