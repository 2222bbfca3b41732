// Rows of the K-quant formats (and IQ4_XS, built the same way): 256-element super-blocks of 8
// or 16 sub-blocks whose scales (and mins) are themselves quantised against one f16 scale per
// super-block. q8_K is the activation format of their dot products.
//
// The quantisers are simple deterministic fits (each sub-block's min/max or signed extreme,
// scales relative to the super-block's largest), not GGML's searches: a little more error,
// the same format.
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

// Packs 256 two-bit values the Q2_K / Q3_K way: element 128h + 32j + l in bits 2j..2j+1 of
// byte 32h + l.
void pack_2bit(const uint8_t* q, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* p = q + 128 * h + l;
      qs[32 * h + l] =
          static_cast<uint8_t>((p[0] & 3) | (p[32] & 3) << 2 | (p[64] & 3) << 4 | (p[96] & 3) << 6);
    }
  }
}

inline int unpack_2bit(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Inverse of kscale_min().
void pack_scale_mins(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xf) | ((lm[j] & 0xf) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Min/max fit of each 32-element sub-block to q in 0..kMax, then 6-bit scales and mins
// relative to the super-block's largest. Simpler than GGML's iterative search: a little more
// error, same format. Writes the quants (one byte each) to q.
template <int kMax>
void quantize_kblock(const float* x, uint16_t* d16, uint16_t* dmin16, uint8_t* scales, uint8_t* q) {
  float sub_scale[8], sub_min[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 8; ++s) {
    float lo = 0.0f, hi = 0.0f;  // lo <= 0 keeps mins non-negative, as the format needs
    for (int j = 0; j < 32; ++j) {
      lo = std::fmin(lo, x[32 * s + j]);
      hi = std::fmax(hi, x[32 * s + j]);
    }
    sub_scale[s] = (hi - lo) / kMax;
    sub_min[s] = -lo;
    max_scale = std::fmax(max_scale, sub_scale[s]);
    max_min = std::fmax(max_min, sub_min[s]);
  }
  *d16 = f32_to_f16(max_scale / 63.0f);
  *dmin16 = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d16);
  const float dmin = f16_to_f32(*dmin16);
  uint8_t ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = d > 0.0f ? static_cast<uint8_t>(round_clamp(sub_scale[s] / d, 0.0f, 63.0f)) : 0;
    lm[s] = dmin > 0.0f ? static_cast<uint8_t>(round_clamp(sub_min[s] / dmin, 0.0f, 63.0f)) : 0;
  }
  pack_scale_mins(ls, lm, scales);
  for (int s = 0; s < 8; ++s) {
    const float step = d * ls[s];
    const float offset = dmin * lm[s];
    for (int j = 0; j < 32; ++j) {
      const float v = x[32 * s + j];
      q[32 * s + j] =
          step > 0.0f ? static_cast<uint8_t>(round_clamp((v + offset) / step, 0.0f, kMax)) : 0;
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    quantize_kblock<15>(x, &y[i].d, &y[i].dmin, y[i].scales, q);
    for (int c = 0; c < 4; ++c) {
      for (int t = 0; t < 32; ++t) {
        y[i].qs[32 * c + t] = static_cast<uint8_t>(q[64 * c + t] | (q[64 * c + 32 + t] << 4));
      }
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      kscale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      kscale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int t = 0; t < 32; ++t) *y++ = d1 * (q[t] & 0xf) - m1;
      for (int t = 0; t < 32; ++t) *y++ = d2 * (q[t] >> 4) - m2;
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    quantize_kblock<31>(x, &y[i].d, &y[i].dmin, y[i].scales, q);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int t = 0; t < 32; ++t) {
        const int lo = q[64 * c + t], hi = q[64 * c + 32 + t];
        y[i].qs[32 * c + t] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
        y[i].qh[t] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      kscale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      kscale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const int u1 = 1 << (2 * c), u2 = 2 << (2 * c);
      for (int t = 0; t < 32; ++t) *y++ = d1 * ((ql[t] & 0xf) + (qh[t] & u1 ? 16 : 0)) - m1;
      for (int t = 0; t < 32; ++t) *y++ = d2 * ((ql[t] >> 4) + (qh[t] & u2 ? 16 : 0)) - m2;
    }
  }
}

// ---- Q6_K ----

// Each 16-element sub-block spans its absolute max with quants -31..31 (the format allows
// -32 too; leaving it unused keeps the fit symmetric), and the 8-bit sub-block scales are
// relative to the largest.
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float sub_scale[16];
    float max_scale = 0.0f;
    for (int s = 0; s < 16; ++s) {
      sub_scale[s] = abs_max(x + 16 * s, 16) / 31.0f;
      max_scale = std::fmax(max_scale, sub_scale[s]);
    }
    y[i].d = f32_to_f16(max_scale / 127.0f);
    const float d = f16_to_f32(y[i].d);
    for (int s = 0; s < 16; ++s) {
      const int ls = d > 0.0f ? round_clamp(sub_scale[s] / d, 0.0f, 127.0f) : 0;
      y[i].scales[s] = static_cast<int8_t>(ls);
      const float step = d * ls;
      for (int j = 0; j < 16; ++j) {
        const int v = step > 0.0f ? round_clamp(x[16 * s + j] / step, -32.0f, 31.0f) : 0;
        q[16 * s + j] = static_cast<uint8_t>(v + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {  // two halves of 128 elements
      const uint8_t* qq = q + 128 * h;
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = qq[l], q2 = qq[l + 32], q3 = qq[l + 64], q4 = qq[l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xf) | ((q3 & 0xf) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xf) | ((q4 & 0xf) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * scale) * q, in that order, as GGML evaluates it.
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// ---- Q2_K ----

// Each 16-element sub-block spans [min(lo, 0), max(hi, 0)] with quants 0..3; 4-bit scales and
// mins relative to the super-block's largest.
void quantize_q2_k(const float* x, BlockQ2_K* y) {
  float sub_scale[16], sub_min[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < 16; ++j) {
      lo = std::fmin(lo, x[16 * s + j]);
      hi = std::fmax(hi, x[16 * s + j]);
    }
    sub_scale[s] = (hi - lo) / 3.0f;
    sub_min[s] = -lo;
    max_scale = std::fmax(max_scale, sub_scale[s]);
    max_min = std::fmax(max_min, sub_min[s]);
  }
  y->d = f32_to_f16(max_scale / 15.0f);
  y->dmin = f32_to_f16(max_min / 15.0f);
  const float d = f16_to_f32(y->d), dmin = f16_to_f32(y->dmin);
  uint8_t q[kQKK];
  for (int s = 0; s < 16; ++s) {
    const int ls = d > 0.0f ? round_clamp(sub_scale[s] / d, 0.0f, 15.0f) : 0;
    const int lm = dmin > 0.0f ? round_clamp(sub_min[s] / dmin, 0.0f, 15.0f) : 0;
    y->scales[s] = static_cast<uint8_t>(ls | lm << 4);
    const float step = d * ls, offset = dmin * lm;
    for (int j = 0; j < 16; ++j) {
      const float v = x[16 * s + j];
      q[16 * s + j] =
          step > 0.0f ? static_cast<uint8_t>(round_clamp((v + offset) / step, 0.0f, 3.0f)) : 0;
    }
  }
  pack_2bit(q, y->qs);
}

// ---- Q3_K ----

// Each 16-element sub-block maps its signed extreme to -4 (quants -4..3); the 6-bit signed
// scales map the super-block's largest to -32.
void quantize_q3_k(const float* x, BlockQ3_K* y) {
  float sub[16];
  float big = 0.0f;
  for (int s = 0; s < 16; ++s) {
    sub[s] = signed_max(x + 16 * s, 16) / -4.0f;
    if (std::fabs(sub[s]) > std::fabs(big)) big = sub[s];
  }
  y->d = f32_to_f16(big / -32.0f);
  const float d = f16_to_f32(y->d);
  std::memset(y->scales, 0, sizeof y->scales);
  std::memset(y->hmask, 0, sizeof y->hmask);
  uint8_t q[kQKK];
  for (int s = 0; s < 16; ++s) {
    const int l = d != 0.0f ? round_clamp(sub[s] / d, -32.0f, 31.0f) : 0;
    const int biased = l + 32;
    y->scales[s % 8] |= static_cast<uint8_t>((biased & 0xf) << (4 * (s / 8)));
    y->scales[8 + s % 4] |= static_cast<uint8_t>((biased >> 4) << (2 * (s / 4)));
    const float step = d * l;
    for (int j = 0; j < 16; ++j) {
      const int v = step != 0.0f ? round_clamp(x[16 * s + j] / step, -4.0f, 3.0f) : 0;
      q[16 * s + j] = static_cast<uint8_t>(v + 4);
    }
  }
  for (int e = 0; e < kQKK; ++e) {
    y->hmask[e % 32] |= static_cast<uint8_t>((q[e] >> 2) << (e / 32));
  }
  pack_2bit(q, y->qs);
}

// ---- IQ4_XS ----

// Each 32-element sub-block maps its signed extreme to the grid's -127; the 6-bit signed
// sub-block scales map the super-block's largest to -32; elements take the nearest level.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y) {
  float sub[8];
  float big = 0.0f;
  for (int i = 0; i < 8; ++i) {
    sub[i] = signed_max(x + 32 * i, 32) / static_cast<float>(kIQ4NLValues[0]);
    if (std::fabs(sub[i]) > std::fabs(big)) big = sub[i];
  }
  y->d = f32_to_f16(big / -32.0f);
  const float d = f16_to_f32(y->d);
  y->scales_h = 0;
  std::memset(y->scales_l, 0, sizeof y->scales_l);
  for (int i = 0; i < 8; ++i) {
    const int l = d != 0.0f ? round_clamp(sub[i] / d, -32.0f, 31.0f) : 0;
    const int biased = l + 32;
    y->scales_l[i / 2] |= static_cast<uint8_t>((biased & 0xf) << (4 * (i % 2)));
    y->scales_h |= static_cast<uint16_t>((biased >> 4) << (2 * i));
    const float step = d * l;
    const float id = step != 0.0f ? 1.0f / step : 0.0f;
    uint8_t* qs = y->qs + 16 * i;
    for (int j = 0; j < 16; ++j) {
      const int lo = iq4_nearest(x[32 * i + j] * id);
      const int hi = iq4_nearest(x[32 * i + 16 + j] * id);
      qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

}  // namespace

void quantize_row_q2_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quantize_q2_k(src + i * kQKK, y + i);
}

void dequantize_row_q2_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t sc = b[i].scales[e / 16];
      const float dl = d * (sc & 0xf), ml = dmin * (sc >> 4);
      y[e] = dl * unpack_2bit(b[i].qs, e) - ml;
    }
  }
}

void quantize_row_q3_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quantize_q3_k(src + i * kQKK, y + i);
}

void dequantize_row_q3_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    const float d = f16_to_f32(b[i].d);
    for (int e = 0; e < kQKK; ++e) {
      const float dl = d * (q3_k_scale(b[i].scales, e / 16) - 32);
      const int q = unpack_2bit(b[i].qs, e) | ((b[i].hmask[e % 32] >> (e / 32)) & 1) << 2;
      y[e] = dl * (q - 4);
    }
  }
}

void quantize_row_iq4_xs(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quantize_iq4_xs(src + i * kQKK, y + i);
}

void dequantize_row_iq4_xs(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const float dl = d * (iq4_xs_scale(b[i], s) - 32);
      const uint8_t* qs = b[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIQ4NLValues[qs[j] & 0xf];
        y[j + 16] = dl * kIQ4NLValues[qs[j] >> 4];
      }
    }
  }
}

void quantize_row_q8_k(const float* src, void* dst, int64_t n) {
  const float* x = src;
  auto* y = static_cast<BlockQ8_K*>(dst);
  const int64_t nb = n / kQKK;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    const float amax = abs_max(x, kQKK);
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(round_clamp(x[j] * iscale, -127.0f, 127.0f));
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

void dequantize_row_q8_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  const int64_t nb = n / kQKK;
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * x[i].qs[j];
  }
}

void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / kQKK);
}

void quantize_row_q4_k(const float* src, void* dst, int64_t n) {
  quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n / kQKK);
}

void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
  dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, n / kQKK);
}

void quantize_row_q5_k(const float* src, void* dst, int64_t n) {
  quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n / kQKK);
}

void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
  dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQKK);
}

void quantize_row_q6_k(const float* src, void* dst, int64_t n) {
  quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQKK);
}

}  // namespace strata
