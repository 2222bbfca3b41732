// Scalar reference dot products of the 32-element block formats against Q8_0 activations: the
// definition the SIMD paths are tested against, and the path used on CPUs without AVX2.
// Integer block sums are exact; the float part is one scale multiply per block and a running
// sum in block order.
#include "core/fp16.h"
#include "core/matmul_internal.h"
#include "core/quant_blocks.h"
#include "core/quant_rows.h"

namespace strata::matmul_detail {
namespace {

float dot_q8_0(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ8_0*>(wp);
  const auto* x = static_cast<const BlockQ8_0*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += w[b].qs[j] * x[b].qs[j];
    sum += f16_to_f32(w[b].d) * f16_to_f32(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_0(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ4_0*>(wp);
  const auto* x = static_cast<const BlockQ8_0*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK4_0; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      isum += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK4_0 / 2];
    }
    sum += f16_to_f32(w[b].d) * f16_to_f32(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

}  // namespace

size_t q8_0_scales_offset(int64_t k) {
  return (static_cast<size_t>(k / kQK8_0) * sizeof(BlockQ8_0) + 3) & ~size_t{3};
}

size_t q8_0_column_bytes(int64_t k) {
  return q8_0_scales_offset(k) + static_cast<size_t>((k / kQK8_0 + 1) / 2) * 32;
}

void quantize_act_q8_0_ref(const float* x, void* dst, int64_t k) {
  quantize_row_q8_0(x, dst, k);
  const auto* blocks = static_cast<const BlockQ8_0*>(dst);
  float* scales = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + q8_0_scales_offset(k));
  const int64_t nb = k / kQK8_0;
  for (int64_t b = 0; b < nb; ++b) q8_0_set_scale(scales, b, f16_to_f32(blocks[b].d));
  if (nb % 2 != 0) q8_0_set_scale(scales, nb, 0.0f);
}

size_t q4_0_pair_column_bytes(int64_t k) {
  return static_cast<size_t>((k / kQK4_0 + 1) / 2) * sizeof(Q4_0ActPair);
}

const MatmulKernel kQ8_0Ref = {q8_0_column_bytes, quantize_act_q8_0_ref, rows_ref<dot_q8_0>};
const MatmulKernel kQ4_0Ref = {q8_0_column_bytes, quantize_act_q8_0_ref, rows_ref<dot_q4_0>};

}  // namespace strata::matmul_detail
