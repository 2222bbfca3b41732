// The AVX2 kernels of Q4_K, Q5_K, Q6_K, IQ4_XS and Q8_0 in rows in lanes (core/rows16.h), for CPUs
// without AVX-512: a ymm register holds 8 of a group's 16 rows, so each group is multiplied in
// two halves (rows 0..7, then 8..15, whose bytes the first half brought into the cache; Q8_0 at
// few columns both at once). The same lanes as the AVX-512 kernels (matmul_rows16_avx512.cc),
// with maddubs + madd for their dpbusd: lane L of the AVX2 file kernel's accumulator of a row is
// a register whose lane r is row r's, its integer sums exact however grouped and its float steps
// the file kernel's, lane by lane. So the bits are the AVX2 kernels' (matmul_k_avx2.cc,
// matmul_legacy_avx2.cc), and so every level's. matmul_rows16_avxvnni.cc compiles this again with
// AVX-VNNI's dpwssd for madd + add (and Q8_0 and IQ4_XS with dpbusd).
//
// The products per column are the file kernels' (the K-quants: two maddubs and two madds per 32
// quant bytes); what the layout saves is the per-row work: the scales' shuffles, their unpacking
// (8 rows at once here) and the horizontal sums. Q4_0 and MXFP4 kernels of this shape were
// written and measured, and were no faster than the file kernels (which share their activation
// pairs) at any column count, so those layouts start at AVX-512.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "core/matmul_avx2.h"
#include "core/rows16.h"

namespace strata::matmul_detail::avx2 {
namespace {

constexpr int kHalf = kLaneRows / 2;

// Columns a group's half is multiplied with at once. 8 float accumulators a column fill the 16
// registers at one column, and more spill, yet more at a time was faster (BM_Matmul/q4_K_r16/M/1,
// two threads, 128 rows of 2048 in L2, M = 64: 206 us one at a time, 200 by 2, 195 by 4, 194 by
// 8; q6_K 259, 231, 210, 208), and faster than the file kernel's tiles at every M (q4_K 218-241
// us, q6_K 206-237), and by 8 the ~1B q4_K_M model's batch 8 on AVX-VNNI was 106-108 tok/s against
// 102 by 4 (the file kernel's 100-107).
constexpr int kTile = 8;

inline __m256i broadcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The second half's pass finds the group in the cache and would leave the memory idle: it
// prefetches the next group's super-block b into L2 (a group's bytes follow its own), a share of
// it at each of its kSteps steps. From memory, one column (BM_Matmul/q4_K_r16/1/0, AVX-VNNI,
// two threads): 252-288 us without, 201 with the same prefetches into L1, 178 into L2; the file
// kernel 190-257.
template <int kSteps, typename Group>
inline void prefetch_next(const Group& wb, int64_t nb, int step) {
  constexpr int kLines = (sizeof(Group) + 63) / 64;
  constexpr int kPerStep = (kLines + kSteps - 1) / kSteps;
  const char* next = reinterpret_cast<const char*>(&wb + nb);
  for (int i = step * kPerStep; i < std::min((step + 1) * kPerStep, kLines); ++i) {
    _mm_prefetch(next + 64 * i, _MM_HINT_T1);
  }
}

// Q8_0 does less work per byte, and from memory its halves' passes were 0.8-0.9x the file
// kernel's speed with any prefetch (BM_DecodeOrder/q8_0_r16/4). Up to kOnePass columns it takes
// both halves of a pair at once (16 accumulators a column, spilled) and prefetches kAhead bytes
// ahead as the AVX-512 kernels of the pair layouts do, and reads as fast as the file kernel
// (4.59-4.66 ms both); the ~1B q8_0 model's batch 4 on AVX2 67 -> 73 tok/s. From more columns
// the halves' passes are faster (batch 8, prompts).
constexpr int64_t kOnePass = 4;
constexpr size_t kAhead = 2048;

template <typename Group>
inline void prefetch_pair_ahead(const Group& wp) {
#pragma GCC unroll 17
  for (size_t o = 0; o < sizeof(Group); o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(&wp) + kAhead + o, _MM_HINT_T0);
  }
}

// Half h of a [16][4]-byte array of lanes (rows 8h..8h+7).
inline __m256i half_lanes(const void* lanes, int h) {
  return load256(static_cast<const uint8_t*>(lanes) + 32 * h);
}

inline __m256 half_f16(const uint16_t* v, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + kHalf * h)));
}

// pshufb masks giving each 32-bit lane byte i (0..3) of that lane in both 16-bit words.
constexpr std::array<std::array<uint8_t, 32>, 4> make_byte_words() {
  std::array<std::array<uint8_t, 32>, 4> m{};
  for (int i = 0; i < 4; ++i) {
    for (int b = 0; b < 32; ++b) {
      m[i][b] = b % 2 == 0 ? static_cast<uint8_t>(b % 16 / 4 * 4 + i) : uint8_t{0x80};
    }
  }
  return m;
}
alignas(32) constexpr auto kByteWords = make_byte_words();

inline __m256i byte_words(__m256i v, int i) {
  return _mm256_shuffle_epi8(
      v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kByteWords[i].data())));
}

// v's bits moved left by n (right by -n) within each 16-bit word.
inline __m256i shift16(__m256i v, int n) {
  return n >= 0 ? _mm256_slli_epi16(v, n) : _mm256_srli_epi16(v, -n);
}

// Each row's 8 float lanes summed in hsum's order, ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)),
// into y[0..7].
inline void store_rows(const __m256* acc, float* y) {
  const __m256 even = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
  const __m256 odd = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
  _mm256_storeu_ps(y, _mm256_add_ps(even, odd));
}

// Rows 8h..8h+7 of one group against C Q8_K columns: y[c][0..7]. Q4_K and Q5_K (QKMinKernel):
// lane L sums, over the 64-element steps j, scale(2j) * (the products of bytes 4L..4L+3 of the
// low nibbles) + scale(2j + 1) * (the same of the high nibbles), each a maddubs (pairs of
// products, at most 2 * 31 * 128) and a madd by the scale in both words. With `prefetch` (the
// second half's first tile of columns) the pass prefetches the next group (prefetch_next).
template <int C, typename Group>
requires std::is_same_v<Group, Q4KRows16> || std::is_same_v<Group, Q5KRows16>
void half_rows(const Group* w, int h, bool prefetch, int64_t nb, const BlockQ8_K* const* x,
               float* const* y) {
  constexpr bool kFive = std::is_same_v<Group, Q5KRows16>;
  const __m256i m4 = _mm256_set1_epi8(0x0f), m6 = _mm256_set1_epi8(0x3f),
                m30 = _mm256_set1_epi8(0x30), bit4 = _mm256_set1_epi8(0x10);
  __m256 acc[C][8];
  for (int c = 0; c < C; ++c) {
    for (__m256& a : acc[c]) a = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Group& wb = w[b];
    // unpack_scale_mins of the 8 rows: byte i of lane r of scale03 is row r's scale i, of
    // scale47 its scale 4 + i; min03 and min47 likewise.
    const __m256i s0 = half_lanes(wb.scales[0], h), s1 = half_lanes(wb.scales[1], h),
                  s2 = half_lanes(wb.scales[2], h);
    const __m256i scale03 = _mm256_and_si256(s0, m6);
    const __m256i scale47 =
        _mm256_or_si256(_mm256_and_si256(s2, m4), _mm256_and_si256(_mm256_srli_epi32(s0, 2), m30));
    const __m256i min03 = _mm256_and_si256(s1, m6);
    const __m256i min47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi32(s1, 2), m30));
    // Step j's scales in both words of each lane: sub-block 2j's (low nibbles), 2j + 1's.
    __m256i low[4], high[4];
    for (int j = 0; j < 4; ++j) {
      low[j] = byte_words(j < 2 ? scale03 : scale47, 2 * (j % 2));
      high[j] = byte_words(j < 2 ? scale03 : scale47, 2 * (j % 2) + 1);
    }
    const __m256 d8 = half_f16(wb.d, h), dmin8 = half_f16(wb.dmin, h);
    __m256 d[C], dmin[C];
    for (int c = 0; c < C; ++c) {
      const __m256 dx = _mm256_set1_ps(x[c][b].d);
      d[c] = _mm256_mul_ps(dx, d8);
      dmin[c] = _mm256_mul_ps(dx, dmin8);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m256i lanes[C];
      for (int c = 0; c < C; ++c) lanes[c] = _mm256_setzero_si256();
      __m256i fifth = _mm256_setzero_si256();  // Q5_K: byte t of lane r is row r's qh[4g + t]
      if constexpr (kFive) fifth = half_lanes(wb.qh[g], h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        if (prefetch) prefetch_next<32>(wb, nb, 4 * g + j);
        const __m256i q = half_lanes(wb.qs[g][j], h);
        __m256i ql = _mm256_and_si256(q, m4);
        __m256i qh = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (kFive) {
          // Bits 2j and 2j + 1 of a byte are its low and high quants' fifth bits, moved to bit 4
          // (what a 16-bit shift brings in from the other byte is masked off).
          ql = _mm256_or_si256(ql, _mm256_and_si256(shift16(fifth, 4 - 2 * j), bit4));
          qh = _mm256_or_si256(qh, _mm256_and_si256(shift16(fifth, 3 - 2 * j), bit4));
        }
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = x[c][b].qs + 64 * j + 4 * g;
          lanes[c] = madd_add(lanes[c], _mm256_maddubs_epi16(ql, broadcast32(xq)), low[j]);
          lanes[c] = madd_add(lanes[c], _mm256_maddubs_epi16(qh, broadcast32(xq + 32)), high[j]);
        }
      }
      // Lane L's min in both words, against block sums 2L and 2L + 1.
      const __m256i mins = byte_words(g < 4 ? min03 : min47, g % 4);
      for (int c = 0; c < C; ++c) {
        const __m256i pm = _mm256_madd_epi16(mins, broadcast32(x[c][b].bsums + 2 * g));
        acc[c][g] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(lanes[c]), acc[c][g]);
        // -(dx * dmin) * pm + acc: the file kernel's fmadd by the negated product.
        acc[c][g] = _mm256_fnmadd_ps(dmin[c], _mm256_cvtepi32_ps(pm), acc[c][g]);
      }
    }
  }
  for (int c = 0; c < C; ++c) store_rows(acc[c], y[c]);
}

// Q6_K: the file kernel's lane L sums, over the 32-element groups i = 4h + g, scale(2i + L / 4) *
// (the products of the group's elements 4L..4L+3, quants as q + 32), then takes out 32 * (the
// scales against the block sums, lane L: sums 2L and 2L + 1); acc[L] += (dx * d) *
// float(lanes[L]). The layout's three bytes of a lane give three groups' quants by one AND each,
// and the fourth's from their top bits.
template <int C>
void half_rows(const Q6KRows16* w, int h, bool prefetch, int64_t nb, const BlockQ8_K* const* x,
               float* const* y) {
  const __m256i m6 = _mm256_set1_epi8(0x3f), m03 = _mm256_set1_epi8(0x03),
                m0c = _mm256_set1_epi8(0x0c), m30 = _mm256_set1_epi8(0x30);
  // pshufb mask giving each 32-bit lane its low word twice.
  const __m256i low_twice =
      _mm256_broadcastsi128_si256(_mm_setr_epi32(0x01000100, 0x05040504, 0x09080908, 0x0d0c0d0c));
  __m256 acc[C][8];
  for (int c = 0; c < C; ++c) {
    for (__m256& a : acc[c]) a = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KRows16& wb = w[b];
    const __m256 d8 = half_f16(wb.d, h);
    __m256 d[C];
    for (int c = 0; c < C; ++c) d[c] = _mm256_mul_ps(_mm256_set1_ps(x[c][b].d), d8);
    // Sub-block s's scale of every row, sign-extended, in both words of its lane.
    __m256i scale[16];
    for (int s = 0; s < 16; ++s) {
      const __m256i v = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb.scales[s] + kHalf * h)));
      scale[s] = _mm256_shuffle_epi8(v, low_twice);
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const int half = l / 4;
      __m256i lanes[C];
      for (int c = 0; c < C; ++c) lanes[c] = _mm256_setzero_si256();
      for (int hh = 0; hh < 2; ++hh) {
        if (prefetch) prefetch_next<16>(wb, nb, 2 * l + hh);
        const __m256i r0 = half_lanes(wb.q[l][hh][0], h);
        const __m256i r1 = half_lanes(wb.q[l][hh][1], h);
        const __m256i r2 = half_lanes(wb.q[l][hh][2], h);
        // The fourth group's quant: bits 6..7 of r0, r1 and r2 to bits 0..1, 2..3 and 4..5 (16-bit
        // shifts: what they bring in from the next byte is masked off).
        const __m256i q3 =
            _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(r0, 6), m03),
                                            _mm256_and_si256(_mm256_srli_epi16(r1, 4), m0c)),
                            _mm256_and_si256(_mm256_srli_epi16(r2, 2), m30));
        const __m256i q[4] = {_mm256_and_si256(r0, m6), _mm256_and_si256(r1, m6),
                              _mm256_and_si256(r2, m6), q3};
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          for (int c = 0; c < C; ++c) {
            const __m256i xw = broadcast32(x[c][b].qs + 128 * hh + 32 * g + 4 * l);
            lanes[c] =
                madd_add(lanes[c], _mm256_maddubs_epi16(q[g], xw), scale[2 * (4 * hh + g) + half]);
          }
        }
      }
      // Lane r: the words [scale(2l), scale(2l + 1)] of row r, against block sums 2l, 2l + 1.
      const __m256i pair = _mm256_blend_epi16(scale[2 * l], scale[2 * l + 1], 0xaa);
      for (int c = 0; c < C; ++c) {
        const __m256i off = _mm256_madd_epi16(pair, broadcast32(x[c][b].bsums + 2 * l));
        const __m256i tot = _mm256_sub_epi32(lanes[c], _mm256_slli_epi32(off, 5));
        acc[c][l] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(tot), acc[c][l]);
      }
    }
  }
  for (int c = 0; c < C; ++c) store_rows(acc[c], y[c]);
}

// IQ4_XS: the file kernel, as the scalar reference, sums a super-block's products exactly into
// one integer per row and column, then sum += (dx * d) * float(total): so any grouping of the
// integers gives its bits, and lane r of every register is row r. A sub-block's 32 products,
// then times its row's scale: on AVX-VNNI by dpbusd on the levels + 128 from -128 times the
// sub-block's activation sum (from the block sums), as the AVX-512 kernel; on AVX2 by the file
// kernel's sign trick (|level| <= 127, so a pair of products stays below 2 * 127 * 127).
template <int C>
void half_rows(const IQ4XSRows16* w, int h, bool prefetch, int64_t nb, const BlockQ8_K* const* x,
               float* const* y) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i low4 = _mm256_set1_epi32(0x0f), low2 = _mm256_set1_epi32(0x03);
  const __m256i offset = _mm256_set1_epi32(32);
#if defined(STRATA_AVX_VNNI)
  static constexpr std::array<uint8_t, 16> kBiasedLevels = [] {
    std::array<uint8_t, 16> v{};
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(kIQ4NLValues[i] + 128);
    return v;
  }();
  const __m256i grid = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedLevels.data())));
#else
  const __m256i grid =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
#endif
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const IQ4XSRows16& wb = w[b];
    const __m256 d8 = half_f16(wb.d, h);
    const __m256i sl = half_lanes(wb.scales_l, h);
    const __m256i sh = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales_h + kHalf * h)));
    __m256 dd[C];
    __m256i total[C];
#if defined(STRATA_AVX_VNNI)
    alignas(32) int32_t start[C][8];  // -128 * the activations' sum over sub-block s
#endif
    for (int c = 0; c < C; ++c) {
      dd[c] = _mm256_mul_ps(_mm256_set1_ps(x[c][b].d), d8);
      total[c] = _mm256_setzero_si256();
#if defined(STRATA_AVX_VNNI)
      _mm256_store_si256(reinterpret_cast<__m256i*>(start[c]),
                         _mm256_madd_epi16(load256(x[c][b].bsums), _mm256_set1_epi16(-128)));
#endif
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      // Row r's scale ls - 32 of sub-block s: nibble s of its scales_l word, bits 2s, 2s + 1 of
      // its scales_h.
      const __m256i ls = _mm256_sub_epi32(
          _mm256_or_si256(
              _mm256_and_si256(_mm256_srli_epi32(sl, 4 * s), low4),
              _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * s), low2), 4)),
          offset);
      __m256i sums[C];
      for (int c = 0; c < C; ++c) {
#if defined(STRATA_AVX_VNNI)
        sums[c] = _mm256_set1_epi32(start[c][s]);
#else
        sums[c] = _mm256_setzero_si256();
#endif
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        if (prefetch) prefetch_next<32>(wb, nb, 4 * s + g);
        const __m256i q = half_lanes(wb.qs[s][g], h);
        const __m256i lo = _mm256_shuffle_epi8(grid, _mm256_and_si256(q, m4));
        const __m256i hi = _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
#if defined(STRATA_AVX_VNNI)
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = x[c][b].qs + 32 * s + 4 * g;
          sums[c] = _mm256_dpbusd_avx_epi32(sums[c], lo, broadcast32(xq));
          sums[c] = _mm256_dpbusd_avx_epi32(sums[c], hi, broadcast32(xq + 16));
        }
#else
        const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = x[c][b].qs + 32 * s + 4 * g;
          sums[c] = _mm256_add_epi32(
              sums[c], _mm256_add_epi32(dot_u8i8(alo, _mm256_sign_epi8(broadcast32(xq), lo)),
                                        dot_u8i8(ahi, _mm256_sign_epi8(broadcast32(xq + 16), hi))));
        }
#endif
      }
      for (int c = 0; c < C; ++c)
        total[c] = _mm256_add_epi32(total[c], _mm256_mullo_epi32(sums[c], ls));
    }
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(dd[c], _mm256_cvtepi32_ps(total[c])));
    }
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y[c], acc[c]);
}

// Q8_0: the file kernel's lane L of a row sums, per pair of blocks, the 8 products of the pair's
// quants [g, g + 8), g = {0, 8, 32, 40, 16, 24, 48, 56}[L], exactly, then acc[L] += (dw * dx) *
// float(sum), the scales those of the block the lane covers. The layout stores the quants + 128.
// AVX-VNNI takes them so, as dpbusd's unsigned operand, from the column's starts (-128 times the
// activations' sum over the lane: q8_0_starts_column_bytes), as the AVX-512 kernel does; AVX2
// takes the quants back and multiplies |q| by the activations with q's sign, as the file kernel
// does (a pair of products is at most 2 * 128 * 127). kHalves 2: rows 0..15 at once, y[c][0..15].
template <int C, int kHalves = 1>
void half_rows(const Q8_0Rows16* w, int h0, bool prefetch, int64_t np, const uint8_t* const* x,
               float* const* y) {
  static constexpr int kGroup[8] = {0, 8, 32, 40, 16, 24, 48, 56};
  const int64_t k = np * 2 * kQK8_0;
  const size_t scales_at = q8_0_scales_offset(k);
#if defined(STRATA_AVX_VNNI)
  const size_t starts_at = q8_0_starts_offset(k);
#else
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
#endif
  __m256 acc[kHalves][C][8];
  for (auto& half : acc) {
    for (auto& column : half) {
      for (__m256& v : column) v = _mm256_setzero_ps();
    }
  }
  for (int64_t p = 0; p < np; ++p) {
    const Q8_0Rows16& wp = w[p];
    if constexpr (kHalves == 2) prefetch_pair_ahead(wp);
    const BlockQ8_0* xb[C];
#if defined(STRATA_AVX_VNNI)
    const int32_t* start[C];
#endif
    __m256 dx0[C], dx1[C];
    for (int c = 0; c < C; ++c) {
      xb[c] = reinterpret_cast<const BlockQ8_0*>(x[c]) + 2 * p;
      // [dx_b dx_b dx_b1 dx_b1 ...] (matmul_internal.h)
      const float* dx = reinterpret_cast<const float*>(x[c] + scales_at) + 8 * p;
      dx0[c] = _mm256_set1_ps(dx[0]);
      dx1[c] = _mm256_set1_ps(dx[2]);
#if defined(STRATA_AVX_VNNI)
      start[c] = reinterpret_cast<const int32_t*>(x[c] + starts_at) + 8 * p;
#endif
    }
    for (int hh = 0; hh < kHalves; ++hh) {
      const int h = h0 + hh;
      const __m256 dw[2] = {half_f16(wp.d[0], h), half_f16(wp.d[1], h)};
      __m256 dd[C][2];
      for (int c = 0; c < C; ++c) {
        dd[c][0] = _mm256_mul_ps(dw[0], dx0[c]);
        dd[c][1] = _mm256_mul_ps(dw[1], dx1[c]);
      }
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        if (prefetch && kHalves == 1) prefetch_next<8>(wp, np, l);
        const int g = kGroup[l];
        const __m256i w0 = half_lanes(wp.qs[g / 4], h), w1 = half_lanes(wp.qs[g / 4 + 1], h);
#if defined(STRATA_AVX_VNNI)
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = xb[c][g / 32].qs + g % 32;
          __m256i sum = _mm256_set1_epi32(start[c][l]);
          sum = _mm256_dpbusd_avx_epi32(sum, w0, broadcast32(xq));
          sum = _mm256_dpbusd_avx_epi32(sum, w1, broadcast32(xq + 4));
          acc[hh][c][l] = _mm256_fmadd_ps(dd[c][g / 32], _mm256_cvtepi32_ps(sum), acc[hh][c][l]);
        }
#else
        const __m256i q0 = _mm256_xor_si256(w0, bias), q1 = _mm256_xor_si256(w1, bias);
        const __m256i abs0 = _mm256_sign_epi8(q0, q0), abs1 = _mm256_sign_epi8(q1, q1);
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = xb[c][g / 32].qs + g % 32;
          const __m256i sum =
              _mm256_add_epi32(dot_u8i8(abs0, _mm256_sign_epi8(broadcast32(xq), q0)),
                               dot_u8i8(abs1, _mm256_sign_epi8(broadcast32(xq + 4), q1)));
          acc[hh][c][l] = _mm256_fmadd_ps(dd[c][g / 32], _mm256_cvtepi32_ps(sum), acc[hh][c][l]);
        }
#endif
      }
    }
  }
  for (int hh = 0; hh < kHalves; ++hh) {
    for (int c = 0; c < C; ++c) store_rows(acc[hh][c], y[c] + kHalf * hh);
  }
}

// Q8_0 takes a pair of blocks as its unit and reads its column as bytes (the blocks, their
// scales and, on AVX-VNNI, the starts); the K-quants a super-block and Q8_K blocks.
template <typename Group>
constexpr bool kPairUnit = std::is_same_v<Group, Q8_0Rows16>;
template <typename Group>
using ColumnOf = std::conditional_t<kPairUnit<Group>, uint8_t, BlockQ8_K>;

// Columns [j, j + C) of half h of group g0 / 16.
template <typename Group, int C>
void half_columns(const MatmulArgs& a, int64_t g0, int h, int64_t j) {
  const ColumnOf<Group>* x[C];
  float* y[C];
  for (int c = 0; c < C; ++c) {
    x[c] = static_cast<const ColumnOf<Group>*>(a.column(j + c));
    y[c] = a.y + (j + c) * a.y_stride + g0 + kHalf * h;
  }
  half_rows<C>(reinterpret_cast<const Group*>(a.w + g0 * a.w_row_bytes), h, h == 1 && j == 0,
               a.k / (kPairUnit<Group> ? 2 * kQK8_0 : kQKK), x, y);
}

// Columns [0, C) of both halves of group g0 / 16 at once (Q8_0, few columns: kOnePass).
template <typename Group, int C>
void both_halves(const MatmulArgs& a, int64_t g0) {
  const ColumnOf<Group>* x[C];
  float* y[C];
  for (int c = 0; c < C; ++c) {
    x[c] = static_cast<const ColumnOf<Group>*>(a.column(c));
    y[c] = a.y + c * a.y_stride + g0;
  }
  half_rows<C, 2>(reinterpret_cast<const Group*>(a.w + g0 * a.w_row_bytes), 0, false,
                  a.k / (2 * kQK8_0), x, y);
}

// IQ4_XS keeps one float accumulator a column, and three integer registers: tiles of 4 columns
// keep them in registers.
template <typename Group>
constexpr int kTileOf = std::is_same_v<Group, IQ4XSRows16> ? 4 : kTile;

// half_columns, or both_halves (h < 0), for a run-time column count nc in 1..C.
template <typename Group, int C>
void columns_n(int nc, const MatmulArgs& a, int64_t g0, int h, int64_t j) {
  if constexpr (C > 1) {
    if (nc < C) return columns_n<Group, C - 1>(nc, a, g0, h, j);
  }
  if (h < 0) {
    if constexpr (kPairUnit<Group> && C <= kOnePass) both_halves<Group, C>(a, g0);
  } else {
    half_columns<Group, C>(a, g0, h, j);
  }
}

// The `rows` entry of a layout whose super-blocks of a group are Group, and whose base type's
// kernel of this level is kBase: each full group's halves in tiles of kTile columns (Q8_0, up to
// kOnePass columns, both at once), the tail rows (in the base layout) by kBase.
template <typename Group, DType kLayout, const MatmulKernel& kBase>
void rows16_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const int64_t full = a.n_rows / kLaneRows * kLaneRows;
  for (int64_t g0 = r0; g0 < std::min(r1, full); g0 += kLaneRows) {
    if (kPairUnit<Group> && a.m <= kOnePass) {
      columns_n<Group, kOnePass>(static_cast<int>(a.m), a, g0, -1, 0);
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      for (int64_t j = 0; j < a.m; j += kTileOf<Group>) {
        columns_n<Group, kTileOf<Group>>(
            static_cast<int>(std::min<int64_t>(kTileOf<Group>, a.m - j)), a, g0, h, j);
      }
    }
  }
  if (r1 > full) rows16_by_base(kBase, kLayout, a, std::max(r0, full), r1);
}

}  // namespace
}  // namespace strata::matmul_detail::avx2

namespace strata::matmul_detail {

#if !defined(STRATA_AVX_VNNI)
void quantize_act_q8_0_starts_avx2(const float* x, void* dst, int64_t k) {
  quantize_act_q8_0_avx2(x, dst, k);
  auto* col = static_cast<uint8_t*>(dst);
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(col);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t p = 0; p < k / (2 * kQK8_0); ++p) {
    // The 8-byte sums of the pair's quants + 128: bytes 0, 8, 16, 24 of each block.
    alignas(32) uint64_t sums[2][4];
    for (int b = 0; b < 2; ++b) {
      const __m256i q = _mm256_xor_si256(avx2::load256(blocks[2 * p + b].qs), bias);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sums[b]),
                         _mm256_sad_epu8(q, _mm256_setzero_si256()));
    }
    // In the lanes' order (g = 0, 8, 32, 40, 16, 24, 48, 56): -128 * (sum - 8 * 128).
    static constexpr int kBlock[8] = {0, 0, 1, 1, 0, 0, 1, 1}, kPart[8] = {0, 1, 0, 1, 2, 3, 2, 3};
    int32_t start[8];
    for (int l = 0; l < 8; ++l) {
      start[l] = 8 * 128 * 128 - static_cast<int32_t>(sums[kBlock[l]][kPart[l]]) * 128;
    }
    std::memcpy(col + q8_0_starts_offset(k) + 32 * static_cast<size_t>(p), start, sizeof(start));
  }
}
#endif

const MatmulKernel STRATA_AVX2_ENTRY(kQ4_K_R16) = {
    q8_k_column_bytes, quantize_act_q8_k_avx2,
    avx2::rows16_rows<Q4KRows16, DType::kQ4_K_R16, STRATA_AVX2_ENTRY(kQ4_K)>,
    rows16_work_bytes<DType::kQ4_K>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ5_K_R16) = {
    q8_k_column_bytes, quantize_act_q8_k_avx2,
    avx2::rows16_rows<Q5KRows16, DType::kQ5_K_R16, STRATA_AVX2_ENTRY(kQ5_K)>,
    rows16_work_bytes<DType::kQ5_K>};
#if defined(STRATA_AVX_VNNI)
const MatmulKernel kQ8_0_R16AvxVnni = {
    q8_0_starts_column_bytes, quantize_act_q8_0_starts_avx2,
    avx2::rows16_rows<Q8_0Rows16, DType::kQ8_0_R16, kQ8_0AvxVnni>, rows16_work_bytes<DType::kQ8_0>};
#else
const MatmulKernel kQ8_0_R16Avx2 = {q8_0_column_bytes, quantize_act_q8_0_avx2,
                                    avx2::rows16_rows<Q8_0Rows16, DType::kQ8_0_R16, kQ8_0Avx2>,
                                    rows16_work_bytes<DType::kQ8_0>};
#endif
const MatmulKernel STRATA_AVX2_ENTRY(kIQ4_XS_R16) = {
    q8_k_column_bytes, quantize_act_q8_k_avx2,
    avx2::rows16_rows<IQ4XSRows16, DType::kIQ4_XS_R16, STRATA_AVX2_ENTRY(kIQ4_XS)>,
    rows16_work_bytes<DType::kIQ4_XS>};
const MatmulKernel STRATA_AVX2_ENTRY(kQ6_K_R16) = {
    q8_k_column_bytes, quantize_act_q8_k_avx2,
    avx2::rows16_rows<Q6KRows16, DType::kQ6_K_R16, STRATA_AVX2_ENTRY(kQ6_K)>,
    rows16_work_bytes<DType::kQ6_K>};

}  // namespace strata::matmul_detail
