// AVX-512 VNNI kernels of Q8_0, Q4_0 and MXFP4 weights against Q8_0 activations, bit-identical
// to the AVX2 kernels (matmul_legacy_avx2.cc); see matmul_avx512.h for how. Entered only after the
// run-time CPU check (matmul.cc).
#include <immintrin.h>

#include <cstring>

#include "core/matmul_avx512.h"
#include "core/quant_blocks.h"

namespace strata::matmul_detail::avx512 {
namespace {

// ---- Q8_0 ----
//
// The AVX2 kernel sums a pair of blocks (b, b + 1) into 8 int32 lanes, lane L holding the 8
// products of bytes [g(L), g(L) + 8) of the pair's 64 quants (block b's, then block b + 1's),
// g = {0, 8, 32, 40, 16, 24, 48, 56}; then acc += (dw * dx) * float(lane), lane-wise.
//
// Here dpbusd (unsigned x signed bytes, 4 products a lane) makes those lanes in two steps: the
// first 4 bytes of each group, then the last 4. The activations are the unsigned operand, so
// they are stored biased (q + 128) and 128 * sum(w) comes back out: the lanes start from
// -128 * sum(w of the lane's 8 bytes), which dpbusd of the bias bytes against the weights gives
// once per weight pair for all columns. The integers are those of the AVX2 kernel exactly.

// A pair of blocks of one activation column: the biased quants in lane order (first and last 4
// bytes of each lane's group) and the scales as the AVX2 kernel's lanes have them.
struct Q8_0Pair {
  uint8_t first[32];
  uint8_t last[32];
  float d[8];
};
static_assert(sizeof(Q8_0Pair) == 96);

// The f16 scales of blocks (b, b + 1) of rows a and b (zero for a missing b + 1) as floats,
// spread over the lanes by `spread`: indices 0, 1 are row a's blocks, 2, 3 row b's.
template <typename Block>
__m512 pair_scales(const Block* a, const Block* b, bool single, __m512i spread) {
  const __m128i h = _mm_setr_epi16(
      static_cast<int16_t>(a[0].d), static_cast<int16_t>(single ? 0 : a[1].d),
      static_cast<int16_t>(b[0].d), static_cast<int16_t>(single ? 0 : b[1].d), 0, 0, 0, 0);
  return _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(_mm256_cvtph_ps(h)));
}

// The 16 bytes of nibbles of blocks (b, b + 1) of rows a (low half) and b (high half); zeros
// for a missing b + 1. Q4_0 and MXFP4 blocks hold them alike.
template <typename Block>
__m512i nibble_pairs(const Block* a, const Block* b, bool single) {
  const __m128i zero = _mm_setzero_si128();
  const auto q = [](const Block& x) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs));
  };
  const __m256i ra =
      _mm256_inserti128_si256(_mm256_castsi128_si256(q(a[0])), single ? zero : q(a[1]), 1);
  const __m256i rb =
      _mm256_inserti128_si256(_mm256_castsi128_si256(q(b[0])), single ? zero : q(b[1]), 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(ra), rb, 1);
}

size_t q8_0_pair_column_bytes(int64_t k) {
  return static_cast<size_t>((k / kQK8_0 + 1) / 2) * sizeof(Q8_0Pair);
}

// The values of quantize_row_q8_0 (as the AVX2 quantiser computes them), in Q8_0Pair layout.
void quantize_act_q8_0_pairs(const float* x, void* dst, int64_t k) {
  const int64_t nb = k / kQK8_0;
  auto* out = static_cast<Q8_0Pair*>(dst);
  for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
    alignas(64) int8_t q[64] = {};
    float d[2] = {0.0f, 0.0f};
    for (int h = 0; h < 2 && 2 * p + h < nb; ++h) {
      const float* xb = x + (2 * p + h) * kQK8_0;
      const float db = avx2::abs_max(xb, kQK8_0) / 127.0f;
      const float id = db != 0.0f ? 1.0f / db : 0.0f;
      d[h] = avx2::f16(_cvtss_sh(db, _MM_FROUND_TO_NEAREST_INT));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * h),
                         avx2::quant32(xb, _mm256_set1_ps(id)));
    }
    Q8_0Pair& o = out[p];
    const __m512i all = _mm512_load_si512(q);
    const __m512i first_idx =
        _mm512_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14, 1, 3, 9, 11, 5, 7, 13, 15);
    const __m512i lanes = _mm512_xor_si512(_mm512_permutexvar_epi32(first_idx, all),
                                           _mm512_set1_epi8(static_cast<char>(0x80)));
    _mm512_storeu_si512(o.first, lanes);  // first[32] then last[32]
    const float spread[8] = {d[0], d[0], d[1], d[1], d[0], d[0], d[1], d[1]};
    std::memcpy(o.d, spread, sizeof spread);
  }
}

struct Q8_0Kernel {
  static constexpr int kRowPairs = 2;
  static constexpr int kCols = 6;
  static constexpr int64_t kPrepareMinCols = 32;

  // One pair of blocks of two weight rows, ready for every column.
  struct Weights {
    __m512i first, last;  // the signed quants in lane order: row a low half, row b high
    __m512i start;        // -128 * sum of each lane's 8 quants
    __m512 d;             // the block scales spread as the activations' d
  };

  static constexpr size_t kStepBytes = 2 * sizeof(BlockQ8_0);
  static int64_t steps(int64_t k) { return (k / kQK8_0 + 1) / 2; }

  static Weights unpack(const uint8_t* row_a, const uint8_t* row_b, int64_t s, int64_t k) {
    const auto* r0 = reinterpret_cast<const BlockQ8_0*>(row_a) + 2 * s;
    const auto* r1 = reinterpret_cast<const BlockQ8_0*>(row_b) + 2 * s;
    const bool single = 2 * s + 1 == k / kQK8_0;
    const __m512i first_idx = _mm512_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14,  //
                                                16, 18, 24, 26, 20, 22, 28, 30);
    const __m512i last_idx = _mm512_add_epi32(first_idx, _mm512_set1_epi32(1));
    const __m256i zero = _mm256_setzero_si256();
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(load256(r0[0].qs)),
                                         single ? zero : load256(r0[1].qs), 1);
    const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(load256(r1[0].qs)),
                                         single ? zero : load256(r1[1].qs), 1);
    Weights w;
    w.first = _mm512_permutex2var_epi32(a, first_idx, b);
    w.last = _mm512_permutex2var_epi32(a, last_idx, b);
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i sum = _mm512_dpbusd_epi32(
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, w.first), bias, w.last);
    w.start = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
    w.d = pair_scales(r0, r1, single,
                      _mm512_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3));
    return w;
  }

  template <int RP, int C>
  static void step(const Weights* wv, const void* const* xs, int64_t s, __m512 (*acc)[C]) {
    for (int c = 0; c < C; ++c) {
      const Q8_0Pair& x = static_cast<const Q8_0Pair*>(xs[c])[s];
      const __m512i first = both256(x.first);
      const __m512i last = both256(x.last);
      const __m512 dx = both256_ps(x.d);
      for (int r = 0; r < RP; ++r) {
        const __m512i sum = _mm512_dpbusd_epi32(
            _mm512_dpbusd_epi32(wv[r].start, first, wv[r].first), last, wv[r].last);
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wv[r].d, dx), _mm512_cvtepi32_ps(sum), acc[r][c]);
      }
    }
  }
};

// ---- Q4_0 ----
//
// The AVX2 kernel's activations (Q4_0ActPair: the Q8_0 values of a pair of blocks split by
// nibble position, and offsets that take out the nibbles' +8 bias) and its lanes: lane L of a
// pair sums the low- and high-nibble products of bytes 4L..4L+3, minus the offset; then
// acc += (dw * dx) * float(lane). dpbusd adds each nibble register's 4 products a lane, from
// the negated offset.
struct Q4_0Kernel {
  static constexpr int kRowPairs = 2;
  static constexpr int kCols = 6;
  static constexpr int64_t kPrepareMinCols = 32;

  struct Weights {
    __m512i lo, hi;  // the nibbles of blocks (b, b + 1): row a low half, row b high
    __m512 d;        // the block scales over 4 lanes each
  };

  static constexpr size_t kStepBytes = 2 * sizeof(BlockQ4_0);
  static int64_t steps(int64_t k) { return (k / kQK4_0 + 1) / 2; }

  static Weights unpack(const uint8_t* row_a, const uint8_t* row_b, int64_t s, int64_t k) {
    const auto* r0 = reinterpret_cast<const BlockQ4_0*>(row_a) + 2 * s;
    const auto* r1 = reinterpret_cast<const BlockQ4_0*>(row_b) + 2 * s;
    const bool single = 2 * s + 1 == k / kQK4_0;
    const __m512i raw = nibble_pairs(r0, r1, single);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    Weights w;
    w.lo = _mm512_and_si512(raw, m4);
    w.hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    w.d = pair_scales(r0, r1, single,
                      _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    return w;
  }

  template <int RP, int C>
  static void step(const Weights* wv, const void* const* xs, int64_t s, __m512 (*acc)[C]) {
    for (int c = 0; c < C; ++c) {
      const Q4_0ActPair& x = static_cast<const Q4_0ActPair*>(xs[c])[s];
      const __m512i xl = both256(x.lo);
      const __m512i xh = both256(x.hi);
      const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), both256(x.off));
      const __m512 dx = both256_ps(x.d);
      for (int r = 0; r < RP; ++r) {
        const __m512i sum =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, wv[r].lo, xl), wv[r].hi, xh);
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wv[r].d, dx), _mm512_cvtepi32_ps(sum), acc[r][c]);
      }
    }
  }
};

// ---- MXFP4 ----
//
// The AVX2 kernel's activations and lanes are Q4_0's, with signed weights from kMXFP4Values and
// no offsets: lane L of a pair sums the low- and high-nibble products of bytes 4L..4L+3; then
// acc += (dw * dx) * float(lane). dpbusd wants unsigned weights, so they are looked up biased
// by 12 (0..24) and 12 * sum(x) comes back out: the lanes start from -12 * (the lane's sum of
// activations), which is 1.5 times the Q4_0 offset (8 * that sum), exactly.
struct MXFP4Kernel {
  static constexpr int kRowPairs = 2;
  static constexpr int kCols = 6;
  static constexpr int64_t kPrepareMinCols = 32;
  static constexpr int kBias = 12;

  struct Weights {
    __m512i lo, hi;  // the biased values of blocks (b, b + 1): row a low half, row b high
    __m512 d;        // the half scales over 4 lanes each
  };

  static constexpr size_t kStepBytes = 2 * sizeof(BlockMXFP4);
  static int64_t steps(int64_t k) { return (k / kQK_MXFP4 + 1) / 2; }

  static Weights unpack(const uint8_t* row_a, const uint8_t* row_b, int64_t s, int64_t k) {
    const auto* r0 = reinterpret_cast<const BlockMXFP4*>(row_a) + 2 * s;
    const auto* r1 = reinterpret_cast<const BlockMXFP4*>(row_b) + 2 * s;
    const bool single = 2 * s + 1 == k / kQK_MXFP4;
    const __m512i raw = nibble_pairs(r0, r1, single);
    // kMXFP4Values + kBias; a missing block's zero nibbles give kBias against zero activations.
    const __m512i grid = _mm512_broadcast_i32x4(_mm_add_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Values)), _mm_set1_epi8(kBias)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    Weights w;
    w.lo = _mm512_shuffle_epi8(grid, _mm512_and_si512(raw, m4));
    w.hi = _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
    const float* scale = kMXFP4HalfScales.data();
    const __m128 d = _mm_setr_ps(scale[r0[0].e], single ? 0.0f : scale[r0[1].e], scale[r1[0].e],
                                 single ? 0.0f : scale[r1[1].e]);
    w.d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                _mm512_castps128_ps512(d));
    return w;
  }

  template <int RP, int C>
  static void step(const Weights* wv, const void* const* xs, int64_t s, __m512 (*acc)[C]) {
    for (int c = 0; c < C; ++c) {
      const Q4_0ActPair& x = static_cast<const Q4_0ActPair*>(xs[c])[s];
      const __m512i xl = both256(x.lo);
      const __m512i xh = both256(x.hi);
      const __m512i off = both256(x.off);  // 8 * sum, so 12 * sum = off + off / 2
      const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(),
                                             _mm512_add_epi32(off, _mm512_srai_epi32(off, 1)));
      const __m512 dx = both256_ps(x.d);
      for (int r = 0; r < RP; ++r) {
        const __m512i sum =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, wv[r].lo, xl), wv[r].hi, xh);
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wv[r].d, dx), _mm512_cvtepi32_ps(sum), acc[r][c]);
      }
    }
  }
};
static_assert(MXFP4Kernel::kBias == -kMXFP4Values[15]);

}  // namespace
}  // namespace strata::matmul_detail::avx512

namespace strata::matmul_detail {
namespace {

const MatmulKernel kQ8_0Narrow = {avx512::q8_0_pair_column_bytes, avx512::quantize_act_q8_0_pairs,
                                  avx512::pair_rows<avx512::Q8_0Kernel>};
const MatmulKernel kQ4_0Narrow = {q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
                                  avx512::pair_rows<avx512::Q4_0Kernel>};
const MatmulKernel kMXFP4Narrow = {q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
                                   avx512::pair_rows<avx512::MXFP4Kernel>};

}  // namespace

const MatmulKernel kQ8_0Avx512 = {avx512::q8_0_pair_column_bytes,
                                  avx512::quantize_act_q8_0_pairs,
                                  avx512::run_rows<avx512::Q8_0Kernel>,
                                  avx512::work_bytes<avx512::Q8_0Kernel>,
                                  avx512::kMinColumns,
                                  &kQ8_0Narrow};
const MatmulKernel kQ4_0Avx512 = {q4_0_pair_column_bytes,
                                  quantize_act_q4_0_pairs_avx2,
                                  avx512::run_rows<avx512::Q4_0Kernel>,
                                  avx512::work_bytes<avx512::Q4_0Kernel>,
                                  avx512::kMinColumns,
                                  &kQ4_0Narrow};
const MatmulKernel kMXFP4Avx512 = {q4_0_pair_column_bytes,
                                   quantize_act_q4_0_pairs_avx2,
                                   avx512::run_rows<avx512::MXFP4Kernel>,
                                   avx512::work_bytes<avx512::MXFP4Kernel>,
                                   avx512::kMinColumns,
                                   &kMXFP4Narrow};

}  // namespace strata::matmul_detail
