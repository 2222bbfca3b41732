// Scalar reference dot products of the K-quants against Q8_K activations: the definition the
// SIMD paths are tested against, and the path used on CPUs without AVX2. Integer sums per
// super-block are exact; the float part is a few scale multiplies per super-block and a
// running sum in super-block order.
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

}  // namespace

size_t q8_k_column_bytes(int64_t k) { return static_cast<size_t>(k / kQKK) * sizeof(BlockQ8_K); }

const MatmulKernel kQ4_KRef = {q8_k_column_bytes, quantize_row_q8_k,
                               rows_ref<dot_qk_min<false, BlockQ4_K>>};
const MatmulKernel kQ5_KRef = {q8_k_column_bytes, quantize_row_q8_k,
                               rows_ref<dot_qk_min<true, BlockQ5_K>>};
const MatmulKernel kQ6_KRef = {q8_k_column_bytes, quantize_row_q8_k, rows_ref<dot_q6_k>};

}  // namespace strata::matmul_detail
