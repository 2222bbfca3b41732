// Rows of the 32-element block formats: q8_0, q8_1, q4_0, q4_1, q5_0, q5_1, iq4_nl and mxfp4.
// Each block is one scale (and min) and its quants; a row is its blocks in order.
//
// The quantisers are simple deterministic fits, not GGML's searches: a little more error, the
// same format. Those added after q4_0 quantise against the stored (f16-rounded) scale and min,
// so the rounding of the scale is not added on top of the quant's. mxfp4 is the exception: its
// quantiser is GGML's reference one, byte for byte.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quant_rows.h"
#include "core/quant_util.h"

namespace strata {

namespace {

using quant_util::abs_max;
using quant_util::iq4_nearest;
using quant_util::round_clamp;
using quant_util::signed_max;

// Quant of element j of a 32-element block from its 4 low bits in qs and bit 4 in qh.
inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4; }
inline int fifth_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// Writes 32 quants (0..15, or 0..31 with qh) in the nibble (and high-bit) layout.
void pack_nibbles(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
  if (qh == nullptr) return;
  std::memset(qh, 0, 4);
  for (int j = 0; j < 32; ++j) qh[j / 8] |= static_cast<uint8_t>((q[j] >> 4) << (j % 8));
}

// Min/max fit of 32 elements to q in 0..kMax: x ~ q * d + m with m the minimum.
template <int kMax>
void quantize_min_block(const float* x, uint16_t* d16, uint16_t* m16, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::fmin(lo, x[j]);
    hi = std::fmax(hi, x[j]);
  }
  *d16 = f32_to_f16((hi - lo) / kMax);
  *m16 = f32_to_f16(lo);
  const float d = f16_to_f32(*d16), m = f16_to_f32(*m16);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<uint8_t>(round_clamp((x[j] - m) * id, 0.0f, static_cast<float>(kMax)));
  }
}

}  // namespace

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  const float* x = src;
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    const float d = abs_max(x, kQK8_0) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(round_clamp(x[j] * id, -127.0f, 127.0f));
    }
  }
}

void dequantize_row_q8_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = b[i].qs[j] * d;
  }
}

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  const float* x = src;
  auto* y = static_cast<BlockQ4_0*>(dst);
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK4_0) {
    // The signed extreme maps to -8 so that it is exact; the other side reaches only +7.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int lo = round_clamp(x[j] * id + 8.0f, 0.0f, 15.0f);
      const int hi = round_clamp(x[j + kQK4_0 / 2] * id + 8.0f, 0.0f, 15.0f);
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row_q4_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = ((b[i].qs[j] & 0xf) - 8) * d;
      y[j + kQK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// ---- Q8_1 ----

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK8_1; ++i, src += kQK8_1) {
    BlockQ8_0 b;  // the values are Q8_0's; the sum rides along
    quantize_row_q8_0(src, &b, kQK8_0);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) sum += b.qs[j];
    y[i].d = b.d;
    y[i].s = f32_to_f16(f16_to_f32(b.d) * static_cast<float>(sum));
    std::memcpy(y[i].qs, b.qs, sizeof b.qs);
  }
}

void dequantize_row_q8_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK8_1; ++i, y += kQK8_1) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = b[i].qs[j] * d;
  }
}

// ---- Q4_1 / Q5_1 ----

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  uint8_t q[32];
  for (int64_t i = 0; i < n / kQK4_1; ++i, src += kQK4_1) {
    quantize_min_block<15>(src, &y[i].d, &y[i].m, q);
    pack_nibbles(q, y[i].qs, nullptr);
  }
}

void dequantize_row_q4_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK4_1; ++i, y += kQK4_1) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK4_1; ++j) y[j] = nibble(b[i].qs, j) * d + m;
  }
}

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  uint8_t q[32];
  for (int64_t i = 0; i < n / kQK5_1; ++i, src += kQK5_1) {
    quantize_min_block<31>(src, &y[i].d, &y[i].m, q);
    pack_nibbles(q, y[i].qs, y[i].qh);
  }
}

void dequantize_row_q5_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK5_1; ++i, y += kQK5_1) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK5_1; ++j) {
      y[j] = (nibble(b[i].qs, j) | fifth_bit(b[i].qh, j) << 4) * d + m;
    }
  }
}

// ---- Q5_0 ----

// As Q4_0: the signed extreme maps to -16 exactly; the other side reaches only +15.
void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  uint8_t q[32];
  for (int64_t i = 0; i < n / kQK5_0; ++i, src += kQK5_0) {
    y[i].d = f32_to_f16(signed_max(src, kQK5_0) / -16.0f);
    const float d = f16_to_f32(y[i].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK5_0; ++j) {
      q[j] = static_cast<uint8_t>(round_clamp(src[j] * id + 16.0f, 0.0f, 31.0f));
    }
    pack_nibbles(q, y[i].qs, y[i].qh);
  }
}

void dequantize_row_q5_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK5_0; ++i, y += kQK5_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK5_0; ++j) {
      y[j] = ((nibble(b[i].qs, j) | fifth_bit(b[i].qh, j) << 4) - 16) * d;
    }
  }
}

// ---- IQ4_NL ----

// The signed extreme maps to the grid's -127 exactly; every element then takes the nearest
// level. The grid reaches only +113 on the other side, where elements may clamp.
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  uint8_t q[32];
  for (int64_t i = 0; i < n / kQK4_NL; ++i, src += kQK4_NL) {
    y[i].d = f32_to_f16(signed_max(src, kQK4_NL) / static_cast<float>(kIQ4NLValues[0]));
    const float d = f16_to_f32(y[i].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK4_NL; ++j) {
      q[j] = static_cast<uint8_t>(iq4_nearest(src[j] * id));
    }
    pack_nibbles(q, y[i].qs, nullptr);
  }
}

void dequantize_row_iq4_nl(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK4_NL; ++i, y += kQK4_NL) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK4_NL; ++j) y[j] = d * kIQ4NLValues[nibble(b[i].qs, j)];
  }
}

// ---- MXFP4 ----

namespace {

// The code whose value (times d) is nearest to x; the lowest code on ties, as GGML's
// best_index_mxfp4, so that 0 is +0 (code 0, never 8) and a tie takes the smaller magnitude.
int mxfp4_nearest(float x, float d) {
  int best = 0;
  float best_err = std::fabs(kMXFP4Values[0] * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kMXFP4Values[i] * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

// GGML's quantize_row_mxfp4_ref: the exponent puts the largest magnitude a in [8, 16) times the
// half scale d = 2^(floor(log2 a) - 3), where the grid stops at 12; values beyond clamp to
// +-12d. GGML casts the exponent to uint8_t unchecked; here it is clamped first (to 0 for a
// below 2^-125, where GGML's cast is undefined, and to 254 for an infinite a).
void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  uint8_t q[32];
  for (int64_t i = 0; i < n / kQK_MXFP4; ++i, src += kQK_MXFP4) {
    const float amax = abs_max(src, kQK_MXFP4);
    float e = 0.0f;
    if (amax > 0.0f) e = std::fmin(std::fmax(std::floor(std::log2(amax)) - 2 + 127, 0.0f), 254.0f);
    y[i].e = static_cast<uint8_t>(e);
    const float d = mxfp4_half_scale(y[i].e);
    for (int j = 0; j < kQK_MXFP4; ++j) q[j] = static_cast<uint8_t>(mxfp4_nearest(src[j], d));
    pack_nibbles(q, y[i].qs, nullptr);
  }
}

void dequantize_row_mxfp4(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK_MXFP4; ++i, y += kQK_MXFP4) {
    const float d = mxfp4_half_scale(b[i].e);
    for (int j = 0; j < kQK_MXFP4; ++j) y[j] = kMXFP4Values[nibble(b[i].qs, j)] * d;
  }
}

}  // namespace strata
