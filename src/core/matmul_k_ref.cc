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

// Sums of q * y over each 16-element sub-block of a Q2_K / Q3_K super-block, with q the 2-bit
// quant from qs plus, for Q3_K, 4 * (hmask bit) - 4. Element e = 128h + 32j + l is bits 2j of
// qs[32h + l] and bit 4h + j of hmask[l]; it is in sub-block 8h + 2j + l / 16.
template <bool kQ3>
void sub_block_sums(const uint8_t* qs, const uint8_t* hmask, const int8_t* y, int* sub) {
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        int acc = 0;  // a local: stores through `sub` could alias the int8 inputs
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          int q = (qs[32 * h + l] >> (2 * j)) & 3;
          if constexpr (kQ3) q += 4 * ((hmask[l] >> (4 * h + j)) & 1) - 4;
          acc += q * y[128 * h + 32 * j + l];
        }
        sub[8 * h + 2 * j + half] = acc;
      }
    }
  }
}

// sum_s (scales[s] & 15) * (q . y)_s minus the mins' part (scales[s] >> 4) * sum(y)_s; each
// 16-element sub-block is one Q8_K block sum.
float dot_q2_k(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ2_K*>(wp);
  const auto* x = static_cast<const BlockQ8_K*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
    int sub[16];
    sub_block_sums<false>(w[b].qs, nullptr, x[b].qs, sub);
    int isum = 0, msum = 0;
    for (int s = 0; s < 16; ++s) {
      isum += (w[b].scales[s] & 0xf) * sub[s];
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
    int sub[16];
    sub_block_sums<true>(w[b].qs, w[b].hmask, x[b].qs, sub);
    int isum = 0;
    for (int s = 0; s < 16; ++s) isum += (q3_k_scale(w[b].scales, s) - 32) * sub[s];
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
