// AVX-512 VNNI kernels of Q4_K, Q5_K, Q6_K and IQ4_XS weights against Q8_K activations,
// bit-identical to the AVX2 kernels (matmul_k_avx2.cc); see matmul_avx512.h for how. They read the
// same Q8_K columns. Entered only after the run-time CPU check (matmul.cc).
//
// The AVX2 kernels form each sub-block's products with maddubs and scale them with madd, which
// adds pairs of words times the sub-block scale into int32 lanes; dpwssd does that multiply-add
// and the accumulation in one instruction, with the same integers.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/matmul_avx512.h"
#include "core/quant_blocks.h"

namespace strata::matmul_detail::avx512 {
namespace {

// The 8 scales and 8 mins of two super-blocks (row a, row b), as the scalar unpacking gives
// them (the same bit operations on four 32-bit words at once): bytes [scales 0..7, mins 0..7]
// of row a in the low 128 bits, of row b in the high.
inline __m256i scale_min_bytes(const uint8_t* a, const uint8_t* b) {
  // 16-byte loads of the 12 scale bytes: the 4 after them are the block's quants.
  const __m256i u = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  // Lanes [u0, u2, u1, u2] and [u0, u0, u1, u1] of each row.
  const __m256i p = _mm256_shuffle_epi32(u, 0x98);
  const __m256i q = _mm256_shuffle_epi32(u, 0x50);
  const __m256i low6 = _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f,  //
                                         0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
  const __m256i top2 =
      _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030);
  const __m256i shift = _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4);
  return _mm256_or_si256(_mm256_and_si256(_mm256_srlv_epi32(p, shift), low6),
                         _mm256_and_si256(_mm256_srli_epi32(q, 2), top2));
}

// d and dmin of two super-blocks (row a, row b), as floats: [d_a, dmin_a, d_b, dmin_b].
template <typename Block>
inline __m128 d_dmin_pair(const Block& a, const Block& b) {
  uint32_t da, db;  // d and dmin, as two f16
  std::memcpy(&da, &a.d, 4);
  std::memcpy(&db, &b.d, 4);
  return _mm_cvtph_ps(_mm_setr_epi32(static_cast<int>(da), static_cast<int>(db), 0, 0));
}

// From f = [d_a, dmin_a, d_b, dmin_b]: d_a in the low 8 lanes of *d and d_b in the high 8;
// *dmin alike.
inline void spread_d_dmin(__m128 f, __m512* d, __m512* dmin) {
  const __m512 v = _mm512_castps128_ps512(f);
  *d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), v);
  *dmin =
      _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), v);
}

// pshufb masks broadcasting 16-bit word s (0..7) of each 128-bit lane over the lane.
constexpr std::array<std::array<uint8_t, 64>, 8> make_word_spread() {
  std::array<std::array<uint8_t, 64>, 8> m{};
  for (int s = 0; s < 8; ++s) {
    for (int b = 0; b < 64; ++b) m[s][b] = static_cast<uint8_t>(2 * s + b % 2);
  }
  return m;
}
alignas(64) constexpr auto kWordSpread = make_word_spread();

inline __m512i word_spread(__m512i v, int s) {
  return _mm512_shuffle_epi8(v, _mm512_load_si512(kWordSpread[s].data()));
}

// ---- Q4_K / Q5_K ----
//
// Per super-block and column the AVX2 kernel sums into 8 int32 lanes, lane L holding, for every
// 64-element step j, scale(2j) * (products of bytes 4L..4L+3 of the low nibbles) + scale(2j+1) *
// (the same of the high nibbles); then acc += (dx * dw) * float(lanes) and acc += -(dx * dmin) *
// float(mins against the block sums). Here each half of a register does that for one row.
template <bool kFive, typename Block>
struct QKMinKernel {
  static constexpr int kRowPairs = 2;
  static constexpr int kCols = 4;
  // No work area (step_direct only): it cost more than it saved at every width
  // (matmul_avx512.h).

  static constexpr size_t kStepBytes = sizeof(Block);
  static int64_t steps(int64_t k) { return k / kQKK; }

  // What a super-block of two rows holds beside its quants: row a in the low halves, row b in
  // the high ones.
  struct Header {
    __m512i sc16;  // the 8 scales as words, in both 128-bit lanes of each half
    __m512i mins;  // each min twice, to pair with the two block sums of a sub-block
    __m512 d, dmin;
  };

  // One 64-element step j of a super-block of two rows: the quants of sub-blocks 2j (low
  // nibbles) and 2j + 1 (high), and their scales as words.
  struct Part {
    __m512i ql, qh, s_l, s_h;
  };

  static Header header(const Block& a, const Block& b) {
    const __m256i bytes = scale_min_bytes(a.scales, b.scales);
    const __m256i sc_twice = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,  //
                                              0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mn_pairs =
        _mm256_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15,  //
                         8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    Header h;
    h.sc16 = _mm512_cvtepu8_epi16(_mm256_shuffle_epi8(bytes, sc_twice));
    h.mins = _mm512_cvtepu8_epi16(_mm256_shuffle_epi8(bytes, mn_pairs));
    spread_d_dmin(d_dmin_pair(a, b), &h.d, &h.dmin);
    return h;
  }

  // Step j, in order j = 0..3; hbits (Q5_K's fifth bits, pair256 of the rows' qh) is shifted
  // along.
  static Part part(const Block& a, const Block& b, const Header& h, int j, __m512i* hbits) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i raw = pair256(a.qs + 32 * j, b.qs + 32 * j);
    Part p;
    p.ql = _mm512_and_si512(raw, m4);
    p.qh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if constexpr (kFive) {
      const __m512i bit = _mm512_set1_epi8(1);
      p.ql = _mm512_or_si512(p.ql, _mm512_slli_epi16(_mm512_and_si512(*hbits, bit), 4));
      p.qh = _mm512_or_si512(
          p.qh, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(*hbits, 1), bit), 4));
      *hbits = _mm512_srli_epi16(*hbits, 2);
    }
    p.s_l = word_spread(h.sc16, 2 * j);
    p.s_h = word_spread(h.sc16, 2 * j + 1);
    return p;
  }

  static __m512i fifth_bits(const Block& a, const Block& b) {
    if constexpr (kFive) return pair256(a.qh, b.qh);
    return _mm512_setzero_si512();
  }

  // One super-block for every accumulator: parts(j, Part[RP]) gives step j of each row pair.
  template <int RP, int C, typename Parts>
  static void multiply(const Header* const* hd, Parts&& parts, const void* const* xs, int64_t s,
                       __m512 (*acc)[C]) {
    const BlockQ8_K* x[C];
    __m512i sumi[RP][C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]) + s;
      for (int r = 0; r < RP; ++r) sumi[r][c] = _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      Part p[RP];
      parts(j, p);
      for (int c = 0; c < C; ++c) {
        const __m512i y_l = both256(x[c]->qs + 64 * j);
        const __m512i y_h = both256(x[c]->qs + 64 * j + 32);
        for (int r = 0; r < RP; ++r) {
          sumi[r][c] =
              _mm512_dpwssd_epi32(sumi[r][c], _mm512_maddubs_epi16(p[r].ql, y_l), p[r].s_l);
          sumi[r][c] =
              _mm512_dpwssd_epi32(sumi[r][c], _mm512_maddubs_epi16(p[r].qh, y_h), p[r].s_h);
        }
      }
    }
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int c = 0; c < C; ++c) {
      const __m512i bsums = both256(x[c]->bsums);
      const __m512 dx = _mm512_set1_ps(x[c]->d);
      for (int r = 0; r < RP; ++r) {
        const __m512i pm = _mm512_madd_epi16(bsums, hd[r]->mins);
        const __m512 ddmin = _mm512_xor_ps(_mm512_mul_ps(dx, hd[r]->dmin), sign);
        acc[r][c] =
            _mm512_fmadd_ps(_mm512_mul_ps(dx, hd[r]->d), _mm512_cvtepi32_ps(sumi[r][c]), acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(ddmin, _mm512_cvtepi32_ps(pm), acc[r][c]);
      }
    }
  }

  // One step from the weights as stored: the quants unpacked as they are used.
  template <int RP, int C>
  static void step_direct(const uint8_t* const* rows, const void* const* xs, int64_t s,
                          __m512 (*acc)[C]) {
    const Block* w[2 * RP];
    Header h[RP];
    const Header* hd[RP];
    __m512i hbits[RP];
    for (int r = 0; r < RP; ++r) {
      w[2 * r] = reinterpret_cast<const Block*>(rows[2 * r]) + s;
      w[2 * r + 1] = reinterpret_cast<const Block*>(rows[2 * r + 1]) + s;
      h[r] = header(*w[2 * r], *w[2 * r + 1]);
      hd[r] = &h[r];
      hbits[r] = fifth_bits(*w[2 * r], *w[2 * r + 1]);
    }
    multiply<RP, C>(
        hd,
        [&](int j, Part* p) {
          for (int r = 0; r < RP; ++r) p[r] = part(*w[2 * r], *w[2 * r + 1], h[r], j, &hbits[r]);
        },
        xs, s, acc);
  }
};

// ---- Q6_K ----
//
// As the AVX2 kernel: quants as q + 32 (0..63) used unsigned, each 32-element group scaled by
// its two 16-element sub-block scales, the +32 taken out per super-block through the block
// sums; acc += (dx * dw) * float(lanes).

// pshufb masks spreading scales (2i, 2i+1) over 8 bytes each, in both 128-bit lanes.
constexpr std::array<std::array<uint8_t, 32>, 8> make_scale_masks() {
  std::array<std::array<uint8_t, 32>, 8> m{};
  for (int i = 0; i < 8; ++i) {
    for (int b = 0; b < 32; ++b) m[i][b] = static_cast<uint8_t>(2 * i + b % 16 / 8);
  }
  return m;
}
alignas(32) constexpr auto kScaleMasks = make_scale_masks();

// Group i's two sub-block scales as words, row a's in the low half and row b's in the high:
// the AVX2 kernel's cvtepi8_epi16(pshufb(scales, mask i)) for each row.
inline __m512i q6_scales(__m256i sc_ab, int i) {
  return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(
      sc_ab, _mm256_load_si256(reinterpret_cast<const __m256i*>(kScaleMasks[i].data()))));
}

// The quants + 32 of group i = 4h + g of a row pair's super-block, from the h-th 64 bytes of
// ql (ql0, ql1) and 32 bytes of qh, as the AVX2 kernel forms them.
inline __m512i q6_quants(__m512i ql0, __m512i ql1, __m512i qhv, int g) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i lo_src = g % 2 == 0 ? ql0 : ql1;
  const __m512i lo =
      g < 2 ? _mm512_and_si512(lo_src, m4) : _mm512_and_si512(_mm512_srli_epi16(lo_src, 4), m4);
  const __m512i hi =
      _mm512_and_si512(_mm512_srl_epi16(qhv, _mm_cvtsi32_si128(2 * g)), _mm512_set1_epi8(0x03));
  return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

struct Q6KKernel {
  static constexpr int kRowPairs = 2;
  static constexpr int kCols = 4;
  // No work area (step_direct only): it cost more than it saved at every width
  // (matmul_avx512.h).

  static constexpr size_t kStepBytes = sizeof(BlockQ6_K);
  static int64_t steps(int64_t k) { return k / kQKK; }

  // A super-block of two rows, row a in the low halves and row b in the high ones.
  struct Header {
    __m512i sc16;  // the 16 scales as words, for the +32 offset
    __m512 d;
  };

  // One 32-element group i = 4h + g: the quants + 32 and the two sub-block scales as words.
  struct Part {
    __m512i q, s;
  };

  // The 64 bytes of ql and 32 of qh that groups 4h .. 4h + 3 read, of both rows.
  struct Half {
    __m512i ql0, ql1, qh;
  };

  static __m256i scales_of(const BlockQ6_K& a, const BlockQ6_K& b) {
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.scales))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), 1);
  }

  static Header header(const BlockQ6_K& a, const BlockQ6_K& b, __m256i sc_ab) {
    return {_mm512_cvtepi8_epi16(sc_ab), halves_ps(avx2::f16(a.d), avx2::f16(b.d))};
  }

  static Half half(const BlockQ6_K& a, const BlockQ6_K& b, int h) {
    return {pair256(a.ql + 64 * h, b.ql + 64 * h), pair256(a.ql + 64 * h + 32, b.ql + 64 * h + 32),
            pair256(a.qh + 32 * h, b.qh + 32 * h)};
  }

  static Part part(const Half& hv, __m256i sc_ab, int i) {
    return {q6_quants(hv.ql0, hv.ql1, hv.qh, i % 4), q6_scales(sc_ab, i)};
  }

  // One super-block for every accumulator: parts(i, Part[RP]) gives group i of each row pair.
  template <int RP, int C, typename Parts>
  static void multiply(const Header* hd, Parts&& parts, const void* const* xs, int64_t s,
                       __m512 (*acc)[C]) {
    const BlockQ8_K* x[C];
    __m512i sumi[RP][C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]) + s;
      for (int r = 0; r < RP; ++r) sumi[r][c] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      Part p[RP];
      parts(i, p);
      for (int c = 0; c < C; ++c) {
        const __m512i y = both256(x[c]->qs + 32 * i);
        for (int r = 0; r < RP; ++r) {
          sumi[r][c] = _mm512_dpwssd_epi32(sumi[r][c], _mm512_maddubs_epi16(p[r].q, y), p[r].s);
        }
      }
    }
    for (int r = 0; r < RP; ++r) {
      for (int c = 0; c < C; ++c) {
        const __m512i off = _mm512_madd_epi16(both256(x[c]->bsums), hd[r].sc16);
        const __m512i tot = _mm512_sub_epi32(sumi[r][c], _mm512_slli_epi32(off, 5));
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(x[c]->d), hd[r].d),
                                    _mm512_cvtepi32_ps(tot), acc[r][c]);
      }
    }
  }

  // One step from the weights as stored: the quants unpacked as they are used.
  template <int RP, int C>
  static void step_direct(const uint8_t* const* rows, const void* const* xs, int64_t s,
                          __m512 (*acc)[C]) {
    const BlockQ6_K* w[2 * RP];
    __m256i sc_ab[RP];
    Header hd[RP];
    for (int r = 0; r < RP; ++r) {
      w[2 * r] = reinterpret_cast<const BlockQ6_K*>(rows[2 * r]) + s;
      w[2 * r + 1] = reinterpret_cast<const BlockQ6_K*>(rows[2 * r + 1]) + s;
      sc_ab[r] = scales_of(*w[2 * r], *w[2 * r + 1]);
      hd[r] = header(*w[2 * r], *w[2 * r + 1], sc_ab[r]);
    }
    Half hv[RP];
    multiply<RP, C>(
        hd,
        [&](int i, Part* p) {
          for (int r = 0; r < RP; ++r) {
            if (i % 4 == 0) hv[r] = half(*w[2 * r], *w[2 * r + 1], i / 4);
            p[r] = part(hv[r], sc_ab[r], i);
          }
        },
        xs, s, acc);
  }
};

// ---- IQ4_XS ----
//
// The AVX2 kernel, as the scalar reference, sums a super-block's products exactly into one
// integer per row and column and then runs float operations on scalars: sum += (dx * dw) *
// float(total). Here the integers come from the halves of 512-bit registers (row a low, row b
// high) by the AVX2 kernel's sign trick (AVX-512 has no vpsignb: the activations are negated
// under a mask of the negative levels instead), each sub-block's products scaled by dpwssd; each
// half is then folded to its total, and the float steps run in lane 0 of each half alone, the
// other lanes staying +0.0: the driver's final sum of a half is lane 0 exactly.
struct IQ4XSKernel {
  static constexpr int kRowPairs = 2;
  static constexpr int kCols = 4;
  // No work area (step_direct only), as the other K-quants.

  static constexpr size_t kStepBytes = sizeof(BlockIQ4_XS);
  static int64_t steps(int64_t k) { return k / kQKK; }

  // A super-block of two rows: their 8 sub-block scales as words (each row's in both 128-bit
  // lanes of its half) and d.
  struct Header {
    __m512i sc16;
    __m512 d;
  };

  // Sub-block i of both rows: the 32 levels, their magnitudes and where they are negative.
  struct Part {
    __m512i abs, s;
    __mmask64 neg;
  };

  // The 8 scales ls + 32 (unsigned 6 bits) of a block as bytes: the low 4 bits from the nibbles
  // of scales_l in order (sub-block 2i in byte i's low nibble), the top 2 from scales_h.
  static uint64_t scale_bytes(const BlockIQ4_XS& b) {
    uint32_t l;
    std::memcpy(&l, b.scales_l, 4);
    return _pdep_u64(l, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(b.scales_h, 0x0303030303030303ull) << 4;
  }

  static Header header(const BlockIQ4_XS& a, const BlockIQ4_XS& b) {
    const __m128i ab = _mm_sub_epi8(
        _mm_set_epi64x(static_cast<int64_t>(scale_bytes(b)), static_cast<int64_t>(scale_bytes(a))),
        _mm_set1_epi8(32));
    // [a a b b] by 8 bytes, then words: each row's 8 scales in both 128-bit lanes of its half.
    const __m256i twice = _mm256_permute4x64_epi64(_mm256_castsi128_si256(ab), 0x50);
    return {_mm512_cvtepi8_epi16(twice), halves_ps(avx2::f16(a.d), avx2::f16(b.d))};
  }

  // Sub-blocks 2p and 2p + 1 of both rows: their 32 bytes of nibbles hold, per 16 bytes, a
  // sub-block's elements 0..15 (low nibbles) and 16..31 (high).
  static void parts(const BlockIQ4_XS& a, const BlockIQ4_XS& b, const Header& h, int p, Part* two) {
    const __m512i grid =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i raw = pair256(a.qs + 32 * p, b.qs + 32 * p);
    const __m512i lo = _mm512_shuffle_epi8(grid, _mm512_and_si512(raw, m4));
    const __m512i hi = _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
    // Sub-block 2p + t of each row: 128-bit lane t of lo, then the same lane of hi.
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int t = 0; t < 2; ++t) {
      const __m512i q = _mm512_permutex2var_epi64(lo, t == 0 ? first : second, hi);
      two[t] = {_mm512_abs_epi8(q), word_spread(h.sc16, 2 * p + t), _mm512_movepi8_mask(q)};
    }
  }

  template <int RP, int C>
  static void step_direct(const uint8_t* const* rows, const void* const* xs, int64_t s,
                          __m512 (*acc)[C]) {
    const BlockIQ4_XS* w[2 * RP];
    Header hd[RP];
    for (int r = 0; r < RP; ++r) {
      w[2 * r] = reinterpret_cast<const BlockIQ4_XS*>(rows[2 * r]) + s;
      w[2 * r + 1] = reinterpret_cast<const BlockIQ4_XS*>(rows[2 * r + 1]) + s;
      hd[r] = header(*w[2 * r], *w[2 * r + 1]);
    }
    const BlockQ8_K* x[C];
    __m512i sumi[RP][C];
    for (int c = 0; c < C; ++c) {
      x[c] = static_cast<const BlockQ8_K*>(xs[c]) + s;
      for (int r = 0; r < RP; ++r) sumi[r][c] = _mm512_setzero_si512();
    }
    const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      Part pt[RP][2];
      for (int r = 0; r < RP; ++r) parts(*w[2 * r], *w[2 * r + 1], hd[r], p, pt[r]);
      for (int t = 0; t < 2; ++t) {
        for (int c = 0; c < C; ++c) {
          const __m512i y = both256(x[c]->qs + 64 * p + 32 * t);
          for (int r = 0; r < RP; ++r) {
            // y * sign(level); where the level is 0 its magnitude makes the product 0 anyway.
            const __m512i ys = _mm512_mask_sub_epi8(y, pt[r][t].neg, zero, y);
            sumi[r][c] =
                _mm512_dpwssd_epi32(sumi[r][c], _mm512_maddubs_epi16(pt[r][t].abs, ys), pt[r][t].s);
          }
        }
      }
    }
    for (int r = 0; r < RP; ++r) {
      for (int c = 0; c < C; ++c) {
        // Each half's 8 lanes to their sum, in every lane of the half.
        __m512i v = sumi[r][c];
        v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
        v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
        v = _mm512_add_epi32(v, _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
        const __m512 t =
            _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(x[c]->d), hd[r].d), _mm512_cvtepi32_ps(v));
        acc[r][c] = _mm512_mask_add_ps(acc[r][c], 0x0101, acc[r][c], t);
      }
    }
  }
};

// The `rows` entry of a one-column kernel: each row's dot with each column, one at a time.
template <typename Block, float (*kRow)(const Block* w, const BlockQ8_K* x, int64_t nb)>
void one_column_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.k / kQKK;
  for (int64_t j = 0; j < a.m; ++j) {
    const auto* x = static_cast<const BlockQ8_K*>(a.column(j));
    for (int64_t r = r0; r < r1; ++r) {
      a.y[j * a.y_stride + r] =
          kRow(reinterpret_cast<const Block*>(a.w + r * a.w_row_bytes), x, nb);
    }
  }
}

// ---- One column of Q4_K (batch-1 decode), two rows at a time ----
//
// The AVX2 kernel, at 22 GB/s of weights per core in cache, is slower than one core's share of
// the memory's bandwidth, and the two-row tiles above do more work per step than one column
// needs. This kernel uses 512-bit VNNI on 64 bytes of quants (two of the AVX2 kernel's 32-byte
// steps j, j + 1) at once: dpbusd forms the four-element sums that maddubs + madd form, and
// dpwssd multiplies each by its sub-block's scale (the sums fit 16 bits, the scale's high word
// is 0) into the accumulator. Its activation column is Q8_K with each block's 32-element chunks
// in the order [0 2 1 3 4 6 5 7]: the two chunks one register multiplies are one load. The 16
// integer lanes, folded to 8, are the AVX2 kernel's lanes (exact sums); the float part is its,
// operation for operation.
//
// Every instruction counts at batch 1. From cache (one thread, k = 2048): 36 GB/s of weights
// as first written; 43 with the scales spread by one pshufb each from the unpacked bytes
// (instead of a widening and a permute per step), two super-blocks' scales unpacked in one
// register, and d and dmin converted and multiplied as a pair; 53 with two rows at once, their
// float parts in the two halves of one register (two chains of dependent FMAs instead of one).
// From memory the pair wins only with its bytes prefetched as one stream (pair_rows).

size_t q8_k_paired_column_bytes(int64_t k) { return q8_k_column_bytes(k); }

void quantize_act_q8_k_paired(const float* x, void* dst, int64_t k) {
  quantize_act_q8_k_avx2(x, dst, k);
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < k / kQKK; ++b) {
    for (int half = 0; half < 2; ++half) {
      int8_t* q = blocks[b].qs + 128 * half;
      std::swap_ranges(q + 32, q + 64, q + 64);  // chunks 1 and 2 of the half
    }
  }
}

// pshufb mask giving every 32-bit lane of the low half byte a, of the high half byte b (of
// each 128-bit lane), over three zero bytes.
constexpr std::array<uint8_t, 64> make_scale_pick(int a, int b) {
  std::array<uint8_t, 64> m{};
  for (int i = 0; i < 64; ++i) m[i] = i % 4 != 0 ? 0x80 : static_cast<uint8_t>(i < 32 ? a : b);
  return m;
}
// Step s's scales (s = 0..3: low nibbles of the first 64 bytes, high, then the second 64):
// low nibbles of 64 bytes are sub-blocks 2j and 2j + 2, high nibbles 2j + 1 and 2j + 3.
alignas(64) constexpr std::array<std::array<uint8_t, 64>, 4> kScalePick = {
    make_scale_pick(0, 2), make_scale_pick(1, 3), make_scale_pick(4, 6), make_scale_pick(5, 7)};
// Each min as a word, twice (to pair with the two block sums of its sub-block).
alignas(32) constexpr std::array<uint8_t, 32> kMinPairs = {
    8,  0x80, 8,  0x80, 9,  0x80, 9,  0x80, 10, 0x80, 10, 0x80, 11, 0x80, 11, 0x80,
    12, 0x80, 12, 0x80, 13, 0x80, 13, 0x80, 14, 0x80, 14, 0x80, 15, 0x80, 15, 0x80};

// The 16 integer lanes of one row's super-block (folded to 8 they are the AVX2 kernel's); sm
// holds the block's [scales 0..7, mins 0..7] bytes in each 128-bit lane.
inline __m512i q4_k_lanes(const BlockQ4_K& w, const BlockQ8_K& x, __m512i sm) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512i sumi = _mm512_setzero_si512();
  for (int jj = 0; jj < 2; ++jj) {
    const __m512i raw = _mm512_loadu_si512(w.qs + 64 * jj);
    const __m512i ql = _mm512_and_si512(raw, m4);
    const __m512i qh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    const __m512i d_l =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), ql, _mm512_loadu_si512(x.qs + 128 * jj));
    const __m512i d_h =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), qh, _mm512_loadu_si512(x.qs + 128 * jj + 64));
    const __m512i pick_l = _mm512_load_si512(kScalePick[2 * jj].data());
    const __m512i pick_h = _mm512_load_si512(kScalePick[2 * jj + 1].data());
    sumi = _mm512_dpwssd_epi32(sumi, d_l, _mm512_shuffle_epi8(sm, pick_l));
    sumi = _mm512_dpwssd_epi32(sumi, d_h, _mm512_shuffle_epi8(sm, pick_h));
  }
  return sumi;
}

// One super-block of rows a and b: the low half of acc is row a's AVX2 accumulator, the high
// half row b's, each with the same operations as the AVX2 kernel.
inline void q4_k_block_pair(const BlockQ4_K& a, const BlockQ4_K& b, const BlockQ8_K& x,
                            __m512i sm_a, __m512i sm_b, __m512* acc) {
  const __m512i la = q4_k_lanes(a, x, sm_a), lb = q4_k_lanes(b, x, sm_b);
  // [a0..7 + a8..15, b0..7 + b8..15]
  const __m512i lanes =
      _mm512_add_epi32(_mm512_shuffle_i64x2(la, lb, 0x44), _mm512_shuffle_i64x2(la, lb, 0xee));
  const __m512i mins = _mm512_shuffle_epi8(_mm512_shuffle_i64x2(sm_a, sm_b, 0x44),
                                           _mm512_broadcast_i64x4(load256(kMinPairs.data())));
  const __m512i pm = _mm512_madd_epi16(_mm512_broadcast_i64x4(load256(x.bsums)), mins);
  __m512 d, dmin;  // x.d * d and x.d * dmin of each row
  spread_d_dmin(_mm_mul_ps(d_dmin_pair(a, b), _mm_set1_ps(x.d)), &d, &dmin);
  *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes), *acc);
  // -(x.d * dmin) * pm + acc: the AVX2 kernel's fmadd by the negated product (exact negation).
  *acc = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(pm), *acc);
}

// Each 128-bit lane: the [scales, mins] bytes of the low (hi = false) or high 128 bits of sm.
inline __m512i lane_bytes(__m256i sm, bool hi) {
  return _mm512_broadcast_i32x4(hi ? _mm256_extracti128_si256(sm, 1) : _mm256_castsi256_si128(sm));
}

// The kernel of pair_rows (matmul_avx512.h): a step is two super-blocks of both rows, whose
// scales scale_min_bytes unpacks in one register per row; a row of an odd count of super-blocks
// ends with one (tail). The low half of the accumulator is row a's, the high half row b's.
struct Q4KNarrowKernel {
  static constexpr size_t kStepBytes = 2 * sizeof(BlockQ4_K);
  static int64_t steps(int64_t k) { return k / kQKK / 2; }

  template <int RP, int C>
  static void step_direct(const uint8_t* const* rows, const void* const* xs, int64_t s,
                          __m512 (*acc)[C]) {
    static_assert(RP == 1 && C == 1, "one pair of rows, one column");
    const auto* a = reinterpret_cast<const BlockQ4_K*>(rows[0]) + 2 * s;
    const auto* b = reinterpret_cast<const BlockQ4_K*>(rows[1]) + 2 * s;
    const auto* x = static_cast<const BlockQ8_K*>(xs[0]) + 2 * s;
    const __m256i sa = scale_min_bytes(a[0].scales, a[1].scales);
    const __m256i sb = scale_min_bytes(b[0].scales, b[1].scales);
    q4_k_block_pair(a[0], b[0], x[0], lane_bytes(sa, false), lane_bytes(sb, false), &acc[0][0]);
    q4_k_block_pair(a[1], b[1], x[1], lane_bytes(sa, true), lane_bytes(sb, true), &acc[0][0]);
  }

  static void tail(const uint8_t* const* rows, const void* column, int64_t k, __m512 (*acc)[1]) {
    const int64_t nb = k / kQKK;
    if (nb % 2 == 0) return;
    const auto& a = reinterpret_cast<const BlockQ4_K*>(rows[0])[nb - 1];
    const auto& b = reinterpret_cast<const BlockQ4_K*>(rows[1])[nb - 1];
    const __m256i s = scale_min_bytes(a.scales, b.scales);
    q4_k_block_pair(a, b, static_cast<const BlockQ8_K*>(column)[nb - 1], lane_bytes(s, false),
                    lane_bytes(s, true), &acc[0][0]);
  }
};

const MatmulKernel kQ4_KOneColumn = {q8_k_paired_column_bytes, quantize_act_q8_k_paired,
                                     pair_rows<Q4KNarrowKernel>};

// ---- One column of Q6_K, one row at a time ----
//
// As for Q4_K: two of the AVX2 kernel's 32-byte steps g, g + 1 at once (their low quant bits
// are 64 consecutive bytes of ql, their activations 64 consecutive bytes of the column, so the
// column is plain Q8_K), dpbusd for the four-element sums of (q + 32) * y (at most 4 * 63 * 128,
// which fits 16 bits) and dpwssd for the signed 16-element scales (as words over a zero high
// word). The 16 lanes fold to the AVX2 kernel's 8; the offset of 32 and the float part are its.
float q6_k_row(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i m3 = _mm512_set1_epi8(0x03);
  // The high bits of steps g, g + 1 are bits 2g, 2g + 2 of the same 32 bytes of qh.
  const __m512i shifts[2] = {_mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1),
                             _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1)};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& wb = w[b];
    const BlockQ8_K& xb = x[b];
    avx2::prefetch_ahead<sizeof(BlockQ6_K)>(&wb);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m512i sc32 = _mm512_cvtepu16_epi32(sc16);  // scale i as a word, high word 0
    __m512i sumi = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(wb.ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(load256(wb.qh + 32 * h));
      for (int gg = 0; gg < 2; ++gg) {  // steps g = 2 gg, 2 gg + 1
        const __m512i lo =
            gg == 0 ? _mm512_and_si512(ql, m4) : _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts[gg]), m3);
        const __m512i q = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q,
                                              _mm512_loadu_si512(xb.qs + 128 * h + 64 * gg));
        // Lane L of step g takes scale 8h + 2g + L / 4.
        const int first = 8 * h + 4 * gg;
        const __m512i pick =
            _mm512_add_epi32(_mm512_set1_epi32(first),
                             _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
        sumi = _mm512_dpwssd_epi32(sumi, d, _mm512_permutexvar_epi32(pick, sc32));
      }
    }
    const __m256i lanes =
        _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
    const __m256i off = _mm256_madd_epi16(load256(xb.bsums), sc16);
    const __m256i tot = _mm256_sub_epi32(lanes, _mm256_slli_epi32(off, 5));
    const float dw = avx2::f16(wb.d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * dw), _mm256_cvtepi32_ps(tot), acc);
  }
  return avx2::hsum(acc);
}

const MatmulKernel kQ6_KOneColumn = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                     one_column_rows<BlockQ6_K, q6_k_row>};

}  // namespace
}  // namespace strata::matmul_detail::avx512

namespace strata::matmul_detail {

const MatmulKernel kQ4_KAvx512 = {q8_k_column_bytes,
                                  quantize_act_q8_k_avx2,
                                  avx512::run_rows<avx512::QKMinKernel<false, BlockQ4_K>>,
                                  nullptr,
                                  avx512::kMinColumns,
                                  &avx512::kQ4_KOneColumn};
namespace {
// Q5_K at one column: the tiles two rows at a time (BM_DecodeOrder/q5_K: 0.43-0.45 of the
// plain read with the AVX2 one-row kernel, 0.70-0.76 so). Q6_K keeps its one-row kernel above,
// which beat that (0.88-0.91 against 0.86).
const MatmulKernel kQ5_KNarrow = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                  avx512::pair_rows<avx512::QKMinKernel<true, BlockQ5_K>>};
}  // namespace
const MatmulKernel kQ5_KAvx512 = {q8_k_column_bytes,
                                  quantize_act_q8_k_avx2,
                                  avx512::run_rows<avx512::QKMinKernel<true, BlockQ5_K>>,
                                  nullptr,
                                  avx512::kMinColumns,
                                  &kQ5_KNarrow};
const MatmulKernel kIQ4_XSAvx512 = {
    q8_k_column_bytes, quantize_act_q8_k_avx2, avx512::run_rows<avx512::IQ4XSKernel>,
    nullptr,           avx512::kMinColumns,    nullptr};
const MatmulKernel kQ6_KAvx512 = {
    q8_k_column_bytes, quantize_act_q8_k_avx2, avx512::run_rows<avx512::Q6KKernel>,
    nullptr,           avx512::kMinColumns,    &avx512::kQ6_KOneColumn};

}  // namespace strata::matmul_detail
