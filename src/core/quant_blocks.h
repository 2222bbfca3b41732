// The GGUF block layouts, byte for byte as GGML defines them (ggml-common.h). Files written by
// llama.cpp are read straight into these structs, so field order and sizes are part of the
// format: the static_asserts below pin them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace strata {

inline constexpr int kQK8_0 = 32;  // elements per block of the legacy formats
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK4_NL = 32;
inline constexpr int kQK_MXFP4 = 32;
inline constexpr int kQKK = 256;         // elements per K-quant super-block
inline constexpr int kKScaleBytes = 12;  // 8 six-bit scales + 8 six-bit mins

// x = qs[i] * d
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQK8_0];
};

// x = ((nibble) - 8) * d; low nibbles of qs[0..16) are elements 0..15, high nibbles 16..31.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[kQK4_0 / 2];
};

// x = q * d + m, q in 0..15, nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[kQK4_1 / 2];
};

// x = (q - 16) * d, q in 0..31: the low 4 bits as Q4_0's nibbles; bit 4 of element j is bit j
// of qh read as a little-endian uint32.
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};

// x = q * d + m, q in 0..31 stored as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};

// As Q8_0 plus s = d * sum(qs) (f16): GGML's activation format for Q4_1 / Q5_1.
struct BlockQ8_1 {
  uint16_t d;  // f16
  uint16_t s;  // f16
  int8_t qs[kQK8_1];
};

// The 16 levels of IQ4_NL and IQ4_XS: a non-linear 4-bit grid, denser near zero, where
// weights are.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// x = d * kIQ4NLValues[q], nibbles as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;  // f16
  uint8_t qs[kQK4_NL / 2];
};

// The 16 values of an MXFP4 code (OCP MX FP4, E2M1: sign, 2 exponent bits, 1 mantissa bit),
// doubled so that they are integers: 2 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}, then the negatives.
inline constexpr int8_t kMXFP4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// x = kMXFP4Values[q] * mxfp4_half_scale(e), nibbles as Q4_0: OCP MXFP4's 32 E2M1 codes with
// their shared E8M0 exponent e (the scale 2^(e - 127)).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK_MXFP4 / 2];
};

// Half the E8M0 scale, 2^(e - 128), as GGML computes it (GGML_E8M0_TO_FP32_HALF): exact,
// subnormal for e < 2. e = 255, NaN in the OCP format, is 2^127 like any other exponent.
constexpr float mxfp4_half_scale(uint8_t e) {
  return std::bit_cast<float>(e < 2 ? uint32_t{0x00200000} << e
                                    : static_cast<uint32_t>(e - 1) << 23);
}

// mxfp4_half_scale of every exponent: the SIMD kernels broadcast a scale with one load.
inline constexpr auto kMXFP4HalfScales = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[e] = mxfp4_half_scale(static_cast<uint8_t>(e));
  return t;
}();

// 16 sub-blocks of 16: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in 0..3.
// Element e = 128h + 32j + l (h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32h + l].
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;     // f16, scale of the scales
  uint16_t dmin;  // f16, scale of the mins
};

// 16 sub-blocks of 16: x = d * (scale[s] - 32) * (q - 4), q in 0..7. The low 2 bits of q are
// laid out as Q2_K's; bit 2 of element e = 128h + 32j + l is bit 4h + j of hmask[l]. The 6-bit
// scales are packed as in q3_k_scale().
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;  // f16
};

// 8 sub-blocks of 32: x = d * (ls - 32) * kIQ4NLValues[q]; sub-block i has its nibbles in
// qs[16i .. 16i + 16) as one Q4_0 block, and its 6-bit ls in a nibble of scales_l (low 4 bits)
// and two bits of scales_h (high 2), see iq4_xs_scale().
struct BlockIQ4_XS {
  uint16_t d;  // f16
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

// 8 sub-blocks of 32: x = d * scale[s] * q - dmin * min[s], q in 0..15. Element e of the
// super-block is sub-block e / 32; qs[32 * c + t] holds element 64c + t in its low nibble and
// 64c + 32 + t in its high nibble. Scales and mins are packed as in kscale_min().
struct BlockQ4_K {
  uint16_t d;     // f16, scale of the scales
  uint16_t dmin;  // f16, scale of the mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};

// As Q4_K, plus a fifth bit: bit (e / 32) of qh[e % 32] adds 16 to element e's quant.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// 16 sub-blocks of 16: x = d * scales[e / 16] * (q - 32), q in 0..63 built from 4 low bits
// in ql and 2 high bits in qh (see dequantize_q6_k for the interleaving).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;  // f16
};

// Activations for the K-quant dot products (never stored in files): x = d * qs[i], and
// bsums[g] = sum of qs[16g .. 16g+16) so that the mins' contribution needs no per-element work.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17 && alignof(BlockMXFP4) == 1);
static_assert(alignof(BlockQ8_0) == 2 && alignof(BlockQ4_K) == 2 && alignof(BlockQ6_K) == 2);
static_assert(alignof(BlockQ5_0) == 2 && alignof(BlockQ3_K) == 2 && alignof(BlockIQ4_XS) == 2);
static_assert(offsetof(BlockQ5_1, qh) == 4 && offsetof(BlockQ2_K, d) == 80 &&
              offsetof(BlockQ3_K, scales) == 96 && offsetof(BlockIQ4_XS, qs) == 8);

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block: the first four keep their
// 6 bits in bytes 0..3 / 4..7; the last four keep their low 4 bits in bytes 8..11 and their top
// 2 bits in the spare top bits of bytes 0..7.
inline void kscale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 6-bit scale (0..63, stored with a +32 bias) of sub-block s (0..15) of a Q3_K super-block:
// low 4 bits in the low nibble of byte s (s < 8) or the high nibble of byte s - 8; high 2 bits
// at bit 2 * (s / 4) of byte 8 + s % 4.
inline int q3_k_scale(const uint8_t* q, int s) {
  const int lo = s < 8 ? q[s] & 0xf : q[s - 8] >> 4;
  const int hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
  return lo | (hi << 4);
}

// The 6-bit ls (0..63) of sub-block i (0..7) of an IQ4_XS super-block.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int i) {
  return ((b.scales_l[i / 2] >> (4 * (i % 2))) & 0xf) | (((b.scales_h >> (2 * i)) & 3) << 4);
}

}  // namespace strata
