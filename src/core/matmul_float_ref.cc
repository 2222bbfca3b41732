// Scalar reference dot products of the plain types against F32 activations: one running sum
// in element order.
#include "core/fp16.h"
#include "core/matmul_internal.h"

namespace strata::matmul_detail {
namespace {

float dot_f32(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const float*>(wp);
  const auto* x = static_cast<const float*>(xp);
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += w[i] * x[i];
  return sum;
}

float dot_f16(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const uint16_t*>(wp);
  const auto* x = static_cast<const float*>(xp);
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += f16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_bf16(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const uint16_t*>(wp);
  const auto* x = static_cast<const float*>(xp);
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += bf16_to_f32(w[i]) * x[i];
  return sum;
}

}  // namespace

const MatmulKernel kF32Ref = {nullptr, nullptr, rows_ref<dot_f32>};
const MatmulKernel kF16Ref = {nullptr, nullptr, rows_ref<dot_f16>};
const MatmulKernel kBF16Ref = {nullptr, nullptr, rows_ref<dot_bf16>};

}  // namespace strata::matmul_detail
