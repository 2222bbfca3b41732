// AVX2 + FMA + F16C kernels. Entered only after the run-time CPU check (matmul.cc).
//
// Every kernel computes a tile of C activation columns against one weight row, loading each
// weight block once for all C columns. Determinism across batch sizes rests on one rule: the
// operations applied to one column's accumulator are written once, in a loop over c, and are
// the same whatever C is, so column j gives the same bits alone or inside a batch of 17.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/matmul_internal.h"
#include "core/quant_blocks.h"
#include "core/simd_avx2.h"

namespace strata::matmul_detail {
namespace {

using ::strata::avx2::hmax;
using ::strata::avx2::hsum;

// Software prefetch this far ahead of the weight stream: measured ~20% faster batch-1 GEMV
// than the hardware prefetchers alone on the development machine (Zen).
constexpr int kPrefetchBytes = 2048;

// One prefetch per cache line of an object of `bytes` bytes at p, kPrefetchBytes ahead.
template <size_t kBytes>
inline void prefetch_ahead(const void* p) {
  for (size_t o = 0; o < kBytes; o += 64) {
    _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes + o, _MM_HINT_T0);
  }
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ---- F32 / F16 / BF16 weights against F32 activations ----

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
  static float scalar(const uint8_t* w, int64_t i) {
    float v;
    std::memcpy(&v, w + 4 * i, 4);
    return v;
  }
};

struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
  }
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    return f16(h);
  }
};

struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* w, int64_t i) {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

// Two 8-lane accumulators per column over 16 elements a step, then a scalar tail (k need not
// be a multiple of 16 for plain types) fused with explicit FMAs.
template <typename L>
struct FloatKernel {
  static constexpr int kCols = 4;
  template <int C>
  static void tile(const uint8_t* w, const void* const* xs, int64_t k, float* out) {
    const float* x[C];
    __m256 acc0[C], acc1[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const float*>(xs[c]);
      acc0[c] = _mm256_setzero_ps();
      acc1[c] = _mm256_setzero_ps();
    }
    const int64_t kv = k / 16 * 16;
    for (int64_t i = 0; i < kv; i += 16) {
      prefetch_ahead<1>(w + i * L::kBytes);
      const __m256 w0 = L::load(w, i);
      const __m256 w1 = L::load(w, i + 8);
      for (int c = 0; c < C; ++c) {
        acc0[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[c] + i), acc0[c]);
        acc1[c] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[c] + i + 8), acc1[c]);
      }
    }
    for (int c = 0; c < C; ++c) {
      float s = hsum(_mm256_add_ps(acc0[c], acc1[c]));
      for (int64_t i = kv; i < k; ++i) s = std::fma(L::scalar(w, i), x[c][i], s);
      out[c] = s;
    }
  }
};

// ---- Q8_0 weights against Q8_0 activations ----

// Two blocks a step. Each block's 32 products go through maddubs (|w| against x with w's
// sign; pairs stay below 2 * 128 * 127, no 16-bit saturation) and madd to 8 int32 lanes; one
// hadd folds blocks b and b + 1 into [b b b1 b1] per 128-bit half, so the float part (convert,
// scale, accumulate) runs once per pair: acc += (dw * dx) * float(hadd lanes), the same
// operations in every tile shape.
// [a0+a1, a2+a3, b0+b1, b2+b3] per 128-bit half, as vphaddd but in two shuffles and an add:
// vphaddd is several times slower on Zen 3.
inline __m256i pair_sum(__m256i a, __m256i b) {
  const __m256 fa = _mm256_castsi256_ps(a), fb = _mm256_castsi256_ps(b);
  const __m256i even = _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0x88));
  const __m256i odd = _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0xdd));
  return _mm256_add_epi32(even, odd);
}

struct Q8_0Kernel {
  // One weight row against 8 columns: the 16 registers hold 8 accumulators, both blocks'
  // weights and their scales; tile_rows<2, C> spills (measured slower).
  static constexpr int kCols = 8;

  struct Weights {
    __m256i abs0, abs1, w0, w1;
    __m256 d;
  };

  // Blocks b (and b + 1 unless `single`, else zeros) with their scales spread as the hadd lanes.
  static Weights load(const BlockQ8_0* b, bool single) {
    const __m256i w0 = load256(b[0].qs);
    const __m256i w1 = single ? _mm256_setzero_si256() : load256(b[1].qs);
    const uint32_t dd = single ? b[0].d : b[0].d | static_cast<uint32_t>(b[1].d) << 16;
    const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3);
    return {_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(w1, w1), w0, w1,
            _mm256_cvtph_ps(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(dd)), spread))};
  }

  template <int R, int C>
  static void step(const Weights* wv, const BlockQ8_0* const* x, const float* const* xd, int64_t b,
                   bool single, __m256 (*acc)[C]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int c = 0; c < C; ++c) {
      const __m256i x0 = load256(x[c][b].qs);
      const __m256i x1 = single ? _mm256_setzero_si256() : load256(x[c][b + 1].qs);
      const __m256 dx = _mm256_loadu_ps(xd[c] + 4 * b);
      for (int r = 0; r < R; ++r) {
        const __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(wv[r].abs0, _mm256_sign_epi8(x0, wv[r].w0)), ones);
        const __m256i p1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(wv[r].abs1, _mm256_sign_epi8(x1, wv[r].w1)), ones);
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(wv[r].d, dx),
                                    _mm256_cvtepi32_ps(pair_sum(p0, p1)), acc[r][c]);
      }
    }
  }

  template <int C>
  static void tile(const uint8_t* w, const void* const* xs, int64_t k, float* out) {
    tile_rows<1, C>(w, 0, xs, k, out);
  }

  // out[r * C + c].
  template <int R, int C>
  static void tile_rows(const uint8_t* wp, size_t w_row_bytes, const void* const* xs, int64_t k,
                        float* out) {
    const BlockQ8_0* w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ8_0*>(wp + r * w_row_bytes);
    const BlockQ8_0* x[C];
    const float* xd[C];
    __m256 acc[R][C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_0*>(xs[c]);
      xd[c] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(xs[c]) +
                                             q8_0_scales_offset(k));
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_setzero_ps();
    }
    const int64_t nb = k / kQK8_0;
    Weights wv[R];
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<2 * sizeof(BlockQ8_0)>(w[r] + b);
        wv[r] = load(w[r] + b, false);
      }
      step<R, C>(wv, x, xd, b, false, acc);
    }
    if (b < nb) {
      for (int r = 0; r < R; ++r) wv[r] = load(w[r] + b, true);
      step<R, C>(wv, x, xd, b, true, acc);
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) out[r * C + c] = hsum(acc[r][c]);
    }
  }
};

// ---- Q4_0 weights against Q4_0ActPair activations ----

// Two blocks a step: one register of low nibbles and one of high nibbles cover 64 elements,
// used unsigned by maddubs (products <= 15 * 127, so no 16-bit saturation), with the +8 bias
// taken out by the activation's precomputed offsets. Per output element and pair of blocks:
// acc += (dw * dx) * float(isum_lanes - off), the same operations in every tile shape.
struct Q4_0Kernel {
  static constexpr int kCols = 6;  // tile_rows<2, C> spills registers (measured slower)

  struct Weights {
    __m256i lo, hi;
    __m256 d;
  };

  // Blocks b (and b + 1 unless `single`): nibbles, and the scales spread over 4 lanes each.
  static Weights load(const BlockQ4_0* b, bool single) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs));
    const __m256i raw = single ? _mm256_zextsi128_si256(q0)
                               : _mm256_inserti128_si256(
                                     _mm256_castsi128_si256(q0),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)), 1);
    const uint32_t dd = single ? b[0].d : b[0].d | static_cast<uint32_t>(b[1].d) << 16;
    const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    return {_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
            _mm256_cvtph_ps(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(dd)), spread))};
  }

  template <int R, int C>
  static void step(const Weights* wv, const Q4_0ActPair* const* x, int64_t p, __m256 (*acc)[C]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int c = 0; c < C; ++c) {
      const Q4_0ActPair& xp = x[c][p];
      const __m256i xl = load256(xp.lo), xh = load256(xp.hi), off = load256(xp.off);
      const __m256 dx = _mm256_loadu_ps(xp.d);
      for (int r = 0; r < R; ++r) {
        const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[r].lo, xl),
                                             _mm256_maddubs_epi16(wv[r].hi, xh));
        const __m256i s32 = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), off);
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(wv[r].d, dx), _mm256_cvtepi32_ps(s32), acc[r][c]);
      }
    }
  }

  template <int C>
  static void tile(const uint8_t* w, const void* const* xs, int64_t k, float* out) {
    tile_rows<1, C>(w, 0, xs, k, out);
  }

  // out[r * C + c].
  template <int R, int C>
  static void tile_rows(const uint8_t* wp, size_t w_row_bytes, const void* const* xs, int64_t k,
                        float* out) {
    const BlockQ4_0* w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ4_0*>(wp + r * w_row_bytes);
    const Q4_0ActPair* x[C];
    __m256 acc[R][C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const Q4_0ActPair*>(xs[c]);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_setzero_ps();
    }
    const int64_t nb = k / kQK4_0;
    const int64_t np = nb / 2;
    Weights wv[R];
    for (int64_t p = 0; p < np; ++p) {
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<1>(w[r] + 2 * p);  // 36 bytes a pair: about two per cache line
        wv[r] = load(w[r] + 2 * p, false);
      }
      step<R, C>(wv, x, p, acc);
    }
    if (nb % 2 != 0) {
      for (int r = 0; r < R; ++r) wv[r] = load(w[r] + 2 * np, true);
      step<R, C>(wv, x, np, acc);
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) out[r * C + c] = hsum(acc[r][c]);
    }
  }
};

// ---- Q4_K / Q5_K weights against Q8_K activations ----

// The 8 six-bit scales and mins of a super-block (kscale_min, four at a time).
inline void unpack_scale_mins(const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, q, 4);
  std::memcpy(&u1, q + 4, 4);
  std::memcpy(&u2, q + 8, 4);
  const uint32_t s[2] = {u0 & 0x3f3f3f3fu, (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)};
  const uint32_t m[2] = {u1 & 0x3f3f3f3fu, ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)};
  std::memcpy(sc, s, 8);
  std::memcpy(mn, m, 8);
}

// pshufb masks broadcasting 16-bit word s (0..7) of each 128-bit half over the half.
constexpr std::array<std::array<uint8_t, 32>, 8> make_word_spread() {
  std::array<std::array<uint8_t, 32>, 8> m{};
  for (int s = 0; s < 8; ++s) {
    for (int b = 0; b < 32; ++b) m[s][b] = static_cast<uint8_t>(2 * s + b % 2);
  }
  return m;
}
alignas(32) constexpr auto kWordSpread = make_word_spread();

inline __m256i word_spread(__m256i v, int s) {
  return _mm256_shuffle_epi8(
      v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kWordSpread[s].data())));
}

template <bool kFive, typename Block>
struct QKMinKernel {
  static constexpr int kCols = 4;
  template <int C>
  static void tile(const uint8_t* wp, const void* const* xs, int64_t k, float* out) {
    const Block* w = reinterpret_cast<const Block*>(wp);
    const BlockQ8_K* x[C];
    __m256 acc[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]);
      acc[c] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i bit = _mm256_set1_epi8(1);
    const int64_t nb = k / kQKK;
    for (int64_t b = 0; b < nb; ++b) {
      const Block& wb = w[b];
      prefetch_ahead<sizeof(Block)>(&wb);
      alignas(8) uint8_t sc[8], mn[8];
      unpack_scale_mins(wb.scales, sc, mn);
      // Each min twice, to pair with the two 16-element block sums of its sub-block.
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)));
      const __m256i sc16 = _mm256_broadcastsi128_si256(
          _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
      const __m256i mins =
          _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
      __m256i hbits;
      if constexpr (kFive) hbits = load256(wb.qh);
      __m256i sumi[C];
      for (int c = 0; c < C; ++c) sumi[c] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {  // 64 elements: sub-blocks 2j (low nibbles), 2j+1 (high)
        const __m256i raw = load256(wb.qs + 32 * j);
        __m256i ql = _mm256_and_si256(raw, m4);
        __m256i qh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (kFive) {
          ql = _mm256_or_si256(ql, _mm256_slli_epi16(_mm256_and_si256(hbits, bit), 4));
          qh = _mm256_or_si256(
              qh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), bit), 4));
          hbits = _mm256_srli_epi16(hbits, 2);
        }
        const __m256i s_l = word_spread(sc16, 2 * j);
        const __m256i s_h = word_spread(sc16, 2 * j + 1);
        for (int c = 0; c < C; ++c) {
          const int8_t* y = x[c][b].qs + 64 * j;
          const __m256i p_l = _mm256_madd_epi16(_mm256_maddubs_epi16(ql, load256(y)), s_l);
          const __m256i p_h = _mm256_madd_epi16(_mm256_maddubs_epi16(qh, load256(y + 32)), s_h);
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p_l, p_h));
        }
      }
      const float dw = f16(wb.d), dmw = f16(wb.dmin);
      for (int c = 0; c < C; ++c) {
        const __m256i pm = _mm256_madd_epi16(load256(x[c][b].bsums), mins);
        const float dx = x[c][b].d;
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-(dx * dmw)), _mm256_cvtepi32_ps(pm), acc[c]);
      }
    }
    for (int c = 0; c < C; ++c) out[c] = hsum(acc[c]);
  }
};

// ---- Q6_K weights against Q8_K activations ----

// pshufb masks spreading scales (2i, 2i+1) over 8 bytes each.
constexpr std::array<std::array<uint8_t, 16>, 8> make_scale_masks() {
  std::array<std::array<uint8_t, 16>, 8> m{};
  for (int i = 0; i < 8; ++i) {
    for (int b = 0; b < 16; ++b) m[i][b] = static_cast<uint8_t>(2 * i + b / 8);
  }
  return m;
}
alignas(16) constexpr auto kScaleMasks = make_scale_masks();

struct Q6KKernel {
  static constexpr int kCols = 4;
  // Quants stored as q + 32 in 0..63 feed maddubs unsigned; the 32 offset is taken out once
  // per block through the Q8_K block sums: sum(s * 32 * y) = 32 * sum_g s_g * bsum_g.
  template <int C>
  static void tile(const uint8_t* wp, const void* const* xs, int64_t k, float* out) {
    const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(wp);
    const BlockQ8_K* x[C];
    __m256 acc[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]);
      acc[c] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m3 = _mm256_set1_epi8(0x03);
    const int64_t nb = k / kQKK;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K& wb = w[b];
      prefetch_ahead<sizeof(BlockQ6_K)>(&wb);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
      __m256i sumi[C];
      for (int c = 0; c < C; ++c) sumi[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(wb.ql + 64 * h);
        const __m256i ql1 = load256(wb.ql + 64 * h + 32);
        const __m256i qhv = load256(wb.qh + 32 * h);
        for (int g = 0; g < 4; ++g) {
          const __m256i lo_src = g % 2 == 0 ? ql0 : ql1;
          const __m256i lo = g < 2 ? _mm256_and_si256(lo_src, m4)
                                   : _mm256_and_si256(_mm256_srli_epi16(lo_src, 4), m4);
          const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qhv, _mm_cvtsi32_si128(2 * g)), m3);
          const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
          const __m128i pair = _mm_shuffle_epi8(
              sc8, _mm_load_si128(reinterpret_cast<const __m128i*>(kScaleMasks[4 * h + g].data())));
          const __m256i s = _mm256_cvtepi8_epi16(pair);
          for (int c = 0; c < C; ++c) {
            const __m256i p = _mm256_maddubs_epi16(q, load256(x[c][b].qs + 128 * h + 32 * g));
            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, s));
          }
        }
      }
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      const float dw = f16(wb.d);
      for (int c = 0; c < C; ++c) {
        const __m256i off = _mm256_madd_epi16(load256(x[c][b].bsums), sc16);
        const __m256i tot = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(off, 5));
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(x[c][b].d * dw), _mm256_cvtepi32_ps(tot), acc[c]);
      }
    }
    for (int c = 0; c < C; ++c) out[c] = hsum(acc[c]);
  }
};

// ---- Driver ----

// Rows in small groups so that a tile's activations stay in L1 while a few weight rows pass
// over them; the weights themselves are read from memory once.
constexpr int64_t kRowGroup = 4;

template <typename K, int C>
void tile_one(const MatmulArgs& a, int64_t r, const void* const* cols, int64_t j) {
  float out[C];
  K::template tile<C>(a.w + r * a.w_row_bytes, cols, a.k, out);
  for (int c = 0; c < C; ++c) a.y[(j + c) * a.y_stride + r] = out[c];
}

template <typename K, int C>
void tile_rows(const MatmulArgs& a, int64_t r0, int64_t r1, const void* const* cols, int64_t j) {
  for (int64_t r = r0; r < r1; ++r) tile_one<K, C>(a, r, cols, j);
}

// tile_rows<K, nc> for a run-time nc in 1..C.
template <typename K, int C>
void tile_rows_n(int nc, const MatmulArgs& a, int64_t r0, int64_t r1, const void* const* cols,
                 int64_t j) {
  if constexpr (C > 1) {
    if (nc < C) return tile_rows_n<K, C - 1>(nc, a, r0, r1, cols, j);
  }
  tile_rows<K, C>(a, r0, r1, cols, j);
}

template <typename K>
void run_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const bool plain = activation_dtype(a.dtype) == DType::kF32;
  constexpr int kCols = K::kCols;
  const void* cols[kCols];
  for (int64_t rg = r0; rg < r1; rg += kRowGroup) {
    const int64_t rg_end = std::min(r1, rg + kRowGroup);
    for (int64_t j = 0; j < a.m; j += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, a.m - j));
      for (int c = 0; c < nc; ++c) {
        cols[c] = plain ? static_cast<const void*>(a.x + (j + c) * a.x_stride)
                        : static_cast<const void*>(a.xq + (j + c) * a.xq_col_bytes);
      }
      tile_rows_n<K, kCols>(nc, a, rg, rg_end, cols, j);
    }
  }
}

// ---- Activation quantisers, bit-identical to quantize_row_q8_0 / _q8_k ----

// round half to even and clamp to +-127, as round_clamp() in quant.cc; then 8 int32 lanes.
inline __m256i quant8(__m256 v, __m256 scale) {
  const __m256 r =
      _mm256_round_ps(_mm256_mul_ps(v, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(c);
}

// 32 floats -> 32 int8 in order.
inline __m256i quant32(const float* x, __m256 scale) {
  const __m256i i0 = quant8(_mm256_loadu_ps(x), scale);
  const __m256i i1 = quant8(_mm256_loadu_ps(x + 8), scale);
  const __m256i i2 = quant8(_mm256_loadu_ps(x + 16), scale);
  const __m256i i3 = quant8(_mm256_loadu_ps(x + 24), scale);
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

float abs_max(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  return hmax(m);
}

void quantize_q8_0(const float* x, BlockQ8_0* y, float* scales, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK8_0) {
    const float d = abs_max(x, kQK8_0) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    q8_0_set_scale(scales, b, f16(y[b].d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), quant32(x, _mm256_set1_ps(id)));
  }
  if (nb % 2 != 0) q8_0_set_scale(scales, nb, 0.0f);
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQKK) {
    const float amax = abs_max(x, kQKK);
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 s = _mm256_set1_ps(iscale);
    for (int i = 0; i < kQKK; i += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + i), quant32(x + i, s));
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      const __m128i v =
          _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(y[b].qs + 16 * g)));
      const __m128i w = _mm_cvtepi8_epi16(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(y[b].qs + 16 * g + 8)));
      __m128i s32 = _mm_madd_epi16(_mm_add_epi16(v, w), _mm_set1_epi16(1));
      s32 = _mm_add_epi32(s32, _mm_shuffle_epi32(s32, 0x4e));
      s32 = _mm_add_epi32(s32, _mm_shuffle_epi32(s32, 0xb1));
      y[b].bsums[g] = static_cast<int16_t>(_mm_cvtsi128_si32(s32));
    }
    y[b].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

void pack_q4_0(const float* x, Q4_0ActPair* out, int64_t nb) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
    Q4_0ActPair& o = out[p];
    std::memset(&o, 0, sizeof o);
    for (int h = 0; h < 2 && 2 * p + h < nb; ++h) {
      const float* xb = x + (2 * p + h) * kQK8_0;
      const float d = abs_max(xb, kQK8_0) / 127.0f;  // as quantize_q8_0
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const float dr = f16(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
      const __m256i q = quant32(xb, _mm256_set1_ps(id));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.lo + 16 * h), _mm256_castsi256_si128(q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.hi + 16 * h), _mm256_extracti128_si256(q, 1));
      for (int i = 0; i < 4; ++i) o.d[4 * h + i] = dr;
    }
    // The kernel's lane sums, with the activations in place of the nibbles, times 8.
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(ones8, load256(o.lo)),
                                         _mm256_maddubs_epi16(ones8, load256(o.hi)));
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.off), _mm256_slli_epi32(s32, 3));
  }
}

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t r0, int64_t r1) {
  switch (a.dtype) {
    case DType::kF32:
      return run_rows<FloatKernel<LoadF32>>(a, r0, r1);
    case DType::kF16:
      return run_rows<FloatKernel<LoadF16>>(a, r0, r1);
    case DType::kBF16:
      return run_rows<FloatKernel<LoadBF16>>(a, r0, r1);
    case DType::kQ8_0:
      return run_rows<Q8_0Kernel>(a, r0, r1);
    case DType::kQ4_0:
      return run_rows<Q4_0Kernel>(a, r0, r1);
    case DType::kQ4_K:
      return run_rows<QKMinKernel<false, BlockQ4_K>>(a, r0, r1);
    case DType::kQ5_K:
      return run_rows<QKMinKernel<true, BlockQ5_K>>(a, r0, r1);
    case DType::kQ6_K:
      return run_rows<Q6KKernel>(a, r0, r1);
    default:
      STRATA_CHECK(false, "matmul: dtype without kernels");
  }
}

void pack_q4_0_activation_avx2(const float* x, void* dst, int64_t k) {
  pack_q4_0(x, static_cast<Q4_0ActPair*>(dst), k / kQK8_0);
}

void quantize_activation_avx2(DType act, const float* x, void* dst, int64_t k) {
  switch (act) {
    case DType::kQ8_0:
      return quantize_q8_0(
          x, static_cast<BlockQ8_0*>(dst),
          reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + q8_0_scales_offset(k)), k / kQK8_0);
    case DType::kQ8_K:
      return quantize_q8_k(x, static_cast<BlockQ8_K*>(dst), k / kQKK);
    default:
      STRATA_CHECK(false, "matmul: no activation quantiser for this dtype");
  }
}

}  // namespace strata::matmul_detail
