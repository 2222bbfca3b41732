// Scalar reference dot products: the definition the SIMD paths are tested against, and the
// path used on CPUs without AVX2. Integer block sums are exact; the float part is one scale
// multiply per block and a running sum in block order.
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "core/matmul_internal.h"
#include "core/quant_blocks.h"

namespace strata::matmul_detail {
namespace {

float dot_f32(const float* w, const float* x, int64_t k) {
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += w[i] * x[i];
  return sum;
}

float dot_f16(const uint16_t* w, const float* x, int64_t k) {
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += f16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t k) {
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += bf16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += w[b].qs[j] * x[b].qs[j];
    sum += f16_to_f32(w[b].d) * f16_to_f32(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      isum += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK4_0 / 2];
    }
    sum += f16_to_f32(w[b].d) * f16_to_f32(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

// Q4_K and Q5_K: sum_s scale_s * (q . y)_s minus the mins' part min_s * sum(y)_s, which the
// Q8_K block sums give without touching the elements.
template <bool kFiveBit, typename Block>
float dot_qk_min(const Block* w, const BlockQ8_K* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int isum = 0, msum = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, mn;
      kscale_min(s, w[b].scales, &sc, &mn);
      const int c = s / 2, shift = (s % 2) * 4;
      int sub = 0;
      for (int t = 0; t < 32; ++t) {
        int q = (w[b].qs[32 * c + t] >> shift) & 0xf;
        if constexpr (kFiveBit) q += ((w[b].qh[t] >> s) & 1) << 4;
        sub += q * x[b].qs[32 * s + t];
      }
      isum += sc * sub;
      msum += mn * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
    }
    const float d = x[b].d * f16_to_f32(w[b].d);
    const float dmin = x[b].d * f16_to_f32(w[b].dmin);
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(msum);
  }
  return sum;
}

float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int isum = 0;
    for (int s = 0; s < 16; ++s) {
      int sub = 0;
      for (int t = 0; t < 16; ++t) {
        const int e = 16 * s + t;
        const int h = e / 128, g = (e % 128) / 32, l = e % 32;
        const uint8_t lo = w[b].ql[64 * h + 32 * (g % 2) + l];
        const int low = g < 2 ? lo & 0xf : lo >> 4;
        const int high = (w[b].qh[32 * h + l] >> (2 * g)) & 3;
        sub += ((low | (high << 4)) - 32) * x[b].qs[e];
      }
      isum += w[b].scales[s] * sub;
    }
    sum += x[b].d * f16_to_f32(w[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_row(const MatmulArgs& a, const uint8_t* w, int64_t j) {
  const int64_t k = a.k;
  const float* x = a.x + j * a.x_stride;
  const uint8_t* xq = a.xq + j * a.xq_col_bytes;
  switch (a.dtype) {
    case DType::kF32:
      return dot_f32(reinterpret_cast<const float*>(w), x, k);
    case DType::kF16:
      return dot_f16(reinterpret_cast<const uint16_t*>(w), x, k);
    case DType::kBF16:
      return dot_bf16(reinterpret_cast<const uint16_t*>(w), x, k);
    case DType::kQ8_0:
      return dot_q8_0(reinterpret_cast<const BlockQ8_0*>(w), reinterpret_cast<const BlockQ8_0*>(xq),
                      k / kQK8_0);
    case DType::kQ4_0:
      return dot_q4_0(reinterpret_cast<const BlockQ4_0*>(w), reinterpret_cast<const BlockQ8_0*>(xq),
                      k / kQK4_0);
    case DType::kQ4_K:
      return dot_qk_min<false>(reinterpret_cast<const BlockQ4_K*>(w),
                               reinterpret_cast<const BlockQ8_K*>(xq), k / kQKK);
    case DType::kQ5_K:
      return dot_qk_min<true>(reinterpret_cast<const BlockQ5_K*>(w),
                              reinterpret_cast<const BlockQ8_K*>(xq), k / kQKK);
    case DType::kQ6_K:
      return dot_q6_k(reinterpret_cast<const BlockQ6_K*>(w), reinterpret_cast<const BlockQ8_K*>(xq),
                      k / kQKK);
    default:
      STRATA_CHECK(false, "matmul: dtype without kernels");
  }
  return 0.0f;
}

}  // namespace

void matmul_rows_ref(const MatmulArgs& a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* w = a.w + r * a.w_row_bytes;
    for (int64_t j = 0; j < a.m; ++j) a.y[j * a.y_stride + r] = dot_row(a, w, j);
  }
}

}  // namespace strata::matmul_detail
