// AVX2 kernels of the K-quants against Q8_K activations, and the Q8_K activation quantiser.
// Entered only after the run-time CPU check (matmul.cc); see matmul_avx2.h for the tiling and
// its determinism rule. matmul_k_avxvnni.cc compiles the kernels (not the quantiser) again
// with AVX-VNNI's dot products (madd_add).
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>

#include "core/matmul_avx2.h"
#include "core/quant_blocks.h"

namespace strata::matmul_detail {
namespace {

using avx2::f16;
using avx2::hsum;
using avx2::hsum_i32;
using avx2::load256;
using avx2::madd_add;
using avx2::prefetch_ahead;
using avx2::run_rows;

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
          sumi[c] = madd_add(sumi[c], _mm256_maddubs_epi16(ql, load256(y)), s_l);
          sumi[c] = madd_add(sumi[c], _mm256_maddubs_epi16(qh, load256(y + 32)), s_h);
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
            sumi[c] = madd_add(sumi[c], p, s);
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

// ---- Q2_K / Q3_K / IQ4_XS weights against Q8_K activations ----

// These compute, per super-block and column, the integer sums of the scalar references (exact
// in any order), fold them with hsum_i32 and then run the references' float operations on
// scalars, in the same order: the results are the same bits.

// pshufb masks taking word 2j of a 128-bit half into every word of the low half and word 2j + 1
// into every word of the high half: from 8 sub-block scales in both halves, the scales of
// sub-blocks (2j, 2j + 1), which a 32-byte load of 16-element sub-blocks covers.
constexpr std::array<std::array<uint8_t, 32>, 4> make_pair_spread() {
  std::array<std::array<uint8_t, 32>, 4> m{};
  for (int j = 0; j < 4; ++j) {
    for (int b = 0; b < 32; ++b) m[j][b] = static_cast<uint8_t>(2 * (2 * j + b / 16) + b % 2);
  }
  return m;
}
alignas(32) constexpr auto kPairSpread = make_pair_spread();

inline __m256i pair_spread(__m256i eight_words, int j) {
  return _mm256_shuffle_epi8(
      eight_words, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairSpread[j].data())));
}

// The 16 bytes of v as words: bytes 0..7 in both halves (lo), bytes 8..15 in both (hi).
template <bool kSigned>
inline void words_in_both_halves(__m128i v, __m256i* lo, __m256i* hi) {
  const __m128i l = kSigned ? _mm_cvtepi8_epi16(v) : _mm_cvtepu8_epi16(v);
  const __m128i h =
      kSigned ? _mm_cvtepi8_epi16(_mm_srli_si128(v, 8)) : _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
  *lo = _mm256_broadcastsi128_si256(l);
  *hi = _mm256_broadcastsi128_si256(h);
}

// Q2_K: 2-bit quants used unsigned by maddubs against the activations, scaled per 16-element
// sub-block by madd; the mins' part from the Q8_K block sums.
struct Q2KKernel {
  static constexpr int kCols = 4;
  template <int C>
  static void tile(const uint8_t* wp, const void* const* xs, int64_t k, float* out) {
    const auto* w = reinterpret_cast<const BlockQ2_K*>(wp);
    const BlockQ8_K* x[C];
    float sum[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]);
      sum[c] = 0.0f;
    }
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t b = 0; b < k / kQKK; ++b) {
      const BlockQ2_K& wb = w[b];
      prefetch_ahead<sizeof(BlockQ2_K)>(&wb);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
      const __m128i m4 = _mm_set1_epi8(0x0f);
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
      __m256i scales[2];
      words_in_both_halves<false>(_mm_and_si128(sc8, m4), &scales[0], &scales[1]);
      __m256i isum[C];
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = load256(wb.qs + 32 * h);
        for (int j = 0; j < 4; ++j) {
          const __m256i q = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * j)), m3);
          const __m256i scw = pair_spread(scales[h], j);
          for (int c = 0; c < C; ++c) {
            const __m256i p = _mm256_maddubs_epi16(q, load256(x[c][b].qs + 128 * h + 32 * j));
            isum[c] = madd_add(isum[c], p, scw);
          }
        }
      }
      const float dw = f16(wb.d), dmw = f16(wb.dmin);
      for (int c = 0; c < C; ++c) {
        const int is = hsum_i32(isum[c]);
        const int ms = hsum_i32(_mm256_madd_epi16(load256(x[c][b].bsums), mins));
        const float d = x[c][b].d * dw;
        const float dmin = x[c][b].d * dmw;
        sum[c] += d * static_cast<float>(is) - dmin * static_cast<float>(ms);
      }
    }
    for (int c = 0; c < C; ++c) out[c] = sum[c];
  }
};

// Q3_K: the quant as u = q + 4 in 0..7 (2 low bits and the hmask bit) feeds maddubs unsigned;
// the +4 comes back out through the block sums: sum(sc * (u - 4) * y) = sum(sc * u * y) -
// 4 * sum_s sc_s * bsum_s.
struct Q3KKernel {
  static constexpr int kCols = 4;

  // The 16 signed sub-block scales (the 6-bit values minus 32), as q3_k_scale() unpacks them,
  // four at a time: low nibbles from bytes 0..7, top bits from bytes 8..11.
  static __m128i scales(const uint8_t* q) {
    uint32_t a[3];
    std::memcpy(a, q, 12);
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    const __m128i v =
        _mm_setr_epi32(static_cast<int>((a[0] & lo4) | ((a[2] & hi2) << 4)),
                       static_cast<int>((a[1] & lo4) | (((a[2] >> 2) & hi2) << 4)),
                       static_cast<int>(((a[0] >> 4) & lo4) | (((a[2] >> 4) & hi2) << 4)),
                       static_cast<int>(((a[1] >> 4) & lo4) | (((a[2] >> 6) & hi2) << 4)));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
  }

  template <int C>
  static void tile(const uint8_t* wp, const void* const* xs, int64_t k, float* out) {
    const auto* w = reinterpret_cast<const BlockQ3_K*>(wp);
    const BlockQ8_K* x[C];
    float sum[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]);
      sum[c] = 0.0f;
    }
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < k / kQKK; ++b) {
      const BlockQ3_K& wb = w[b];
      prefetch_ahead<sizeof(BlockQ3_K)>(&wb);
      const __m128i sc8 = scales(wb.scales);
      __m256i sc_pairs[2];
      words_in_both_halves<true>(sc8, &sc_pairs[0], &sc_pairs[1]);
      const __m256i hm = load256(wb.hmask);
      __m256i isum[C];
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = load256(wb.qs + 32 * h);
        for (int j = 0; j < 4; ++j) {
          const __m256i low = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * j)), m3);
          const __m256i high =
              _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + j)), one);
          const __m256i u = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
          const __m256i scw = pair_spread(sc_pairs[h], j);
          for (int c = 0; c < C; ++c) {
            const __m256i p = _mm256_maddubs_epi16(u, load256(x[c][b].qs + 128 * h + 32 * j));
            isum[c] = madd_add(isum[c], p, scw);
          }
        }
      }
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      const float dw = f16(wb.d);
      for (int c = 0; c < C; ++c) {
        const int bias = hsum_i32(_mm256_madd_epi16(load256(x[c][b].bsums), sc16));
        const int is = hsum_i32(isum[c]) - 4 * bias;
        sum[c] += x[c][b].d * dw * static_cast<float>(is);
      }
    }
    for (int c = 0; c < C; ++c) out[c] = sum[c];
  }
};

// IQ4_XS: the grid levels looked up by pshufb, products by the sign trick (|level| <= 127, so
// maddubs pairs stay below 2 * 127 * 127), scaled per 32-element sub-block by madd.
struct IQ4XSKernel {
  static constexpr int kCols = 4;

  // The 8 signed sub-block scales (ls - 32) as words, in both 128-bit halves: low nibbles from
  // scales_l (even sub-blocks in the low nibbles), top 2 bits from scales_h.
  static __m256i scales(const BlockIQ4_XS& b) {
    uint32_t l;
    std::memcpy(&l, b.scales_l, 4);
    const __m128i nib =
        _mm_unpacklo_epi8(_mm_cvtsi32_si128(static_cast<int>(l & 0x0f0f0f0fu)),
                          _mm_cvtsi32_si128(static_cast<int>((l >> 4) & 0x0f0f0f0fu)));
    const __m256i high =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h),
                                           _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                         _mm256_set1_epi32(3));
    const __m256i ls =
        _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(high, 4)),
                         _mm256_set1_epi32(32));
    const __m128i words =
        _mm_packs_epi32(_mm256_castsi256_si128(ls), _mm256_extracti128_si256(ls, 1));
    return _mm256_broadcastsi128_si256(words);
  }

  template <int C>
  static void tile(const uint8_t* wp, const void* const* xs, int64_t k, float* out) {
    const auto* w = reinterpret_cast<const BlockIQ4_XS*>(wp);
    const BlockQ8_K* x[C];
    float sum[C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]);
      sum[c] = 0.0f;
    }
    const __m256i grid = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < k / kQKK; ++b) {
      const BlockIQ4_XS& wb = w[b];
      prefetch_ahead<sizeof(BlockIQ4_XS)>(&wb);
      const __m256i ls = scales(wb);
      __m256i isum[C];
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {  // sub-blocks 2p and 2p + 1: 32 bytes of nibbles
        const __m256i raw = load256(wb.qs + 32 * p);
        const __m256i lo = _mm256_shuffle_epi8(grid, _mm256_and_si256(raw, m4));
        const __m256i hi =
            _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
        for (int t = 0; t < 2; ++t) {
          const __m256i q = t == 0 ? _mm256_permute2x128_si256(lo, hi, 0x20)
                                   : _mm256_permute2x128_si256(lo, hi, 0x31);
          const __m256i a = _mm256_sign_epi8(q, q);
          const __m256i scw = word_spread(ls, 2 * p + t);
          for (int c = 0; c < C; ++c) {
            const __m256i y = load256(x[c][b].qs + 64 * p + 32 * t);
            const __m256i prod = _mm256_maddubs_epi16(a, _mm256_sign_epi8(y, q));
            isum[c] = madd_add(isum[c], prod, scw);
          }
        }
      }
      const float dw = f16(wb.d);
      for (int c = 0; c < C; ++c) {
        sum[c] += x[c][b].d * dw * static_cast<float>(hsum_i32(isum[c]));
      }
    }
    for (int c = 0; c < C; ++c) out[c] = sum[c];
  }
};

#if !defined(STRATA_AVX_VNNI)
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQKK) {
    const float amax = avx2::abs_max(x, kQKK);
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 s = _mm256_set1_ps(iscale);
    for (int i = 0; i < kQKK; i += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + i), avx2::quant32(x + i, s));
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
#endif

}  // namespace

#if !defined(STRATA_AVX_VNNI)
void quantize_act_q8_k_avx2(const float* x, void* dst, int64_t k) {
  quantize_q8_k(x, static_cast<BlockQ8_K*>(dst), k / kQKK);
}
#endif

const MatmulKernel STRATA_AVX2_ENTRY(kQ4_K) = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                               run_rows<QKMinKernel<false, BlockQ4_K>>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ5_K) = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                               run_rows<QKMinKernel<true, BlockQ5_K>>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ6_K) = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                               run_rows<Q6KKernel>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ2_K) = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                               run_rows<Q2KKernel>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ3_K) = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                               run_rows<Q3KKernel>};
const MatmulKernel STRATA_AVX2_ENTRY(kIQ4_XS) = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                                 run_rows<IQ4XSKernel>};

}  // namespace strata::matmul_detail
