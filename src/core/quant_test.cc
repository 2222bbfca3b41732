#include "core/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype_traits.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quant_rows.h"

namespace strata {
namespace {

std::vector<float> random_row(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

// Largest |x| over [begin, end).
float amax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Slack for the f16 rounding of the stored scales (relative 2^-11, applied to up to a whole
// range) and float arithmetic.
constexpr float kF16Rel = 1.0f / 1024.0f;

// The bound of each type's round trip for element i of the block (of max(block size, 32)
// elements) starting at x. Derivations:
//  q8_0/q8_1: step d = amax/127; rounding costs d/2, the f16 d adds up to 127 * |d - f16(d)|.
//  q4_0: d = amax/8 with the signed extreme at -8; the opposite extreme can only reach +7,
//        so it clamps with an error of up to d; everything else rounds (d/2).
//  q5_0: the same with 16 levels a side: amax/16.
//  q4_1/q5_1: min/max fit of the block, step R/Q (Q = 15 or 31) against the stored f16 step
//        and min: rounding R/(2Q); a clamp at either end costs at most the f16 errors,
//        Q*|d - f16(d)| + |min - f16(min)| <= (R + |min|) 2^-11.
//  iq4_nl: d = amax/127 with the signed extreme on the grid's -127. Neighbouring levels are at
//        most 24 apart (89..113), so rounding costs 12d; the other side can reach +127 where
//        the grid stops at 113: a clamp of 14d.
//  mxfp4: with a = amax in [2^f, 2^(f+1)), the half scale is d = 2^(f-3) and a/d in [8, 16):
//        the grid's gaps reach 4d (8..12), so rounding costs 2d; past 12d an element clamps,
//        by less than 16d - 12d = 4d. Where log2f rounds a just below 2^(f+1) up, d doubles,
//        nothing clamps and rounding costs at most 4d. So 4d = 2^(f-1) either way.
//  q8_K: float d = amax/127, rounding only: d/2.
//  q4_K/q5_K: per sub-block of 32 range R (including 0) and min M; step R/Q (Q = 15 or 31).
//        6-bit scales relative to the largest: the step is off by at most dS/2 (dS = Rmax/(63Q)),
//        the offset by dM/2 (dM = Mmax/63). An element rounds (step/2) or, past the grid's
//        end, clamps (dM/2 + Q*dS/2). The sum of both is a safe bound.
//  q2_K: the same with sub-blocks of 16, Q = 3 and 4-bit scales and mins (15 levels).
//  q6_K: per sub-block of 16, step A/31 with quants -31..31; 8-bit scales relative to the
//        largest, off by dS/2 (dS = Amax/(31*127)); rounding step/2 plus clamping 31*dS/2.
//  q3_K: per sub-block of 16 with amax a, ideal step a/4 (extreme on -4, quants -4..3); the
//        signed 6-bit scale has quantum D = Amax/128 and lands within 1.05 D of the ideal (half
//        a quantum, or a whole one where +32 clamps to 31, plus the f16 error). An element
//        rounds (step/2), clamps at +3 (step + 4 * 1.05 D) or at -4 (4 * 1.05 D), or, with a
//        zero scale, is the whole a < 2 D: at most a/4 + 5.3 D.
//  iq4_xs: per sub-block of 32 with amax a, ideal step a/127 and quantum D = Amax/(127*32),
//        step within 1.05 D as for q3_K: rounding 12 steps, clamping 14 steps plus 127 * 1.05 D,
//        a zero scale costs a < 64 D: at most 14 * (a/127 + 1.05 D) + 134 D.
using Bound = float (*)(const float* x, int i);

float bound_f32(const float*, int) { return 0.0f; }
float bound_f16(const float* x, int) { return amax(x, 32) / 2048.0f; }  // half an ulp: 2^-11
float bound_bf16(const float* x, int) { return amax(x, 32) / 256.0f; }  // half an ulp: 2^-8

float bound_q8_0(const float* x, int) {
  const float a = amax(x, 32);
  return a / 254.0f + a * kF16Rel;
}

template <int kSide>
float bound_symmetric(const float* x, int) {
  const float a = amax(x, 32);
  return a / kSide + a * kF16Rel;
}

template <int kQ>
float bound_min_max(const float* x, int) {
  const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
  return (hi - lo) / (2.0f * kQ) + (hi - lo + std::fabs(lo)) * kF16Rel;
}

float bound_iq4_nl(const float* x, int) {
  const float a = amax(x, 32);
  return 14.0f * a / 127.0f + a * kF16Rel;
}

float bound_mxfp4(const float* x, int) {
  const float a = amax(x, 32);
  return a > 0.0f ? std::ldexp(1.0f, std::ilogb(a) - 1) : 0.0f;
}

float bound_q8_k(const float* x, int) { return amax(x, 256) / 254.0f * 1.001f; }

// kSub sub-blocks of 256 / kSub elements, quants 0..kQ, scales and mins of kLevels levels.
template <int kSub, int kQ, int kLevels>
float bound_qk_min(const float* x, int) {
  const int len = 256 / kSub;
  const float q = kQ;
  float rmax = 0.0f, mmax = 0.0f;
  for (int s = 0; s < kSub; ++s) {
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < len; ++j) {
      lo = std::min(lo, x[len * s + j]);
      hi = std::max(hi, x[len * s + j]);
    }
    rmax = std::max(rmax, hi - lo);
    mmax = std::max(mmax, -lo);
  }
  const float ds = rmax / (kLevels * q), dm = mmax / kLevels;
  return (rmax / q + ds) / 2.0f + dm / 2.0f + q * ds / 2.0f + (rmax + mmax) * kF16Rel;
}

float bound_q6_k(const float* x, int) {
  float a = 0.0f;
  for (int s = 0; s < 16; ++s) a = std::max(a, amax(x + 16 * s, 16));
  const float ds = a / (31.0f * 127.0f);
  return (a / 31.0f + ds) / 2.0f + 31.0f * ds / 2.0f + a * kF16Rel;
}

float bound_q3_k(const float* x, int i) {
  const float big = amax(x, 256), a = amax(x + i / 16 * 16, 16);
  const float quantum = big / 128.0f;
  return a / 4.0f + 5.3f * quantum + big * kF16Rel;
}

float bound_iq4_xs(const float* x, int i) {
  const float big = amax(x, 256), a = amax(x + i / 32 * 32, 32);
  const float quantum = big / (127.0f * 32.0f);
  return 14.0f * (a / 127.0f + 1.05f * quantum) + 134.0f * quantum + big * kF16Rel;
}

// One row per dtype with conversions.
struct RoundTripCase {
  DType dtype;
  Bound bound;
};

const RoundTripCase kRoundTrips[] = {
    {DType::kF32, bound_f32},
    {DType::kF16, bound_f16},
    {DType::kBF16, bound_bf16},
    {DType::kQ8_0, bound_q8_0},
    {DType::kQ8_1, bound_q8_0},
    {DType::kQ4_0, bound_symmetric<8>},
    {DType::kQ5_0, bound_symmetric<16>},
    {DType::kQ4_1, bound_min_max<15>},
    {DType::kQ5_1, bound_min_max<31>},
    {DType::kIQ4_NL, bound_iq4_nl},
    {DType::kMXFP4, bound_mxfp4},
    {DType::kQ8_K, bound_q8_k},
    {DType::kQ2_K, bound_qk_min<16, 3, 15>},
    {DType::kQ3_K, bound_q3_k},
    {DType::kQ4_K, bound_qk_min<8, 15, 63>},
    {DType::kQ5_K, bound_qk_min<8, 31, 63>},
    {DType::kQ6_K, bound_q6_k},
    {DType::kIQ4_XS, bound_iq4_xs},
};

TEST(QuantTest, EveryConvertibleDtypeHasARoundTripCase) {
  size_t convertible = 0;
  for (const DTypeTraits& t : dtype_traits_all()) {
    if (!dtype_can_convert(t.dtype)) continue;  // a device layout
    ++convertible;
    bool found = false;
    for (const RoundTripCase& c : kRoundTrips) found = found || c.dtype == t.dtype;
    EXPECT_TRUE(found) << dtype_name(t.dtype);
  }
  EXPECT_EQ(std::size(kRoundTrips), convertible);
}

class QuantRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTrip, ErrorWithinBound) {
  const DType t = GetParam().dtype;
  const int64_t bs = std::max<int64_t>(dtype_block_size(t), 32);
  const int64_t n = 4 * 256;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::vector<float> x = random_row(n, seed, 0.05f * static_cast<float>(seed));
    // An all-zero block and a block with one outlier: the degenerate and the skewed cases.
    std::fill(x.begin(), x.begin() + 256, 0.0f);
    x[300] = 3.0f;
    const std::vector<float> y = round_trip(t, x);
    for (int64_t b = 0; b < n; b += bs) {
      for (int64_t i = b; i < b + bs; ++i) {
        const float bound = GetParam().bound(&x[b], static_cast<int>(i - b));
        ASSERT_LE(std::fabs(x[i] - y[i]), bound)
            << dtype_name(t) << " seed " << seed << " element " << i << " x " << x[i];
      }
    }
    for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t) << " zero block";
  }
}

TEST_P(QuantRoundTrip, Deterministic) {
  const DType t = GetParam().dtype;
  const std::vector<float> x = random_row(512, 7, 1.0f);
  std::vector<uint8_t> a(dtype_row_bytes(t, 512), 0x11), b(dtype_row_bytes(t, 512), 0xee);
  quantize_row(t, x.data(), a.data(), 512);
  quantize_row(t, x.data(), b.data(), 512);
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip, ::testing::ValuesIn(kRoundTrips),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.dtype));
                         });

TEST(QuantTest, CanConvert) {
  EXPECT_TRUE(dtype_can_convert(DType::kQ4_K));
  EXPECT_TRUE(dtype_can_convert(DType::kQ2_K));
  EXPECT_TRUE(dtype_can_convert(DType::kQ8_1));  // an activation format: conversions only
  EXPECT_FALSE(dtype_info(DType::kQ8_1).has_kernels);
  EXPECT_FALSE(dtype_can_convert(DType::kIQ2_XXS));
}

// ---- Hand-built blocks: the expectation comes from the format's definition, not the code ----

std::vector<float> dequant(DType t, const void* block, int64_t n) {
  std::vector<float> y(n);
  dequantize_row(t, block, y.data(), n);
  return y;
}

TEST(QuantKnownBytes, Q8_0) {
  BlockQ8_0 b;
  b.d = 0x3800;  // 0.5
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i * 8 - 128);
  const auto y = dequant(DType::kQ8_0, &b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], (i * 8 - 128) * 0.5f) << i;
}

TEST(QuantKnownBytes, Q4_0) {
  uint8_t raw[18] = {0x00, 0x40};  // d = 2.0
  for (int i = 0; i < 16; ++i) raw[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const auto y = dequant(DType::kQ4_0, raw, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], (i - 8) * 2.0f) << i;
    EXPECT_EQ(y[16 + i], (7 - i) * 2.0f) << i;
  }
}

// Scales and mins of the 8 sub-blocks, chosen so that the last four use their top bits.
constexpr uint8_t kSc[8] = {1, 2, 63, 4, 49, 17, 33, 63};
constexpr uint8_t kMn[8] = {0, 5, 10, 63, 50, 31, 16, 1};

// 12 bytes built by hand from the layout: bytes 0..3 scale[0..3] | (scale[4..7] >> 4) << 6;
// bytes 4..7 min[0..3] | (min[4..7] >> 4) << 6; bytes 8..11 low nibbles of scale / min 4..7.
void hand_pack(uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(kSc[j] | ((kSc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(kMn[j] | ((kMn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((kSc[j + 4] & 15) | ((kMn[j + 4] & 15) << 4));
  }
}

TEST(QuantKnownBytes, Q4_KScaleUnpacking) {
  uint8_t s[12];
  hand_pack(s);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    kscale_min(j, s, &sc, &mn);
    EXPECT_EQ(sc, kSc[j]) << j;
    EXPECT_EQ(mn, kMn[j]) << j;
  }
}

TEST(QuantKnownBytes, Q4_K) {
  BlockQ4_K b;
  b.d = 0x3c00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  hand_pack(b.scales);
  // Element e has quant e % 16.
  for (int c = 0; c < 4; ++c) {
    for (int t = 0; t < 32; ++t) {
      b.qs[32 * c + t] =
          static_cast<uint8_t>(((64 * c + t) % 16) | (((64 * c + 32 + t) % 16) << 4));
    }
  }
  const auto y = dequant(DType::kQ4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 1.0f * kSc[e / 32] * (e % 16) - 0.5f * kMn[e / 32]) << e;
  }
}

TEST(QuantKnownBytes, Q5_K) {
  BlockQ5_K b;
  b.d = 0x3c00;
  b.dmin = 0x3800;
  hand_pack(b.scales);
  // Element e has quant (e * 7) % 32: low 4 bits in qs as for Q4_K, bit 4 in qh[e%32] bit e/32.
  std::memset(b.qh, 0, sizeof b.qh);
  for (int c = 0; c < 4; ++c) {
    for (int t = 0; t < 32; ++t) {
      const int lo = ((64 * c + t) * 7) % 32, hi = ((64 * c + 32 + t) * 7) % 32;
      b.qs[32 * c + t] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      b.qh[t] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
  const auto y = dequant(DType::kQ5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 1.0f * kSc[e / 32] * ((e * 7) % 32) - 0.5f * kMn[e / 32]) << e;
  }
}

TEST(QuantKnownBytes, Q6_K) {
  BlockQ6_K b;
  b.d = 0x3400;  // 0.25
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -(s + 1) : s + 100);
  // Element e has quant (e * 5) % 64. Within each half of 128 (offset h), for l < 32:
  // ql[l] = q[l] low | q[l+64] low << 4, ql[l+32] = q[l+32] low | q[l+96] low << 4,
  // qh[l] = q[l]>>4 | q[l+32]>>4 << 2 | q[l+64]>>4 << 4 | q[l+96]>>4 << 6.
  auto q = [](int e) { return (e * 5) % 64; };
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int o = 128 * h + l;
      b.ql[64 * h + l] = static_cast<uint8_t>((q(o) & 15) | ((q(o + 64) & 15) << 4));
      b.ql[64 * h + l + 32] = static_cast<uint8_t>((q(o + 32) & 15) | ((q(o + 96) & 15) << 4));
      b.qh[32 * h + l] = static_cast<uint8_t>((q(o) >> 4) | ((q(o + 32) >> 4) << 2) |
                                              ((q(o + 64) >> 4) << 4) | ((q(o + 96) >> 4) << 6));
    }
  }
  const auto y = dequant(DType::kQ6_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.25f * b.scales[e / 16] * (q(e) - 32)) << e;
  }
}

TEST(QuantKnownBytes, Q8_KBsums) {
  const std::vector<float> x = random_row(512, 3, 1.0f);
  std::vector<BlockQ8_K> b(2);
  quantize_row_q8_k(x.data(), b.data(), 512);
  for (const BlockQ8_K& blk : b) {
    int8_t peak = 0;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) {
        sum += blk.qs[16 * g + j];
        if (std::abs(blk.qs[16 * g + j]) > std::abs(peak)) peak = blk.qs[16 * g + j];
      }
      EXPECT_EQ(blk.bsums[g], sum) << g;
    }
    EXPECT_EQ(std::abs(peak), 127);  // the largest element uses the full range
  }
}

TEST(QuantKnownBytes, Q4_1) {
  BlockQ4_1 b;
  b.d = 0x3800;  // 0.5
  b.m = 0xbc00;  // -1.0
  for (int i = 0; i < 16; ++i) b.qs[i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const auto y = dequant(DType::kQ4_1, &b, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], i * 0.5f - 1.0f) << i;
    EXPECT_EQ(y[16 + i], (15 - i) * 0.5f - 1.0f) << i;
  }
}

// Element j has quant (7j + 3) % 32: its low 4 bits are nibbles as in Q4_0, bit 4 is bit j of
// qh (a little-endian 32-bit word).
void hand_pack_q5(uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = (7 * j + 3) % 32, hi = (7 * (j + 16) + 3) % 32;
    qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
    high |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(high >> (8 * i));
}

TEST(QuantKnownBytes, Q5_0AndQ5_1) {
  BlockQ5_0 a;
  a.d = 0x4000;  // 2.0
  hand_pack_q5(a.qs, a.qh);
  BlockQ5_1 b;
  b.d = 0x3400;  // 0.25
  b.m = 0x3c00;  // 1.0
  hand_pack_q5(b.qs, b.qh);
  const auto y0 = dequant(DType::kQ5_0, &a, 32);
  const auto y1 = dequant(DType::kQ5_1, &b, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y0[j], ((7 * j + 3) % 32 - 16) * 2.0f) << j;
    EXPECT_EQ(y1[j], ((7 * j + 3) % 32) * 0.25f + 1.0f) << j;
  }
}

// The published IQ4_NL grid, written out here independently of quant_blocks.h.
constexpr int kGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};

TEST(QuantKnownBytes, IQ4_NL) {
  uint8_t raw[18] = {0x00, 0x38};  // d = 0.5
  for (int i = 0; i < 16; ++i) raw[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const auto y = dequant(DType::kIQ4_NL, raw, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], kGrid[i] * 0.5f) << i;
    EXPECT_EQ(y[16 + i], kGrid[15 - i] * 0.5f) << i;
  }
}

// An E2M1 code's value from its bits as the OCP MX format defines them (sign, 2 exponent bits of
// bias 1, 1 mantissa bit; exponent 0 is subnormal), independently of kMXFP4Values.
double e2m1(int code) {
  const int exp = (code >> 1) & 3, man = code & 1;
  const double mag = exp == 0 ? 0.5 * man : std::ldexp(1.0 + 0.5 * man, exp - 1);
  return (code & 8) != 0 ? -mag : mag;
}

// Element i: code i in the low nibble of byte i, element 16 + i: code 15 - i in the high one;
// the value is e2m1(code) times the E8M0 scale 2^(e - 127), exact in double and in float.
TEST(QuantKnownBytes, MXFP4) {
  for (int e : {0, 1, 2, 100, 127, 130, 200, 252}) {
    uint8_t raw[17] = {static_cast<uint8_t>(e)};
    for (int i = 0; i < 16; ++i) raw[1 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
    const auto y = dequant(DType::kMXFP4, raw, 32);
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(y[i], static_cast<float>(std::ldexp(e2m1(i), e - 127))) << "e " << e << " " << i;
      EXPECT_EQ(y[16 + i], static_cast<float>(std::ldexp(e2m1(15 - i), e - 127)))
          << "e " << e << " " << 16 + i;
    }
  }
  // e = 255 is NaN in the OCP format; GGML reads it as the scale 2^128, and so does strata.
  uint8_t raw[17] = {255, 0x01};
  const auto y = dequant(DType::kMXFP4, raw, 32);
  EXPECT_EQ(y[0], std::ldexp(1.0f, 127));
  EXPECT_EQ(y[16], 0.0f);
}

// GGML's quantiser (quantize_row_mxfp4_ref): e = floor(log2(amax)) - 2 + 127, then each element
// takes the code nearest to it, the lowest code on ties.
TEST(QuantKnownBytes, MXFP4Quantiser) {
  // amax 60: e = 5 - 2 + 127 = 130, half scale 4, levels 0 4 8 12 16 24 32 48.
  float x[32] = {60.0f, -60.0f, 20.0f, -20.0f, 2.0f, -2.0f, 24.0f, -0.0f, 13.0f, 47.0f};
  BlockMXFP4 b;
  quantize_row(DType::kMXFP4, x, &b, 32);
  EXPECT_EQ(b.e, 130);
  // 60 clamps to 48 (code 7); 20 ties 16 and 24 (codes 4, 5): 4; 2 ties 0 and 4: 0; -2 ties
  // 0 (code 0) and -4 (code 9): 0; -0 is 0 (code 0, not 8); 13 is nearer 12 than 16.
  const int codes[10] = {7, 15, 4, 12, 0, 0, 5, 0, 3, 7};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.qs[i] & 0xf, codes[i]) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b.qs[i] >> 4, 0) << 16 + i;

  // A block on the grid of one scale comes back exactly: e2m1 values times 2^-3.
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(std::ldexp(e2m1((i * 5) % 16), -3));
  const auto y = round_trip(DType::kMXFP4, std::vector<float>(x, x + 32));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;

  // The exponent's ends, where GGML's unchecked cast to uint8_t would be undefined: zero, a
  // subnormal block, the largest float, infinity; a NaN is ignored by the maximum.
  const std::pair<float, int> ends[] = {{0.0f, 0},
                                        {1e-42f, 0},
                                        {3e38f, 252},
                                        {std::numeric_limits<float>::infinity(), 254},
                                        {std::numeric_limits<float>::quiet_NaN(), 125}};
  for (const auto& [v, e] : ends) {
    float z[32] = {};
    z[3] = v;
    z[4] = std::isnan(v) ? 1.0f : 0.0f;
    quantize_row(DType::kMXFP4, z, &b, 32);
    EXPECT_EQ(b.e, e) << v;
  }
}

// Element e = 128h + 32j + l of a Q2_K / Q3_K super-block keeps its low 2 bits at bits 2j of
// byte 32h + l.
void hand_pack_2bit(const int* q, uint8_t* qs) {
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    if (j == 0) qs[32 * h + l] = 0;
    qs[32 * h + l] = static_cast<uint8_t>(qs[32 * h + l] | (q[e] & 3) << (2 * j));
  }
}

TEST(QuantKnownBytes, Q2_K) {
  uint8_t raw[84];
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 5 + e / 7) % 4;
  for (int s = 0; s < 16; ++s) raw[s] = static_cast<uint8_t>(s | ((15 - s) << 4));  // scale | min
  hand_pack_2bit(q, raw + 16);
  raw[80] = 0x00, raw[81] = 0x3c;  // d = 1.0
  raw[82] = 0x00, raw[83] = 0x38;  // dmin = 0.5
  const auto y = dequant(DType::kQ2_K, raw, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 1.0f * (e / 16) * q[e] - 0.5f * (15 - e / 16)) << e;
  }
}

TEST(QuantKnownBytes, Q3_K) {
  uint8_t raw[110] = {};
  int q[256], sc[16];
  for (int e = 0; e < 256; ++e) q[e] = (e * 3 + e / 11) % 8;  // 0..7, value q - 4
  for (int s = 0; s < 16; ++s) sc[s] = (s * 13 + 5) % 64;     // 6 bits, value sc - 32
  // hmask[l] bit (e / 32) is bit 2 of element e's quant (l = e % 32).
  for (int e = 0; e < 256; ++e) raw[e % 32] |= static_cast<uint8_t>((q[e] >> 2) << (e / 32));
  hand_pack_2bit(q, raw + 32);
  // scales at 96: low nibbles of 0..7 in bytes 0..7, of 8..15 in their high nibbles; the top 2
  // bits of scale s at bits 2 * (s / 4) of byte 8 + s % 4.
  uint8_t* p = raw + 96;
  for (int s = 0; s < 16; ++s) {
    p[s % 8] |= static_cast<uint8_t>((sc[s] & 15) << (s < 8 ? 0 : 4));
    p[8 + s % 4] |= static_cast<uint8_t>((sc[s] >> 4) << (2 * (s / 4)));
  }
  raw[108] = 0x00, raw[109] = 0x38;  // d = 0.5
  const auto y = dequant(DType::kQ3_K, raw, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.5f * (sc[e / 16] - 32) * (q[e] - 4)) << e;
}

TEST(QuantKnownBytes, IQ4_XS) {
  uint8_t raw[136] = {0x00, 0x3c};  // d = 1.0
  int ls[8];
  uint16_t high = 0;
  for (int i = 0; i < 8; ++i) {
    ls[i] = (i * 23 + 7) % 64;
    raw[4 + i / 2] |= static_cast<uint8_t>((ls[i] & 15) << (4 * (i % 2)));  // scales_l
    high |= static_cast<uint16_t>((ls[i] >> 4) << (2 * i));                 // scales_h
  }
  raw[2] = static_cast<uint8_t>(high & 0xff);
  raw[3] = static_cast<uint8_t>(high >> 8);
  // Sub-block i: elements 32i + j (j < 16) in the low nibble of qs[16i + j], 32i + 16 + j in
  // the high one; element e has level (e * 7) % 16.
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 16; ++j) {
      raw[8 + 16 * i + j] =
          static_cast<uint8_t>(((32 * i + j) * 7) % 16 | ((((32 * i + 16 + j) * 7) % 16) << 4));
    }
  }
  const auto y = dequant(DType::kIQ4_XS, raw, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 1.0f * (ls[e / 32] - 32) * kGrid[(e * 7) % 16]) << e;
  }
}

TEST(QuantKnownBytes, Q8_1CarriesTheBlockSum) {
  const std::vector<float> x = random_row(64, 5, 1.0f);
  BlockQ8_1 b[2];
  BlockQ8_0 ref[2];
  quantize_row(DType::kQ8_1, x.data(), b, 64);
  quantize_row(DType::kQ8_0, x.data(), ref, 64);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(b[i].d, ref[i].d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(b[i].qs[j], ref[i].qs[j]);
      sum += b[i].qs[j];
    }
    EXPECT_EQ(b[i].s, f32_to_f16(f16_to_f32(b[i].d) * static_cast<float>(sum)));
  }
}

TEST(QuantKnownBytes, F16AndBF16) {
  const uint16_t h[3] = {0x3c00, 0xc000, 0x7bff};  // 1, -2, 65504
  const auto y = dequant(DType::kF16, h, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 65504.0f);
  const uint16_t b[2] = {0x3f80, 0xc0a0};  // 1, -5
  const auto z = dequant(DType::kBF16, b, 2);
  EXPECT_EQ(z[0], 1.0f);
  EXPECT_EQ(z[1], -5.0f);
}

}  // namespace
}  // namespace strata
