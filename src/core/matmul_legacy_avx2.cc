// AVX2 kernels of the 32-element block formats against Q8 activations, and their activation
// quantisers. Entered only after the run-time CPU check (matmul.cc); see matmul_avx2.h for the
// tiling and its determinism rule. matmul_legacy_avxvnni.cc compiles the kernels (not the
// quantisers, whose output the two share) again with AVX-VNNI's dot products.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>

#include "core/matmul_avx2.h"
#include "core/quant_blocks.h"

namespace strata::matmul_detail {
namespace {

using avx2::dot_u8i8;
using avx2::dot_u8i8_2;
using avx2::f16;
using avx2::hsum;
using avx2::iq4_values;
using avx2::load256;
using avx2::pair_sum;
using avx2::prefetch_ahead;
using avx2::run_rows;
using avx2::unpack_nibbles;

// ---- Q8_0 weights against Q8_0 activations ----

// Two blocks a step. Each block's 32 products go through maddubs (|w| against x with w's
// sign; pairs stay below 2 * 128 * 127, no 16-bit saturation) and madd to 8 int32 lanes; one
// hadd folds blocks b and b + 1 into [b b b1 b1] per 128-bit half, so the float part (convert,
// scale, accumulate) runs once per pair: acc += (dw * dx) * float(hadd lanes), the same
// operations in every tile shape.
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
    for (int c = 0; c < C; ++c) {
      const __m256i x0 = load256(x[c][b].qs);
      const __m256i x1 = single ? _mm256_setzero_si256() : load256(x[c][b + 1].qs);
      const __m256 dx = _mm256_loadu_ps(xd[c] + 4 * b);
      for (int r = 0; r < R; ++r) {
        const __m256i p0 = dot_u8i8(wv[r].abs0, _mm256_sign_epi8(x0, wv[r].w0));
        const __m256i p1 = dot_u8i8(wv[r].abs1, _mm256_sign_epi8(x1, wv[r].w1));
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

// ---- Q4_0 and MXFP4 weights against Q4_0ActPair activations ----

// The tile loop of the kernels that take a row's blocks in pairs (b, b + 1) against
// Q4_0ActPair columns: K::load(blocks of a row, single) unpacks a pair (block b alone when
// `single`), K::step<R, C> applies it to every accumulator. An odd last block is loaded alone;
// its missing partner has zero weights and a zero scale.
template <typename K>
struct PairTiles {
  template <int C>
  static void tile(const uint8_t* w, const void* const* xs, int64_t k, float* out) {
    tile_rows<1, C>(w, 0, xs, k, out);
  }

  // out[r * C + c].
  template <int R, int C>
  static void tile_rows(const uint8_t* wp, size_t w_row_bytes, const void* const* xs, int64_t k,
                        float* out) {
    using Block = typename K::Block;
    const Block* w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const Block*>(wp + r * w_row_bytes);
    const Q4_0ActPair* x[C];
    __m256 acc[R][C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const Q4_0ActPair*>(xs[c]);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_setzero_ps();
    }
    const int64_t nb = k / 32;
    const int64_t np = nb / 2;
    typename K::Weights wv[R];
    for (int64_t p = 0; p < np; ++p) {
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<1>(w[r] + 2 * p);  // 34 or 36 bytes a pair: about two per cache line
        wv[r] = K::load(w[r] + 2 * p, false);
      }
      K::template step<R, C>(wv, x, p, acc);
    }
    if (nb % 2 != 0) {
      for (int r = 0; r < R; ++r) wv[r] = K::load(w[r] + 2 * np, true);
      K::template step<R, C>(wv, x, np, acc);
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) out[r * C + c] = hsum(acc[r][c]);
    }
  }
};

// The nibbles of blocks b and b + 1 (zeros for b + 1 when `single`): qs of b in the low half,
// of b + 1 in the high half.
template <typename Block>
__m256i pair_nibbles(const Block* b, bool single) {
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs));
  return single ? _mm256_zextsi128_si256(q0)
                : _mm256_inserti128_si256(
                      _mm256_castsi128_si256(q0),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)), 1);
}

// Two blocks a step: one register of low nibbles and one of high nibbles cover 64 elements,
// used unsigned by maddubs (products <= 15 * 127, so no 16-bit saturation), with the +8 bias
// taken out by the activation's precomputed offsets. Per output element and pair of blocks:
// acc += (dw * dx) * float(isum_lanes - off), the same operations in every tile shape.
struct Q4_0Kernel : PairTiles<Q4_0Kernel> {
  using Block = BlockQ4_0;
  static constexpr int kCols = 6;  // tile_rows<2, C> spills registers (measured slower)

  struct Weights {
    __m256i lo, hi;
    __m256 d;
  };

  // Blocks b (and b + 1 unless `single`): nibbles, and the scales spread over 4 lanes each.
  static Weights load(const BlockQ4_0* b, bool single) {
    const __m256i raw = pair_nibbles(b, single);
    const uint32_t dd = single ? b[0].d : b[0].d | static_cast<uint32_t>(b[1].d) << 16;
    const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    return {_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
            _mm256_cvtph_ps(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(dd)), spread))};
  }

  template <int R, int C>
  static void step(const Weights* wv, const Q4_0ActPair* const* x, int64_t p, __m256 (*acc)[C]) {
    for (int c = 0; c < C; ++c) {
      const Q4_0ActPair& xp = x[c][p];
      const __m256i xl = load256(xp.lo), xh = load256(xp.hi), off = load256(xp.off);
      const __m256 dx = _mm256_loadu_ps(xp.d);
      for (int r = 0; r < R; ++r) {
        const __m256i s32 = _mm256_sub_epi32(dot_u8i8_2(wv[r].lo, xl, wv[r].hi, xh), off);
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(wv[r].d, dx), _mm256_cvtepi32_ps(s32), acc[r][c]);
      }
    }
  }
};

// As Q4_0, with each nibble looked up in kMXFP4Values (pshufb) and the block's E8M0 scale. The
// values are signed, so the products go through the sign trick: maddubs(|w|, x * sign(w)),
// pairs at most 2 * 12 * 127 and the low- and high-nibble sums together 4 * 12 * 127, far from
// 16-bit saturation; no bias, so the activations' offsets are not read. Per output element and
// pair of blocks: acc += (dw * dx) * float(isum_lanes), which dot_mxfp4() repeats.
// |kMXFP4Values|: codes c and c + 8 differ only in their sign.
constexpr std::array<int8_t, 16> kMXFP4Magnitudes = [] {
  std::array<int8_t, 16> m{};
  for (int c = 0; c < 16; ++c) m[c] = kMXFP4Values[c % 8];
  return m;
}();
static_assert([] {
  for (int c = 0; c < 8; ++c) {
    if (kMXFP4Values[c] < 0 || kMXFP4Values[c + 8] != -kMXFP4Values[c]) return false;
  }
  return true;
}());

struct MXFP4Kernel : PairTiles<MXFP4Kernel> {
  using Block = BlockMXFP4;
  // Measured faster than 4 or 5 (m = 16 and 256), though 6 accumulators and 5 weight registers
  // leave too few for the columns' operands.
  static constexpr int kCols = 6;

  struct Weights {
    __m256i abs_lo, abs_hi;    // |values| of the low and high nibbles
    __m256i sign_lo, sign_hi;  // bit 7 of each byte: the sign bit (bit 3) of its nibble
    __m256 d;                  // the half scales, over the 4 lanes of their block
  };

  // The magnitudes by lookup; the signs need no lookup, a code's bit 3 being its sign. A zero
  // magnitude makes its product 0 whatever the sign (codes 0 and 8, and the byte above a zero
  // nibble whose sign register holds bits of its neighbour).
  static Weights load(const BlockMXFP4* b, bool single) {
    const __m256i raw = pair_nibbles(b, single);
    const __m256i grid = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Magnitudes.data())));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i abs_lo = _mm256_shuffle_epi8(grid, _mm256_and_si256(raw, m4));
    const __m256i abs_hi =
        _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
    const __m128 d0 = _mm_broadcast_ss(&kMXFP4HalfScales[b[0].e]);
    const __m128 d1 = single ? _mm_setzero_ps() : _mm_broadcast_ss(&kMXFP4HalfScales[b[1].e]);
    return {abs_lo, abs_hi, _mm256_slli_epi16(raw, 4), raw, _mm256_set_m128(d1, d0)};
  }

  template <int R, int C>
  static void step(const Weights* wv, const Q4_0ActPair* const* x, int64_t p, __m256 (*acc)[C]) {
    for (int c = 0; c < C; ++c) {
      const Q4_0ActPair& xp = x[c][p];
      const __m256i xl = load256(xp.lo), xh = load256(xp.hi);
      const __m256 dx = _mm256_loadu_ps(xp.d);
      for (int r = 0; r < R; ++r) {
        const __m256i s32 = dot_u8i8_2(wv[r].abs_lo, _mm256_sign_epi8(xl, wv[r].sign_lo),
                                       wv[r].abs_hi, _mm256_sign_epi8(xh, wv[r].sign_hi));
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(wv[r].d, dx), _mm256_cvtepi32_ps(s32), acc[r][c]);
      }
    }
  }
};

// ---- Q4_1 / Q5_0 / Q5_1 / IQ4_NL weights against Q8 columns with block sums ----

// 32 bytes: byte j is 0xff when bit j of `bits` is set, else 0.
inline __m256i expand_bits(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

inline __m256i unpack_five(const uint8_t* qs, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_or_si256(unpack_nibbles(qs),
                         _mm256_and_si256(expand_bits(bits), _mm256_set1_epi8(0x10)));
}

// Each format's 32 integer quants of a block, plus kBias: dot_q8_sum's V::value is the quant
// minus kBias, which comes back out exactly as kBias * (the activations' integer block sum).
// kSigned: the quants can be negative, and the products go through the sign trick.
struct Q4_1Unpack {
  using Block = BlockQ4_1;
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kBias = 0;
  static __m256i values(const Block& b) { return unpack_nibbles(b.qs); }
};

struct Q5_1Unpack {
  using Block = BlockQ5_1;
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kBias = 0;
  static __m256i values(const Block& b) { return unpack_five(b.qs, b.qh); }
};

struct Q5_0Unpack {
  using Block = BlockQ5_0;
  static constexpr bool kMin = false, kSigned = false;
  static constexpr int kBias = 16;
  static __m256i values(const Block& b) { return unpack_five(b.qs, b.qh); }
};

struct IQ4_NLUnpack {
  using Block = BlockIQ4_NL;
  static constexpr bool kMin = false, kSigned = true;
  static constexpr int kBias = 0;
  static __m256i values(const Block& b) { return iq4_values(b.qs); }
};

// Eight blocks a step: each block's 32 products go through maddubs (pairs stay below
// 2 * 127 * 127, no 16-bit saturation) and madd to 8 int32 lanes, and pair_sum folds the 8
// blocks into one register, lane i = block i's exact integer sum. Then, lane-wise, the float
// part of dot_q8_sum: t = (dw * dx) * float(isum) [+ m * s]; acc += t; and at the end
// hsum(acc). These are the scalar reference's operations in its order, so the results are the
// same bits.
template <typename U>
struct Q8SumKernel {
  static constexpr int kCols = 4;
  using Block = typename U::Block;

  template <int C>
  static void tile(const uint8_t* wp, const void* const* xs, int64_t k, float* out) {
    const auto* w = reinterpret_cast<const Block*>(wp);
    const int64_t nb = k / 32, nb8 = q8_sum_padded_blocks(k);
    const int8_t* xq[C];
    const float* xd[C];
    __m256 acc[C];
    for (int c = 0; c < C; ++c) {
      xq[c] = static_cast<const int8_t*>(xs[c]);
      xd[c] = reinterpret_cast<const float*>(xq[c] + k);
      acc[c] = _mm256_setzero_ps();
    }
    int64_t g = 0;
    for (; g + 8 <= nb; g += 8) step<C, true>(w + g, 8, xq, xd, g, nb8, acc);
    if (g < nb) step<C, false>(w + g, static_cast<int>(nb - g), xq, xd, g, nb8, acc);
    for (int c = 0; c < C; ++c) out[c] = hsum(acc[c]);
  }

  // The f16 fields of blocks 0..7 as floats; zero for blocks n and up.
  template <bool kFull, uint16_t Block::*kField>
  static __m256 halves(const Block* w, int n) {
    if constexpr (kFull) {
      return _mm256_cvtph_ps(
          _mm_setr_epi16(static_cast<int16_t>(w[0].*kField), static_cast<int16_t>(w[1].*kField),
                         static_cast<int16_t>(w[2].*kField), static_cast<int16_t>(w[3].*kField),
                         static_cast<int16_t>(w[4].*kField), static_cast<int16_t>(w[5].*kField),
                         static_cast<int16_t>(w[6].*kField), static_cast<int16_t>(w[7].*kField)));
    } else {
      alignas(16) uint16_t h[8] = {};
      for (int i = 0; i < n; ++i) h[i] = w[i].*kField;
      return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
    }
  }

  // Block i against 32 activations: 8 int32 lanes whose sum is the block's integer dot.
  static __m256i dot(__m256i q, __m256i a, const int8_t* x) {
    const __m256i y = load256(x);
    return U::kSigned ? dot_u8i8(a, _mm256_sign_epi8(y, q)) : dot_u8i8(q, y);
  }

  // Blocks g .. g + n (n = 8 unless kFull is false). Missing blocks have zero weights and
  // scales, so their lanes add +0.0, which leaves an accumulator (never -0.0) unchanged.
  template <int C, bool kFull>
  static void step(const Block* w, int n, const int8_t* const* xq, const float* const* xd,
                   int64_t g, int64_t nb8, __m256* acc) {
    prefetch_ahead<8 * sizeof(Block)>(w);
    __m256i pairs[C][4];  // pair_sum of blocks (2i, 2i + 1)
    for (int i = 0; i < 8; i += 2) {
      const bool has0 = kFull || i < n, has1 = kFull || i + 1 < n;
      const __m256i zero = _mm256_setzero_si256();
      const __m256i q0 = has0 ? U::values(w[i]) : zero, q1 = has1 ? U::values(w[i + 1]) : zero;
      const __m256i a0 = _mm256_sign_epi8(q0, q0), a1 = _mm256_sign_epi8(q1, q1);
      for (int c = 0; c < C; ++c) {
        const __m256i v0 = has0 ? dot(q0, a0, xq[c] + 32 * (g + i)) : zero;
        const __m256i v1 = has1 ? dot(q1, a1, xq[c] + 32 * (g + i + 1)) : zero;
        pairs[c][i / 2] = pair_sum(v0, v1);
      }
    }
    const __m256 dw = halves<kFull, &Block::d>(w, n);
    __m256 mw = _mm256_setzero_ps();
    if constexpr (U::kMin) mw = halves<kFull, &Block::m>(w, n);
    for (int c = 0; c < C; ++c) {
      // Per 128-bit half the sums of blocks 0..3 (of their lanes in that half), then both
      // halves added: lane i = block i.
      const __m256i a = pair_sum(pairs[c][0], pairs[c][1]);
      const __m256i b = pair_sum(pairs[c][2], pairs[c][3]);
      __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                                     _mm256_permute2x128_si256(a, b, 0x31));
      if constexpr (U::kBias != 0) {
        const __m256i xsum = load256(xd[c] + 2 * nb8 + g);
        sum = _mm256_sub_epi32(sum, _mm256_mullo_epi32(xsum, _mm256_set1_epi32(U::kBias)));
      }
      __m256 t =
          _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(xd[c] + g)), _mm256_cvtepi32_ps(sum));
      if constexpr (U::kMin) {
        t = _mm256_add_ps(t, _mm256_mul_ps(mw, _mm256_loadu_ps(xd[c] + nb8 + g)));
      }
      acc[c] = _mm256_add_ps(acc[c], t);
    }
  }
};

#if !defined(STRATA_AVX_VNNI)
void quantize_q8_0(const float* x, BlockQ8_0* y, float* scales, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK8_0) {
    const float d = avx2::abs_max(x, kQK8_0) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    q8_0_set_scale(scales, b, f16(y[b].d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), avx2::quant32(x, _mm256_set1_ps(id)));
  }
  if (nb % 2 != 0) q8_0_set_scale(scales, nb, 0.0f);
}

void pack_q4_0(const float* x, Q4_0ActPair* out, int64_t nb) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
    Q4_0ActPair& o = out[p];
    std::memset(&o, 0, sizeof o);
    for (int h = 0; h < 2 && 2 * p + h < nb; ++h) {
      const float* xb = x + (2 * p + h) * kQK8_0;
      const float d = avx2::abs_max(xb, kQK8_0) / 127.0f;  // as quantize_q8_0
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const float dr = f16(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
      const __m256i q = avx2::quant32(xb, _mm256_set1_ps(id));
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
#endif

}  // namespace

#if !defined(STRATA_AVX_VNNI)

void quantize_act_q4_0_pairs_avx2(const float* x, void* dst, int64_t k) {
  pack_q4_0(x, static_cast<Q4_0ActPair*>(dst), k / kQK8_0);
}

void quantize_act_q8_sum_avx2(const float* x, void* dst, int64_t k) {
  auto* qs = static_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(qs + k);
  const int64_t nb = k / kQK8_0, nb8 = q8_sum_padded_blocks(k);
  float* s = d + nb8;
  auto* sums = reinterpret_cast<int32_t*>(s + nb8);
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b, x += kQK8_0) {
    const float db = avx2::abs_max(x, kQK8_0) / 127.0f;  // as quantize_row_q8_0
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    const __m256i q = avx2::quant32(x, _mm256_set1_ps(id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + kQK8_0 * b), q);
    const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), _mm256_set1_epi16(1));
    d[b] = f16(_cvtss_sh(db, _MM_FROUND_TO_NEAREST_INT));
    sums[b] = avx2::hsum_i32(s32);
    s[b] = d[b] * static_cast<float>(sums[b]);
  }
  for (int64_t b = nb; b < nb8; ++b) {
    d[b] = s[b] = 0.0f;
    sums[b] = 0;
  }
}

void quantize_act_q8_0_avx2(const float* x, void* dst, int64_t k) {
  quantize_q8_0(x, static_cast<BlockQ8_0*>(dst),
                reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + q8_0_scales_offset(k)),
                k / kQK8_0);
}

#endif

const MatmulKernel STRATA_AVX2_ENTRY(kQ8_0) = {q8_0_column_bytes, quantize_act_q8_0_avx2,
                                               run_rows<Q8_0Kernel>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ4_0) = {q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
                                               run_rows<Q4_0Kernel>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ4_1) = {q8_sum_column_bytes, quantize_act_q8_sum_avx2,
                                               run_rows<Q8SumKernel<Q4_1Unpack>>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ5_0) = {q8_sum_column_bytes, quantize_act_q8_sum_avx2,
                                               run_rows<Q8SumKernel<Q5_0Unpack>>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ5_1) = {q8_sum_column_bytes, quantize_act_q8_sum_avx2,
                                               run_rows<Q8SumKernel<Q5_1Unpack>>};
const MatmulKernel STRATA_AVX2_ENTRY(kIQ4_NL) = {q8_sum_column_bytes, quantize_act_q8_sum_avx2,
                                                 run_rows<Q8SumKernel<IQ4_NLUnpack>>};
const MatmulKernel STRATA_AVX2_ENTRY(kMXFP4) = {
    q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2, run_rows<MXFP4Kernel>};

}  // namespace strata::matmul_detail
