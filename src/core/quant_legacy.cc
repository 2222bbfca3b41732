// Rows of the 32-element block formats: q8_0 and q4_0. Each block is one scale (and its
// quants); a row is its blocks in order.
#include <cmath>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quant_rows.h"
#include "core/quant_util.h"

namespace strata {

using quant_util::abs_max;
using quant_util::round_clamp;

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

}  // namespace strata
