// The AVX-512 VNNI kernels of Q4_K and Q6_K in rows in lanes (core/rows16.h): lane r of every
// register is row r of a group of 16, so the products need no shuffle of lanes or scales.
// Bit-identical to the AVX2 Q4_K kernel (matmul_k_avx2.cc), and so to kQ4_KAvx512: lane L of a
// row's AVX2 accumulator sums, over the super-block's 64-element steps j, scale(2j) * (products of
// bytes 4L..4L+3 of the low nibbles) + scale(2j + 1) * (the same of the high nibbles); then acc[L]
// += (dx * d) * float(lanes[L]) and acc[L] += -(dx * dmin) * float(min(L) * (block sums 2L and 2L +
// 1)), and the row's value is the AVX2 horizontal sum of the 8. Here acc[L] is a register whose
// lane r is row r's, and the integer sums (exact however grouped) are formed by dpbusd (four
// products) or maddubs (two), and dpwssd (times the scales).
//
// On this machine's Zen 4 (strata_bench_kernels, one thread, k = 2048, 128 rows in L2):
// dpbusd, dpwssd, maddubs and madd each issue once a cycle, and so do FMAs, ternary logic and
// pshufb on the same units, while shifts, ANDs, ORs, adds and broadcasts from memory go beside
// them. So the kernels count their multiplies and keep the rest to shifts and ANDs: Q4_K forms
// both nibbles' sums of a step with two dpbusd and scales them with one dpwssd (3.7 -> 3.6 us a
// column, 27.0 -> 23.3 us for 8), and Q6_K's layout takes three of four quants with one AND
// each (5.9-6.2 -> 4.1 us a column).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/check.h"
#include "core/isa.h"
#include "core/matmul_avx512.h"
#include "core/rows16.h"

namespace strata::matmul_detail::avx512 {
namespace {

// Columns a group's weights are unpacked for. The cost per column hardly depends on it
// (BM_Matmul/q4_K_r16/M/1, one thread: 27.2-27.6 us at M = 8 and 872-878 at M = 256 with tiles
// of 2 to 8), and at every M it beats the Q4_K tiles: so every batch size runs this kernel.
constexpr int kTile = 4;

// pshufb masks giving each 32-bit lane byte i (0..3) of that lane in both 16-bit words.
constexpr std::array<std::array<uint8_t, 64>, 4> make_byte_words() {
  std::array<std::array<uint8_t, 64>, 4> m{};
  for (int i = 0; i < 4; ++i) {
    for (int b = 0; b < 64; ++b) {
      m[i][b] = b % 2 == 0 ? static_cast<uint8_t>(b % 16 / 4 * 4 + i) : uint8_t{0x80};
    }
  }
  return m;
}
alignas(64) constexpr auto kByteWords = make_byte_words();

inline __m512i byte_words(__m512i v, int i) {
  return _mm512_shuffle_epi8(v, _mm512_load_si512(kByteWords[i].data()));
}

// pshufb masks giving each 32-bit lane bytes 2h and 2h + 1 of that lane, zero-extended, in its
// low and high 16-bit word.
constexpr std::array<std::array<uint8_t, 64>, 2> make_pair_words() {
  std::array<std::array<uint8_t, 64>, 2> m{};
  for (int h = 0; h < 2; ++h) {
    for (int b = 0; b < 64; ++b) {
      m[h][b] =
          b % 2 == 0 ? static_cast<uint8_t>(b % 16 / 4 * 4 + 2 * h + b % 4 / 2) : uint8_t{0x80};
    }
  }
  return m;
}
alignas(64) constexpr auto kPairWords = make_pair_words();

inline __m512i pair_words(__m512i v, int h) {
  return _mm512_shuffle_epi8(v, _mm512_load_si512(kPairWords[h].data()));
}

// (a & mask) | (b & ~mask), per bit.
inline __m512i select(__m512i mask, __m512i a, __m512i b) {
  return _mm512_ternarylogic_epi32(mask, a, b, 0xca);
}

// The 6-bit scales and mins of every row (kscale_min's bit operations, 16 rows at once), from
// the three words of the rows' scale bytes: byte i of lane r of scale03 is row r's scale i, of
// scale47 its scale 4 + i; min03 and min47 likewise.
struct ScalesMins {
  __m512i scale03, scale47, min03, min47;
};
inline ScalesMins scales_mins(const __m512i* sc) {
  const __m512i m6 = _mm512_set1_epi8(0x3f), m4 = _mm512_set1_epi8(0x0f);
  // Scales and mins 4..7: the low 4 bits from the nibbles of bytes 8..11, the top 2 from bits
  // 6..7 of bytes 0..3 (scales) or 4..7 (mins), moved to bits 4..5 by a 32-bit shift (what it
  // brings in from the next byte lands in bits 6..7, masked off).
  return {
      _mm512_and_si512(sc[0], m6),
      _mm512_and_si512(select(m4, sc[2], _mm512_srli_epi32(sc[0], 2)), m6),
      _mm512_and_si512(sc[1], m6),
      _mm512_and_si512(select(m4, _mm512_srli_epi32(sc[2], 4), _mm512_srli_epi32(sc[1], 2)), m6)};
}

// Each row's 8 float lanes summed in avx2::hsum's order, ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 +
// 7)), into y[0..15].
inline void store_rows(const __m512* acc, float* y) {
  const __m512 even = _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6]));
  const __m512 odd = _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7]));
  _mm512_storeu_ps(y, _mm512_add_ps(even, odd));
}

inline __m512i broadcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// v's bits moved left by n (right by -n) within each 16-bit word.
inline __m512i shift16(__m512i v, int n) {
  return n >= 0 ? _mm512_slli_epi16(v, static_cast<unsigned>(n))
                : _mm512_srli_epi16(v, static_cast<unsigned>(-n));
}

// The K-quant kernels' prefetch, `ahead` bytes on (core/isa.h; 0: none). A group is one
// sequential stream, and so is a thread's run of groups. On the Zen 4 where these kernels were
// written, the hardware prefetchers alone did best: prefetching 8 KiB ahead, as the file layouts'
// kernels do, made a decode order of Q4_K matrices 0.85-0.91x the file layout's speed instead of
// 1.08-1.24x (BM_LayoutDecodeOrder, two threads), and 2.3 KiB ahead 1.03-1.06x. On a Zen 5 they
// read at 0.60-0.74 of a plain read without it, and at 0.92-0.97 at 4.5 KiB ahead
// (docs/engine.md).
// The prefetches are spread: prefetch_head the lines before a super-block's first quants (its
// scales and factors) as it starts, then prefetch_chunk each 64-byte chunk of quants just before
// the chunk itself is read. A burst of all 36-53 lines at the start holds the miss buffers while
// the arithmetic behind it fills the reorder buffer; one a step, they keep the memory busy
// through the arithmetic (on a Zen 5, batch-1 steps 7-12% faster: docs/engine.md). Q3_K keeps
// the burst (prefetch_head of its whole super-block; its kernel says why).
// The kernels test `ahead` at each call, not in these functions: with the test inside, g++ 12
// deleted the prefetches altogether; and each prefetch_chunk's own `if (ahead != 0)` is what
// keeps g++ 12 from gathering an unrolled super-block's prefetches at its top, a burst again
// (unconditional, the steps took 1.05-1.09x as long).
template <typename Group, size_t kHead>
inline void prefetch_head(const Group& g, size_t ahead) {
  const char* p = reinterpret_cast<const char*>(&g) + ahead;
#pragma GCC unroll 64
  for (size_t o = 0; o < kHead; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}
inline void prefetch_chunk(const void* chunk, size_t ahead) {
  _mm_prefetch(static_cast<const char*>(chunk) + ahead, _MM_HINT_T0);
}

// The 16 rows of one group against C Q8_K columns: y[c][0..15]. One overload per layout (its
// Group type), which the driver below picks; this one for Q4_K and Q5_K, whose AVX2 kernel is
// one (QKMinKernel). Q5_K's fifth bits join the nibbles: a low quant is then up to 31 and its
// sums up to 4 * 31 * 128, so the low word's bias is 16384, and the high quants are used times
// 4 (up to 124), started at 1, shifted by 14: the high word is again the high sum.
template <int C, typename Group>
requires std::is_same_v<Group, Q4KRows16> || std::is_same_v<Group, Q5KRows16>
void group_rows(const Group* w, int64_t nb, const BlockQ8_K* const* x, float* const* y,
                size_t ahead) {
  constexpr bool kFive = std::is_same_v<Group, Q5KRows16>;
  constexpr int kBiasBits = kFive ? 14 : 13;
  const __m512i m4 = _mm512_set1_epi8(0x0f), mf0 = _mm512_set1_epi8(static_cast<char>(0xf0));
  const __m512i m3c = _mm512_set1_epi8(0x3c), bit4 = _mm512_set1_epi8(0x10),
                bit6 = _mm512_set1_epi8(0x40);
  const __m512i two = _mm512_set1_epi32(kFive ? 1 : 2);
  __m512 acc[C][8];
  for (int c = 0; c < C; ++c) {
    for (__m512& a : acc[c]) a = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Group& wb = w[b];
    if (ahead != 0) {
      prefetch_head<Group, kFive ? offsetof(Q5KRows16, qh) : offsetof(Q4KRows16, qs)>(wb, ahead);
    }
    __m512i sc[3];
    for (int i = 0; i < 3; ++i) sc[i] = _mm512_loadu_si512(wb.scales[i]);
    const ScalesMins sm = scales_mins(sc);
    // Step j's pair of scales: sub-block 2j's in the low word of each lane, 2j + 1's in the high.
    const __m512i pair[4] = {pair_words(sm.scale03, 0), pair_words(sm.scale03, 1),
                             pair_words(sm.scale47, 0), pair_words(sm.scale47, 1)};
    // Every low sum comes biased by 8192 (Q5_K: 16384; below): the lanes start without it. The
    // scales of the even sub-blocks, summed by one multiply-add of each scale register against
    // bytes 1, 0.
    const __m512i even = _mm512_set1_epi32(0x00010001);
    const __m512i low_scales = _mm512_dpbusd_epi32(
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), sm.scale03, even), sm.scale47, even);
    const __m512i unbias =
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(low_scales, kBiasBits));
    const __m512 d16 = _mm512_cvtph_ps(load256(wb.d));
    const __m512 dmin16 = _mm512_cvtph_ps(load256(wb.dmin));
    __m512 d[C], dmin[C];
    for (int c = 0; c < C; ++c) {
      const __m512 dx = _mm512_set1_ps(x[c][b].d);
      d[c] = _mm512_mul_ps(dx, d16);
      dmin[c] = _mm512_mul_ps(dx, dmin16);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i lanes[C];
      for (int c = 0; c < C; ++c) lanes[c] = unbias;
      __m512i fifth = _mm512_setzero_si512();  // Q5_K: byte t of lane r is row r's qh[4g + t]
      if constexpr (kFive) {
        if (ahead != 0) prefetch_chunk(wb.qh[g], ahead);
        fifth = _mm512_loadu_si512(wb.qh[g]);
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        if (ahead != 0) prefetch_chunk(wb.qs[g][j], ahead);
        const __m512i q = _mm512_loadu_si512(wb.qs[g][j]);
        __m512i ql = _mm512_and_si512(q, m4);
        __m512i qh16 = _mm512_and_si512(q, mf0);
        if constexpr (kFive) {
          // Bit 2j of a byte is its low quant's fifth bit (to bit 4), bit 2j + 1 its high
          // quant's (to bit 6, the high quant being used times 4); the bits a 16-bit shift brings
          // in from the other byte are masked off.
          ql = select(m4, q, _mm512_and_si512(shift16(fifth, 4 - 2 * j), bit4));
          qh16 = select(m3c, _mm512_srli_epi16(q, 2),
                        _mm512_and_si512(shift16(fifth, 5 - 2 * j), bit6));
        }
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = x[c][b].qs + 64 * j + 4 * g;
          // 2 + 16 * (the high nibbles' four products), shifted to the high word, plus the low
          // nibbles' four: each sum is at most 4 * 15 * 128 in size, so the low word is 8192 +
          // the low sum (in 512..15872) and the high word the high sum, for dpwssd to scale.
          const __m512i hi = _mm512_dpbusd_epi32(two, qh16, broadcast32(xq + 32));
          const __m512i sums =
              _mm512_dpbusd_epi32(_mm512_slli_epi32(hi, kFive ? 14 : 12), ql, broadcast32(xq));
          lanes[c] = _mm512_dpwssd_epi32(lanes[c], sums, pair[j]);
        }
      }
      const __m512i mins = byte_words(g < 4 ? sm.min03 : sm.min47, g % 4);
      for (int c = 0; c < C; ++c) {
        const __m512i pm = _mm512_madd_epi16(mins, broadcast32(x[c][b].bsums + 2 * g));
        acc[c][g] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(lanes[c]), acc[c][g]);
        // -(dx * dmin) * pm + acc: the AVX2 kernel's fmadd by the negated product.
        acc[c][g] = _mm512_fnmadd_ps(dmin[c], _mm512_cvtepi32_ps(pm), acc[c][g]);
      }
    }
  }
  for (int c = 0; c < C; ++c) store_rows(acc[c], y[c]);
}

// The Q6_K kernel: the AVX2 kernel's lane L of a row sums, over the 32-element groups i = 4h + g,
// scale(2i + L / 4) * (products of the group's elements 4L..4L+3, quants as q + 32), then takes
// out 32 * (the scales against the block sums, lane L: sums 2L and 2L + 1); acc[L] += (dx * d) *
// float(lanes[L]). Here, as for Q4_K, acc[L] is a register whose lane r is row r's.
template <int C>
void group_rows(const Q6KRows16* w, int64_t nb, const BlockQ8_K* const* x, float* const* y,
                size_t ahead) {
  const __m512i m6 = _mm512_set1_epi8(0x3f), m2 = _mm512_set1_epi8(0x03),
                m4 = _mm512_set1_epi8(0x0f);
  // pshufb mask giving each 32-bit lane its low word twice.
  const __m512i low_twice =
      _mm512_broadcast_i32x4(_mm_setr_epi32(0x01000100, 0x05040504, 0x09080908, 0x0d0c0d0c));
  __m512 acc[C][8];
  for (int c = 0; c < C; ++c) {
    for (__m512& a : acc[c]) a = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KRows16& wb = w[b];
    if (ahead != 0) prefetch_head<Q6KRows16, offsetof(Q6KRows16, q)>(wb, ahead);
    const __m512 d16 = _mm512_cvtph_ps(load256(wb.d));
    __m512 d[C];
    for (int c = 0; c < C; ++c) d[c] = _mm512_mul_ps(_mm512_set1_ps(x[c][b].d), d16);
    // Sub-block s's scale of every row, sign-extended, in both words of its lane.
    __m512i scale[16];
    for (int s = 0; s < 16; ++s) {
      const __m512i v =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales[s])));
      scale[s] = _mm512_shuffle_epi8(v, low_twice);
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const int half = l / 4;
      __m512i lanes[C];
      for (int c = 0; c < C; ++c) lanes[c] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        if (ahead != 0) {
          for (int i = 0; i < 3; ++i) prefetch_chunk(wb.q[l][h][i], ahead);
        }
        const __m512i r0 = _mm512_loadu_si512(wb.q[l][h][0]);
        const __m512i r1 = _mm512_loadu_si512(wb.q[l][h][1]);
        const __m512i r2 = _mm512_loadu_si512(wb.q[l][h][2]);
        // The fourth group's quant from bits 6..7 of the three bytes (16-bit shifts: the bits
        // they bring in from the next byte are masked off).
        const __m512i q3 = _mm512_and_si512(
            select(m4, select(m2, _mm512_srli_epi16(r0, 6), _mm512_srli_epi16(r1, 4)),
                   _mm512_srli_epi16(r2, 2)),
            m6);
        const __m512i q[4] = {_mm512_and_si512(r0, m6), _mm512_and_si512(r1, m6),
                              _mm512_and_si512(r2, m6), q3};
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          for (int c = 0; c < C; ++c) {
            const __m512i xw = broadcast32(x[c][b].qs + 128 * h + 32 * g + 4 * l);
            lanes[c] = _mm512_dpwssd_epi32(lanes[c], _mm512_maddubs_epi16(q[g], xw),
                                           scale[2 * (4 * h + g) + half]);
          }
        }
      }
      // Lane r: the words [scale(2l), scale(2l + 1)] of row r, against block sums 2l, 2l + 1.
      const __m512i pair = _mm512_mask_blend_epi16(0xaaaaaaaa, scale[2 * l], scale[2 * l + 1]);
      for (int c = 0; c < C; ++c) {
        const __m512i off = _mm512_madd_epi16(pair, broadcast32(x[c][b].bsums + 2 * l));
        const __m512i tot = _mm512_sub_epi32(lanes[c], _mm512_slli_epi32(off, 5));
        acc[c][l] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(tot), acc[c][l]);
      }
    }
  }
  for (int c = 0; c < C; ++c) store_rows(acc[c], y[c]);
}

// The IQ4_XS kernel: the AVX2 kernel, as the scalar reference, sums a super-block's products
// exactly into one integer per row and column, then sum += (dx * d) * float(total). Here lane r
// of every register is row r: a sub-block's products are formed on the levels + 128 (unsigned,
// as dpbusd takes them) from a start of -128 * (the sub-block's activation sum, from the block
// sums), so that they come to the products of the levels; each is multiplied by its row's
// scale, and the float steps are the reference's, lane by lane, the lanes being the rows'
// results. Both nibbles of a sub-block's byte share its scale, so a scale multiplies 32
// products at once.
template <int C>
void group_rows(const IQ4XSRows16* w, int64_t nb, const BlockQ8_K* const* x, float* const* y,
                size_t ahead) {
  static constexpr std::array<uint8_t, 16> kBiasedLevels = [] {
    std::array<uint8_t, 16> v{};
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(kIQ4NLValues[i] + 128);
    return v;
  }();
  const __m512i grid = _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedLevels.data())));
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i low4 = _mm512_set1_epi32(0x0f), low2 = _mm512_set1_epi32(0x03);
  const __m512i offset = _mm512_set1_epi32(32);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const IQ4XSRows16& wb = w[b];
    if (ahead != 0) prefetch_head<IQ4XSRows16, offsetof(IQ4XSRows16, qs)>(wb, ahead);
    const __m512 d16 = _mm512_cvtph_ps(load256(wb.d));
    const __m512i sl = _mm512_loadu_si512(wb.scales_l);
    const __m512i sh = _mm512_cvtepu16_epi32(load256(wb.scales_h));
    __m512 dd[C];
    alignas(32) int32_t start[C][8];  // -128 * the activations' sum over sub-block s
    __m512i total[C];
    for (int c = 0; c < C; ++c) {
      dd[c] = _mm512_mul_ps(_mm512_set1_ps(x[c][b].d), d16);
      _mm256_store_si256(reinterpret_cast<__m256i*>(start[c]),
                         _mm256_madd_epi16(load256(x[c][b].bsums), _mm256_set1_epi16(-128)));
      total[c] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      // Row r's scale ls - 32 of sub-block s: nibble s of its scales_l word, bits 2s, 2s + 1 of
      // its scales_h.
      const __m512i ls = _mm512_sub_epi32(
          _mm512_or_si512(
              _mm512_and_si512(_mm512_srli_epi32(sl, 4 * s), low4),
              _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * s), low2), 4)),
          offset);
      __m512i sums[C];
      for (int c = 0; c < C; ++c) sums[c] = _mm512_set1_epi32(start[c][s]);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        if (ahead != 0) prefetch_chunk(wb.qs[s][g], ahead);
        const __m512i q = _mm512_loadu_si512(wb.qs[s][g]);
        const __m512i lo = _mm512_shuffle_epi8(grid, _mm512_and_si512(q, m4));
        const __m512i hi = _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = x[c][b].qs + 32 * s + 4 * g;
          sums[c] = _mm512_dpbusd_epi32(sums[c], lo, broadcast32(xq));
          sums[c] = _mm512_dpbusd_epi32(sums[c], hi, broadcast32(xq + 16));
        }
      }
      for (int c = 0; c < C; ++c)
        total[c] = _mm512_add_epi32(total[c], _mm512_mullo_epi32(sums[c], ls));
    }
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(dd[c], _mm512_cvtepi32_ps(total[c])));
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y[c], acc[c]);
}

// The Q3_K kernel: the AVX2 kernel, as the scalar reference, sums a super-block's products into
// one exact integer per row and column (the quants as u = q + 4 in 0..7, less 4 times the
// scales against the block sums), then sum += (dx * d) * float(total). Here lane r is row r,
// and each pair of 16-element sub-blocks (2p, 2p + 1) is one dpwssd by their two scales: the
// odd one's products (of 4u, started at 1 - 16 * its block sum) shifted by 14 into the high
// word, the even one's (started at -4 * its block sum) added below with a bias of 16384, which
// the lanes start without. So each word is a sub-block's sum of (u - 4) * y, at most 16 * 4 *
// 127 in size: the low word stays in 8256..24512 and the high word is exact.
// pshufb masks taking bytes 2h and 2h + 1 of each 32-bit lane into the high bytes of its two
// words (the low bytes zero), for an arithmetic shift to sign-extend them.
constexpr std::array<std::array<uint8_t, 64>, 2> make_high_pair_words() {
  std::array<std::array<uint8_t, 64>, 2> m{};
  for (int h = 0; h < 2; ++h) {
    for (int b = 0; b < 64; ++b) {
      m[h][b] =
          b % 2 == 0 ? uint8_t{0x80} : static_cast<uint8_t>(b % 16 / 4 * 4 + 2 * h + b % 4 / 2);
    }
  }
  return m;
}
alignas(64) constexpr auto kHighPairWords = make_high_pair_words();

template <int C>
void group_rows(const Q3KRows16* w, int64_t nb, const BlockQ8_K* const* x, float* const* y,
                size_t ahead) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
  const __m512i mc = _mm512_set1_epi8(0x0c), bit2 = _mm512_set1_epi8(0x04),
                bit4 = _mm512_set1_epi8(0x10);
  // The starts of the sub-blocks' sums, per block sum s: -4 * s (even), 1 - 16 * s (odd).
  const __m512i start_mul = _mm512_set1_epi64(static_cast<int64_t>(0xfffffff0fffffffcull));
  const __m512i start_add = _mm512_set1_epi64(int64_t{1} << 32);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q3KRows16& wb = w[b];
    // The burst here: spread (prefetch_chunk before each pair's three chunks), the Q3_K-mix
    // model's steps took 1.09-1.10x as long (two arms in one process, three runs).
    if (ahead != 0) prefetch_head<Q3KRows16, sizeof(Q3KRows16)>(wb, ahead);
    // The 16 signed scales of every row (the AVX2 kernel's unpacking, 16 rows at once): byte t
    // of lane r of v[m] is row r's scale 4m + t.
    const __m512i a0 = _mm512_loadu_si512(wb.scales[0]), a1 = _mm512_loadu_si512(wb.scales[1]),
                  a2 = _mm512_loadu_si512(wb.scales[2]);
    const auto top = [&](int shift) {
      return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, shift), m3), 4);
    };
    const __m512i v[4] = {_mm512_or_si512(_mm512_and_si512(a0, lo4), top(0)),
                          _mm512_or_si512(_mm512_and_si512(a1, lo4), top(2)),
                          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a0, 4), lo4), top(4)),
                          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a1, 4), lo4), top(6))};
    // Pair p's scales (sub-blocks 2p, 2p + 1) as the two words of each lane, and the even ones'
    // sum, which the low words' bias multiplies.
    __m512i pair[8];
    __m512i even = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      const __m512i bytes = _mm512_sub_epi8(v[p / 2], _mm512_set1_epi8(32));
      pair[p] = _mm512_srai_epi16(
          _mm512_shuffle_epi8(bytes, _mm512_load_si512(kHighPairWords[p % 2].data())), 8);
      even = _mm512_dpwssd_epi32(even, pair[p], _mm512_set1_epi32(1));
    }
    const __m512i unbias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(even, 14));
    const __m512 d16 = _mm512_cvtph_ps(load256(wb.d));
    __m512 dd[C];
    __m512i lanes[C];
    alignas(64) int32_t start[C][16];
    for (int c = 0; c < C; ++c) {
      dd[c] = _mm512_mul_ps(_mm512_set1_ps(x[c][b].d), d16);
      const __m512i sums = _mm512_cvtepi16_epi32(load256(x[c][b].bsums));
      _mm512_store_si512(start[c],
                         _mm512_add_epi32(_mm512_mullo_epi32(sums, start_mul), start_add));
      lanes[c] = unbias;
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const __m512i lh = _mm512_loadu_si512(wb.high[p]);
      const __m512i la = _mm512_loadu_si512(wb.low[p][0]), lb = _mm512_loadu_si512(wb.low[p][1]);
      __m512i ua[4], hi[C];
      for (int c = 0; c < C; ++c) hi[c] = _mm512_set1_epi32(start[c][2 * p + 1]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        // Step i of the even sub-block as u (bit pair i, third bit i to bit 2), of the odd one
        // as 4u (bit pair i to bits 2..3, third bit 4 + i to bit 4).
        ua[i] = select(m3, shift16(la, -2 * i), _mm512_and_si512(shift16(lh, 2 - i), bit2));
        const __m512i ub =
            select(mc, shift16(lb, 2 - 2 * i), _mm512_and_si512(shift16(lh, -i), bit4));
        for (int c = 0; c < C; ++c) {
          hi[c] = _mm512_dpbusd_epi32(hi[c], ub, broadcast32(x[c][b].qs + 32 * p + 16 + 4 * i));
        }
      }
      for (int c = 0; c < C; ++c) {
        __m512i words =
            _mm512_add_epi32(_mm512_slli_epi32(hi[c], 14), _mm512_set1_epi32(start[c][2 * p]));
        for (int i = 0; i < 4; ++i) {
          words = _mm512_dpbusd_epi32(words, ua[i], broadcast32(x[c][b].qs + 32 * p + 4 * i));
        }
        lanes[c] = _mm512_dpwssd_epi32(lanes[c], words, pair[p]);
      }
    }
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(dd[c], _mm512_cvtepi32_ps(lanes[c])));
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y[c], acc[c]);
}

// The Q2_K kernel: the AVX2 kernel, as the scalar reference, sums per super-block, row and
// column the products of the quants (0..3) by their sub-blocks' scales into one exact integer,
// and the mins against the block sums into another, then sum += d * float(sums) - dmin *
// float(mins), d and dmin being dx times the row's. Here lane r is row r; a pair of 16-element
// sub-blocks is one dpwssd by their two scales, as for Q3_K (the odd one's products of 4q,
// started at 1 and shifted by 14 into the high word, the even one's added below with a bias of
// 16384): each word is a sub-block's sum, at most 16 * 3 * 127 in size.
template <int C>
void group_rows(const Q2KRows16* w, int64_t nb, const BlockQ8_K* const* x, float* const* y,
                size_t ahead) {
  const __m512i m3 = _mm512_set1_epi8(0x03), mc = _mm512_set1_epi8(0x0c);
  const __m512i low4 = _mm512_set1_epi16(0x0f), one = _mm512_set1_epi32(1);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q2KRows16& wb = w[b];
    if (ahead != 0) prefetch_head<Q2KRows16, offsetof(Q2KRows16, low)>(wb, ahead);
    // Pair p's scales and mins (sub-blocks 2p, 2p + 1: bytes 2 (p % 2), + 1 of scale word p / 2)
    // as the two words of each lane, and the even scales' sum, which the low words' bias
    // multiplies.
    __m512i scale[8], min[8];
    __m512i even = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      const __m512i bytes = pair_words(_mm512_loadu_si512(wb.scales[p / 2]), p % 2);
      scale[p] = _mm512_and_si512(bytes, low4);
      min[p] = _mm512_srli_epi16(bytes, 4);
      even = _mm512_dpwssd_epi32(even, scale[p], one);
    }
    const __m512i unbias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(even, 14));
    const __m512 d16 = _mm512_cvtph_ps(load256(wb.d)), dmin16 = _mm512_cvtph_ps(load256(wb.dmin));
    __m512i lanes[C], mins[C];
    for (int c = 0; c < C; ++c) {
      lanes[c] = unbias;
      mins[c] = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) {
        mins[c] = _mm512_dpwssd_epi32(mins[c], min[p], broadcast32(x[c][b].bsums + 2 * p));
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      if (ahead != 0) {
        prefetch_chunk(wb.low[p][0], ahead);
        prefetch_chunk(wb.low[p][1], ahead);
      }
      const __m512i la = _mm512_loadu_si512(wb.low[p][0]), lb = _mm512_loadu_si512(wb.low[p][1]);
      __m512i qa[4], hi[C];
      for (int c = 0; c < C; ++c) hi[c] = one;
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        // Step i of the even sub-block (bit pair i), of the odd one times 4 (to bits 2..3).
        qa[i] = _mm512_and_si512(shift16(la, -2 * i), m3);
        const __m512i qb = _mm512_and_si512(shift16(lb, 2 - 2 * i), mc);
        for (int c = 0; c < C; ++c) {
          hi[c] = _mm512_dpbusd_epi32(hi[c], qb, broadcast32(x[c][b].qs + 32 * p + 16 + 4 * i));
        }
      }
      for (int c = 0; c < C; ++c) {
        __m512i words = _mm512_slli_epi32(hi[c], 14);
        for (int i = 0; i < 4; ++i) {
          words = _mm512_dpbusd_epi32(words, qa[i], broadcast32(x[c][b].qs + 32 * p + 4 * i));
        }
        lanes[c] = _mm512_dpwssd_epi32(lanes[c], words, scale[p]);
      }
    }
    for (int c = 0; c < C; ++c) {
      const __m512 dx = _mm512_set1_ps(x[c][b].d);
      const __m512 t =
          _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dx, d16), _mm512_cvtepi32_ps(lanes[c])),
                        _mm512_mul_ps(_mm512_mul_ps(dx, dmin16), _mm512_cvtepi32_ps(mins[c])));
      acc[c] = _mm512_add_ps(acc[c], t);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y[c], acc[c]);
}

// The Q8_0 kernel: the AVX2 kernel's lane L of a row sums, per pair of blocks (b, b + 1), the 8
// products of the pair's quants [g, g + 8), g = {0, 8, 32, 40, 16, 24, 48, 56}[L], exactly, and
// then acc[L] += (dw * dx) * float(sum), the scales those of the block the lane covers (b for L
// = 0, 1, 4, 5). Here acc[L] is a register whose lane r is row r's, and a lane's sum is two
// dpbusd of the layout's quants + 128 against the activations, started at -128 times the
// activations' sum over those 8 bytes, which the activation column carries.

// The activation column (q8_0_starts_column_bytes, matmul_internal.h) is quantised once per
// column by quantize_act_q8_0_starts_avx2, which the AVX-VNNI kernel reads too.

// Unlike the K-quants' kernels, those of the 32-element types prefetch: they compute little per
// byte, and from memory (BM_DecodeOrder/*_r16/4, two threads, medians of 3 to 5, each distance
// twice) they read at 0.81-0.82 (q8_0), 0.88 (q4_0) and 0.85 (mxfp4) of a plain read without,
// 0.91-0.99, 1.04 and 1.01-1.02 at 2 KiB ahead (q8_0 0.89 at 8 KiB).
constexpr size_t kPairPrefetch = 2048;

// A pair's lines, kPairPrefetch ahead.
template <typename Group>
inline void prefetch_pair(const Group* pair) {
  const char* ahead = reinterpret_cast<const char*>(pair) + kPairPrefetch;
#pragma GCC unroll 17
  for (size_t o = 0; o < sizeof(Group); o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
}

template <int C>
void group_rows(const Q8_0Rows16* w, int64_t np, const uint8_t* const* x, float* const* y) {
  static constexpr int kGroup[8] = {0, 8, 32, 40, 16, 24, 48, 56};
  const int64_t k = np * 2 * kQK8_0;
  const size_t scales_at = q8_0_scales_offset(k), starts_at = q8_0_starts_offset(k);
  __m512 acc[C][8];
  for (int c = 0; c < C; ++c) {
    for (__m512& a : acc[c]) a = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < np; ++p) {
    const Q8_0Rows16& wp = w[p];
    prefetch_pair(&wp);
    const __m512i dh = _mm512_loadu_si512(wp.d);  // d[0] and d[1]
    const __m512 dw[2] = {_mm512_cvtph_ps(_mm512_castsi512_si256(dh)),
                          _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dh, 1))};
    const BlockQ8_0* xb[C];
    const int32_t* start[C];
    __m512 dd[C][2];
    for (int c = 0; c < C; ++c) {
      xb[c] = reinterpret_cast<const BlockQ8_0*>(x[c]) + 2 * p;
      start[c] = reinterpret_cast<const int32_t*>(x[c] + starts_at) + 8 * p;
      // [dx_b dx_b dx_b1 dx_b1 ...] (matmul_internal.h)
      const float* dx = reinterpret_cast<const float*>(x[c] + scales_at) + 8 * p;
      dd[c][0] = _mm512_mul_ps(dw[0], _mm512_set1_ps(dx[0]));
      dd[c][1] = _mm512_mul_ps(dw[1], _mm512_set1_ps(dx[2]));
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const int g = kGroup[l];
      const __m512i w0 = _mm512_loadu_si512(wp.qs[g / 4]);
      const __m512i w1 = _mm512_loadu_si512(wp.qs[g / 4 + 1]);
      for (int c = 0; c < C; ++c) {
        const int8_t* xq = xb[c][g / 32].qs + g % 32;
        __m512i sum = _mm512_set1_epi32(start[c][l]);
        sum = _mm512_dpbusd_epi32(sum, w0, broadcast32(xq));
        sum = _mm512_dpbusd_epi32(sum, w1, broadcast32(xq + 4));
        acc[c][l] = _mm512_fmadd_ps(dd[c][g / 32], _mm512_cvtepi32_ps(sum), acc[c][l]);
      }
    }
  }
  for (int c = 0; c < C; ++c) store_rows(acc[c], y[c]);
}

// The Q4_0 kernel: the AVX2 kernel's lane L of a row sums, per pair of blocks (b, b + 1), the 8
// products of block b + L / 4's nibbles in bytes 4(L % 4)..+3 (unsigned, as dpbusd takes them)
// against their activations, less the activation column's offset (8 times the activations'
// sum: the nibbles' bias), exactly; then acc[L] += (dw * dx) * float(sum). Here, as for Q8_0,
// acc[L] is a register whose lane r is row r's, and the layout's word [L] of a pair holds lane L's
// bytes of the 16 rows. MXFP4 (the same activations and lanes, no bias) looks its nibbles up in
// kMXFP4Values + 12, unsigned, and so starts from -12 times the sum: 1.5 times the offset.

// The layouts whose unit is a pair of 32-element blocks, and of those the ones of nibbles (Q4_0's
// activation column and lanes).
template <typename Group>
constexpr bool kNibbles = std::is_same_v<Group, Q4_0Rows16> || std::is_same_v<Group, MXFP4Rows16>;
template <typename Group>
constexpr bool kPairUnit = kNibbles<Group> || std::is_same_v<Group, Q8_0Rows16>;

// A pair of Q4_0 or MXFP4 blocks of 16 rows, ready for the products: each lane's low and high
// nibbles (MXFP4's looked up, + 12) and the rows' scales as floats. Prompts unpack a group's
// pairs once into the work area (rows16_rows) rather than once per tile of columns.
struct NibblePair {
  __m512i lo[8], hi[8];
  __m512 dw[2];
};

template <typename Group>
requires kNibbles<Group>
inline NibblePair nibble_pair(const Group& wp) {
  constexpr int kBias = -kMXFP4Values[15];
  NibblePair out;
  if constexpr (std::is_same_v<Group, MXFP4Rows16>) {
    // mxfp4_half_scale of each row's exponent: 2^(e - 128), subnormal below 2.
    for (int h = 0; h < 2; ++h) {
      const __m512i e =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wp.e[h])));
      const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
      const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
      out.dw[h] = _mm512_castsi512_ps(
          _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
    }
  } else {
    const __m512i dh = _mm512_loadu_si512(wp.d);  // d[0] and d[1]
    out.dw[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(dh));
    out.dw[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dh, 1));
  }
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i grid = _mm512_broadcast_i32x4(_mm_add_epi8(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Values)), _mm_set1_epi8(kBias)));
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) {
    const __m512i q = _mm512_loadu_si512(wp.qs[l]);
    out.lo[l] = _mm512_and_si512(q, m4);
    out.hi[l] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    if constexpr (std::is_same_v<Group, MXFP4Rows16>) {
      out.lo[l] = _mm512_shuffle_epi8(grid, out.lo[l]);
      out.hi[l] = _mm512_shuffle_epi8(grid, out.hi[l]);
    }
  }
  return out;
}

// The products of np pairs, pair(p) giving pair p as a NibblePair (unpacked there, or read from
// the work area). kMX: the lanes start from -1.5 times the offset.
template <int C, bool kMX, typename PairOf>
void nibble_rows(PairOf pair, int64_t np, const Q4_0ActPair* const* x, float* const* y) {
  __m512 acc[C][8];
  for (int c = 0; c < C; ++c) {
    for (__m512& a : acc[c]) a = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < np; ++p) {
    decltype(auto) w = pair(p);
    __m512 dd[C][2];
    alignas(32) int32_t start[C][8];  // -off, or -1.5 * off
    for (int c = 0; c < C; ++c) {
      const Q4_0ActPair& xp = x[c][p];
      dd[c][0] = _mm512_mul_ps(w.dw[0], _mm512_set1_ps(xp.d[0]));
      dd[c][1] = _mm512_mul_ps(w.dw[1], _mm512_set1_ps(xp.d[4]));
      __m256i off = load256(xp.off);
      if constexpr (kMX) off = _mm256_add_epi32(off, _mm256_srai_epi32(off, 1));
      _mm256_store_si256(reinterpret_cast<__m256i*>(start[c]),
                         _mm256_sub_epi32(_mm256_setzero_si256(), off));
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      for (int c = 0; c < C; ++c) {
        const Q4_0ActPair& xp = x[c][p];
        __m512i sum = _mm512_set1_epi32(start[c][l]);
        sum = _mm512_dpbusd_epi32(sum, w.lo[l], broadcast32(xp.lo + 4 * l));
        sum = _mm512_dpbusd_epi32(sum, w.hi[l], broadcast32(xp.hi + 4 * l));
        acc[c][l] = _mm512_fmadd_ps(dd[c][l / 4], _mm512_cvtepi32_ps(sum), acc[c][l]);
      }
    }
  }
  for (int c = 0; c < C; ++c) store_rows(acc[c], y[c]);
}

template <int C, typename Group>
requires kNibbles<Group>
void group_rows(const Group* w, int64_t np, const Q4_0ActPair* const* x, float* const* y) {
  nibble_rows<C, std::is_same_v<Group, MXFP4Rows16>>(
      [w](int64_t p) {
        prefetch_pair(w + p);
        return nibble_pair(w[p]);
      },
      np, x, y);
}

template <int C, typename Group>
void prepared_rows(const NibblePair* w, int64_t np, const Q4_0ActPair* const* x, float* const* y) {
  nibble_rows<C, std::is_same_v<Group, MXFP4Rows16>>(
      [w](int64_t p) -> const NibblePair& { return w[p]; }, np, x, y);
}

// Columns from which a group's Q4_0 or MXFP4 pairs are unpacked once into the work area (twice
// the weights' bytes, written and read back) instead of once per tile. From 8, the synthetic
// gpt-oss model's pp512 (2 threads) was 318-320 tok/s, but a ~1B q4_0 model's batch 8, read from
// memory, 115 against 130-132 from 32 (gpt-oss pp512 296-302); from 16, 311-314 and 139-140.
constexpr int64_t kPrepareColumns = 16;

// The work area of the Q4_0 and MXFP4 layouts' kernel: a group's pairs unpacked, or (the tail) 16
// rows of the base type.
template <DType kBase>
size_t nibble_work_bytes(int64_t k) {
  return std::max(static_cast<size_t>(k / (2 * kQK8_0)) * sizeof(NibblePair),
                  rows16_work_bytes<kBase>(k));
}

// The elements of a row in one of Group: a super-block, or a pair of blocks of the 32-element
// types.
template <typename Group>
constexpr int64_t kUnit = kPairUnit<Group> ? 2 * kQK8_0 : kQKK;

// What a layout's kernel reads of an activation column: Q8_K blocks, Q4_0's pairs of blocks, or
// (Q8_0) the column's bytes (its blocks and then their scales, matmul_internal.h).
template <typename Group>
using ColumnOf = std::conditional_t<std::is_same_v<Group, Q8_0Rows16>, uint8_t,
                                    std::conditional_t<kNibbles<Group>, Q4_0ActPair, BlockQ8_K>>;

// Columns [j, j + C) of group g0 / 16; from its pairs in `prepared` where given. `ahead`: the
// K-quant kernels' prefetch distance (rows16_prefetch_bytes).
template <typename Group, int C>
void group_columns(const MatmulArgs& a, int64_t g0, int64_t j, size_t ahead,
                   const NibblePair* prepared) {
  const ColumnOf<Group>* x[C];
  float* y[C];
  for (int c = 0; c < C; ++c) {
    x[c] = static_cast<const ColumnOf<Group>*>(a.column(j + c));
    y[c] = a.y + (j + c) * a.y_stride + g0;
  }
  const auto* w = reinterpret_cast<const Group*>(a.w + g0 * a.w_row_bytes);
  if constexpr (kNibbles<Group>) {
    if (prepared != nullptr) return prepared_rows<C, Group>(prepared, a.k / kUnit<Group>, x, y);
  }
  if constexpr (kPairUnit<Group>) {
    group_rows<C>(w, a.k / kUnit<Group>, x, y);
  } else {
    group_rows<C>(w, a.k / kUnit<Group>, x, y, ahead);
  }
}

// The 32-element types' kernels keep 8 accumulators a column, which 4 columns would spill: with
// tiles of 2 the 1024-wide q8_0 model's pp512 was 1946-1951 tok/s, with 4 1753-1820 (batch 8
// the same).
template <typename Group>
constexpr int kTileOf = kPairUnit<Group> ? 2 : kTile;

// The `rows` entry of a layout whose super-blocks of a group are Group, and whose base type's
// kernel of this level is kBase: every full group's columns in tiles of kTile, the tail rows (in
// the base layout) by kBase.
template <typename Group, DType kLayout, const MatmulKernel& kBase>
void rows16_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const int64_t full = a.n_rows / kLaneRows * kLaneRows;
  const size_t ahead = rows16_prefetch_bytes();
  for (int64_t g0 = r0; g0 < std::min(r1, full); g0 += kLaneRows) {
    const NibblePair* prepared = nullptr;
    if constexpr (kNibbles<Group>) {
      if (a.m >= kPrepareColumns) {
        auto* pairs = reinterpret_cast<NibblePair*>(a.work);
        const auto* w = reinterpret_cast<const Group*>(a.w + g0 * a.w_row_bytes);
        for (int64_t p = 0; p < a.k / kUnit<Group>; ++p) {
          prefetch_pair(w + p);
          pairs[p] = nibble_pair(w[p]);
        }
        prepared = pairs;
      }
    }
    int64_t j = 0;
    for (; j + kTileOf<Group> <= a.m; j += kTileOf<Group>) {
      group_columns<Group, kTileOf<Group>>(a, g0, j, ahead, prepared);
    }
    switch (a.m - j) {
      case 3:
        group_columns<Group, 3>(a, g0, j, ahead, prepared);
        break;
      case 2:
        group_columns<Group, 2>(a, g0, j, ahead, prepared);
        break;
      case 1:
        group_columns<Group, 1>(a, g0, j, ahead, prepared);
        break;
      default:
        break;
    }
  }
  if (r1 > full) rows16_by_base(kBase, kLayout, a, std::max(r0, full), r1);
}

}  // namespace
}  // namespace strata::matmul_detail::avx512

namespace strata::matmul_detail {

const MatmulKernel kQ4_K_R16Avx512 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                      avx512::rows16_rows<Q4KRows16, DType::kQ4_K_R16, kQ4_KAvx512>,
                                      rows16_work_bytes<DType::kQ4_K>};
// Q2_K and Q3_K have no AVX-512 kernel of their own: the tail rows run the AVX2 one, which every
// AVX-512 CPU runs (AVX-VNNI's is not there on Zen 4), with the same bits.
const MatmulKernel kQ2_K_R16Avx512 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                      avx512::rows16_rows<Q2KRows16, DType::kQ2_K_R16, kQ2_KAvx2>,
                                      rows16_work_bytes<DType::kQ2_K>};
const MatmulKernel kQ3_K_R16Avx512 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                      avx512::rows16_rows<Q3KRows16, DType::kQ3_K_R16, kQ3_KAvx2>,
                                      rows16_work_bytes<DType::kQ3_K>};
const MatmulKernel kQ5_K_R16Avx512 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                      avx512::rows16_rows<Q5KRows16, DType::kQ5_K_R16, kQ5_KAvx512>,
                                      rows16_work_bytes<DType::kQ5_K>};
const MatmulKernel kQ6_K_R16Avx512 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                      avx512::rows16_rows<Q6KRows16, DType::kQ6_K_R16, kQ6_KAvx512>,
                                      rows16_work_bytes<DType::kQ6_K>};
// The tail rows run the AVX2 kernel, which reads the Q8_0 column that starts this one's.
const MatmulKernel kQ8_0_R16Avx512 = {q8_0_starts_column_bytes, quantize_act_q8_0_starts_avx2,
                                      avx512::rows16_rows<Q8_0Rows16, DType::kQ8_0_R16, kQ8_0Avx2>,
                                      rows16_work_bytes<DType::kQ8_0>};
const MatmulKernel kQ4_0_R16Avx512 = {q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
                                      avx512::rows16_rows<Q4_0Rows16, DType::kQ4_0_R16, kQ4_0Avx2>,
                                      avx512::nibble_work_bytes<DType::kQ4_0>};
const MatmulKernel kMXFP4_R16Avx512 = {
    q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
    avx512::rows16_rows<MXFP4Rows16, DType::kMXFP4_R16, kMXFP4Avx2>,
    avx512::nibble_work_bytes<DType::kMXFP4>};
const MatmulKernel kIQ4_XS_R16Avx512 = {
    q8_k_column_bytes, quantize_act_q8_k_avx2,
    avx512::rows16_rows<IQ4XSRows16, DType::kIQ4_XS_R16, kIQ4_XSAvx512>,
    rows16_work_bytes<DType::kIQ4_XS>};

}  // namespace strata::matmul_detail
