// Scalar reference dot products of the K-quants (and IQ4_XS) against Q8_K activations: the
// definition the SIMD paths are tested against, and the path used on CPUs without AVX2.
// Integer sums per super-block are exact; the float part is a few scale multiplies per
// super-block and a running sum in super-block order. For q2_K, q3_K and iq4_xs the AVX2
// kernels compute the same integers and then these very float operations, so the two agree
// bit for bit.
#include "core/fp16.h"
#include "core/matmul_internal.h"
#include "core/quant_blocks.h"
#include "core/quant_rows.h"

namespace strata::matmul_detail {
namespace {

// Q4_K and Q5_K: sum_s scale_s * (q . y)_s minus the mins' part min_s * sum(y)_s, which the
// Q8_K block sums give without touching the elements.
template <bool kFiveBit, typename Block>
float dot_qk_min(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const Block*>(wp);
  const auto* x = static_cast<const BlockQ8_K*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
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

float dot_q6_k(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ6_K*>(wp);
  const auto* x = static_cast<const BlockQ8_K*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
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

inline int two_bits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// sum_s (scales[s] & 15) * (q . y)_s minus the mins' part (scales[s] >> 4) * sum(y)_s; each
// 16-element sub-block is one Q8_K block sum.
float dot_q2_k(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ2_K*>(wp);
  const auto* x = static_cast<const BlockQ8_K*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
    int isum = 0, msum = 0;
    for (int s = 0; s < 16; ++s) {
      int sub = 0;
      for (int t = 0; t < 16; ++t) sub += two_bits(w[b].qs, 16 * s + t) * x[b].qs[16 * s + t];
      isum += (w[b].scales[s] & 0xf) * sub;
      msum += (w[b].scales[s] >> 4) * x[b].bsums[s];
    }
    const float d = x[b].d * f16_to_f32(w[b].d);
    const float dmin = x[b].d * f16_to_f32(w[b].dmin);
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(msum);
  }
  return sum;
}

float dot_q3_k(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ3_K*>(wp);
  const auto* x = static_cast<const BlockQ8_K*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
    int isum = 0;
    for (int s = 0; s < 16; ++s) {
      int sub = 0;
      for (int t = 0; t < 16; ++t) {
        const int e = 16 * s + t;
        const int q = two_bits(w[b].qs, e) | ((w[b].hmask[e % 32] >> (e / 32)) & 1) << 2;
        sub += (q - 4) * x[b].qs[e];
      }
      isum += (q3_k_scale(w[b].scales, s) - 32) * sub;
    }
    sum += x[b].d * f16_to_f32(w[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_iq4_xs(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockIQ4_XS*>(wp);
  const auto* x = static_cast<const BlockQ8_K*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
    int isum = 0;
    for (int s = 0; s < 8; ++s) {
      const uint8_t* qs = w[b].qs + 16 * s;
      const int8_t* y = x[b].qs + 32 * s;
      int sub = 0;
      for (int j = 0; j < 16; ++j) {
        sub += kIQ4NLValues[qs[j] & 0xf] * y[j] + kIQ4NLValues[qs[j] >> 4] * y[j + 16];
      }
      isum += (iq4_xs_scale(w[b], s) - 32) * sub;
    }
    sum += x[b].d * f16_to_f32(w[b].d) * static_cast<float>(isum);
  }
  return sum;
}

}  // namespace

size_t q8_k_column_bytes(int64_t k) { return static_cast<size_t>(k / kQKK) * sizeof(BlockQ8_K); }

const MatmulKernel kQ4_KRef = {q8_k_column_bytes, quantize_row_q8_k,
                               rows_ref<dot_qk_min<false, BlockQ4_K>>};
const MatmulKernel kQ5_KRef = {q8_k_column_bytes, quantize_row_q8_k,
                               rows_ref<dot_qk_min<true, BlockQ5_K>>};
const MatmulKernel kQ6_KRef = {q8_k_column_bytes, quantize_row_q8_k, rows_ref<dot_q6_k>};
const MatmulKernel kQ2_KRef = {q8_k_column_bytes, quantize_row_q8_k, rows_ref<dot_q2_k>};
const MatmulKernel kQ3_KRef = {q8_k_column_bytes, quantize_row_q8_k, rows_ref<dot_q3_k>};
const MatmulKernel kIQ4_XSRef = {q8_k_column_bytes, quantize_row_q8_k, rows_ref<dot_iq4_xs>};

}  // namespace strata::matmul_detail
