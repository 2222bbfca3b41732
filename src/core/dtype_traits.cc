#include "core/dtype_traits.h"

#include <array>

#include "core/matmul_internal.h"
#include "core/quant_rows.h"

namespace strata {
namespace {

namespace md = matmul_detail;

constexpr int kScalar = static_cast<int>(Isa::kScalar);

// One row per dtype strata has code for. The activation partners (`act`):
//  - plain types multiply the F32 activations as given;
//  - q8_0, q4_0, q5_0, iq4_nl, mxfp4 take Q8_0: same 32-element blocks, so a block is one
//    integer sum and one scale product;
//  - q4_1, q5_1 take Q8_1 (Q8_0's values plus each block's sum): their min m adds
//    m * d_x * sum(q_x) per block, which the sum gives without touching the elements;
//  - the K-quants and iq4_xs take Q8_K: 256-element super-blocks like theirs, with the
//    16-element sums that pay for the mins (q2_K, q4_K, q5_K) and biases (q3_K, q6_K).
// The kernels of the 32-element types after q4_0 read one column layout for both partners: the
// Q8 values with their scales and block sums (matmul_internal.h).
constexpr DTypeTraits kTraits[] = {
    {DType::kF32,
     DType::kF32,
     dequantize_row_f32,
     quantize_row_f32,
     {{.matmul = &md::kF32Ref}, {.matmul = &md::kF32Avx2}, {}, {.matmul = &md::kF32Avx512}}},
    {DType::kF16,
     DType::kF32,
     dequantize_row_f16,
     quantize_row_f16,
     {{.matmul = &md::kF16Ref},
      {.matmul = &md::kF16Avx2,
       .to_float = dequantize_row_f16_avx2,
       .from_float = quantize_row_f16_avx2},
      {},
      {.matmul = &md::kF16Avx512}}},
    {DType::kBF16,
     DType::kF32,
     dequantize_row_bf16,
     quantize_row_bf16,
     {{.matmul = &md::kBF16Ref}, {.matmul = &md::kBF16Avx2}, {}, {.matmul = &md::kBF16Avx512}}},
    {DType::kQ8_0,
     DType::kQ8_0,
     dequantize_row_q8_0,
     quantize_row_q8_0,
     {{.matmul = &md::kQ8_0Ref},
      {.matmul = &md::kQ8_0Avx2},
      {.matmul = &md::kQ8_0AvxVnni},
      {.matmul = &md::kQ8_0Avx512}}},
    {DType::kQ4_0,
     DType::kQ8_0,
     dequantize_row_q4_0,
     quantize_row_q4_0,
     {{.matmul = &md::kQ4_0Ref},
      {.matmul = &md::kQ4_0Avx2},
      {.matmul = &md::kQ4_0AvxVnni},
      {.matmul = &md::kQ4_0Avx512}}},
    {DType::kQ4_K,
     DType::kQ8_K,
     dequantize_row_q4_k,
     quantize_row_q4_k,
     {{.matmul = &md::kQ4_KRef},
      {.matmul = &md::kQ4_KAvx2},
      {.matmul = &md::kQ4_KAvxVnni},
      {.matmul = &md::kQ4_KAvx512}}},
    {DType::kQ5_K,
     DType::kQ8_K,
     dequantize_row_q5_k,
     quantize_row_q5_k,
     {{.matmul = &md::kQ5_KRef},
      {.matmul = &md::kQ5_KAvx2},
      {.matmul = &md::kQ5_KAvxVnni},
      {.matmul = &md::kQ5_KAvx512}}},
    {DType::kQ6_K,
     DType::kQ8_K,
     dequantize_row_q6_k,
     quantize_row_q6_k,
     {{.matmul = &md::kQ6_KRef},
      {.matmul = &md::kQ6_KAvx2},
      {.matmul = &md::kQ6_KAvxVnni},
      {.matmul = &md::kQ6_KAvx512}}},
    {DType::kQ4_1,
     DType::kQ8_1,
     dequantize_row_q4_1,
     quantize_row_q4_1,
     {{.matmul = &md::kQ4_1Ref}, {.matmul = &md::kQ4_1Avx2}, {.matmul = &md::kQ4_1AvxVnni}}},
    {DType::kQ5_0,
     DType::kQ8_0,
     dequantize_row_q5_0,
     quantize_row_q5_0,
     {{.matmul = &md::kQ5_0Ref}, {.matmul = &md::kQ5_0Avx2}, {.matmul = &md::kQ5_0AvxVnni}}},
    {DType::kQ5_1,
     DType::kQ8_1,
     dequantize_row_q5_1,
     quantize_row_q5_1,
     {{.matmul = &md::kQ5_1Ref}, {.matmul = &md::kQ5_1Avx2}, {.matmul = &md::kQ5_1AvxVnni}}},
    {DType::kIQ4_NL,
     DType::kQ8_0,
     dequantize_row_iq4_nl,
     quantize_row_iq4_nl,
     {{.matmul = &md::kIQ4_NLRef}, {.matmul = &md::kIQ4_NLAvx2}, {.matmul = &md::kIQ4_NLAvxVnni}}},
    {DType::kMXFP4,
     DType::kQ8_0,
     dequantize_row_mxfp4,
     quantize_row_mxfp4,
     {{.matmul = &md::kMXFP4Ref},
      {.matmul = &md::kMXFP4Avx2},
      {.matmul = &md::kMXFP4AvxVnni},
      {.matmul = &md::kMXFP4Avx512}}},
    {DType::kQ2_K,
     DType::kQ8_K,
     dequantize_row_q2_k,
     quantize_row_q2_k,
     {{.matmul = &md::kQ2_KRef}, {.matmul = &md::kQ2_KAvx2}, {.matmul = &md::kQ2_KAvxVnni}}},
    {DType::kQ3_K,
     DType::kQ8_K,
     dequantize_row_q3_k,
     quantize_row_q3_k,
     {{.matmul = &md::kQ3_KRef}, {.matmul = &md::kQ3_KAvx2}, {.matmul = &md::kQ3_KAvxVnni}}},
    {DType::kIQ4_XS,
     DType::kQ8_K,
     dequantize_row_iq4_xs,
     quantize_row_iq4_xs,
     {{.matmul = &md::kIQ4_XSRef},
      {.matmul = &md::kIQ4_XSAvx2},
      {.matmul = &md::kIQ4_XSAvxVnni},
      {.matmul = &md::kIQ4_XSAvx512}}},
    // Device layouts (core/rows16.h): kernels only. A row is not where the row arithmetic puts
    // it, so no row conversions (get_rows refuses them).
    {DType::kQ4_K_R16,
     DType::kQ8_K,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ4_K_R16Ref},
      {.matmul = &md::kQ4_K_R16Avx2},
      {.matmul = &md::kQ4_K_R16AvxVnni},
      {.matmul = &md::kQ4_K_R16Avx512}},
     Isa::kAvx2},
    {DType::kQ6_K_R16,
     DType::kQ8_K,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ6_K_R16Ref},
      {.matmul = &md::kQ6_K_R16Avx2},
      {.matmul = &md::kQ6_K_R16AvxVnni},
      {.matmul = &md::kQ6_K_R16Avx512}},
     Isa::kAvx2},
    {DType::kQ5_K_R16,
     DType::kQ8_K,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ5_K_R16Ref},
      {.matmul = &md::kQ5_K_R16Avx2},
      {.matmul = &md::kQ5_K_R16AvxVnni},
      {.matmul = &md::kQ5_K_R16Avx512}},
     Isa::kAvx2},
    {DType::kQ2_K_R16,
     DType::kQ8_K,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ2_K_R16Ref},
      {.matmul = &md::kQ2_K_R16Avx2},
      {},
      {.matmul = &md::kQ2_K_R16Avx512}},
     Isa::kAvx512},
    {DType::kQ3_K_R16,
     DType::kQ8_K,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ3_K_R16Ref},
      {.matmul = &md::kQ3_K_R16Avx2},
      {},
      {.matmul = &md::kQ3_K_R16Avx512}},
     Isa::kAvx512},
    {DType::kQ8_0_R16,
     DType::kQ8_0,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ8_0_R16Ref},
      {.matmul = &md::kQ8_0_R16Avx2},
      {.matmul = &md::kQ8_0_R16AvxVnni},
      {.matmul = &md::kQ8_0_R16Avx512}},
     Isa::kAvx2},
    {DType::kQ4_0_R16,
     DType::kQ8_0,
     nullptr,
     nullptr,
     {{.matmul = &md::kQ4_0_R16Ref},
      {.matmul = &md::kQ4_0_R16Avx2},
      {},
      {.matmul = &md::kQ4_0_R16Avx512}},
     Isa::kAvx512},
    {DType::kMXFP4_R16,
     DType::kQ8_0,
     nullptr,
     nullptr,
     {{.matmul = &md::kMXFP4_R16Ref},
      {.matmul = &md::kMXFP4_R16Avx2},
      {},
      {.matmul = &md::kMXFP4_R16Avx512}},
     Isa::kAvx512},
    {DType::kIQ4_XS_R16,
     DType::kQ8_K,
     nullptr,
     nullptr,
     {{.matmul = &md::kIQ4_XS_R16Ref},
      {.matmul = &md::kIQ4_XS_R16Avx2},
      {.matmul = &md::kIQ4_XS_R16AvxVnni},
      {.matmul = &md::kIQ4_XS_R16Avx512}},
     Isa::kAvx2},
    // Activation formats only: conversions, no kernels.
    {DType::kQ8_1, DType::kQ8_1, dequantize_row_q8_1, quantize_row_q8_1, {}},
    {DType::kQ8_K, DType::kQ8_K, dequantize_row_q8_k, quantize_row_q8_k, {}},
};

}  // namespace

const DTypeTraits* dtype_traits(DType t) {
  static constexpr auto kIndex = dtype_row_index(kTraits);
  const auto id = static_cast<uint32_t>(t);
  if (id >= kDTypeTableSize || kIndex[id] < 0) return nullptr;
  return &kTraits[kIndex[id]];
}

std::span<const DTypeTraits> dtype_traits_all() { return kTraits; }

const MatmulKernel* dtype_matmul_kernel(const DTypeTraits& t, Isa isa, int64_t m) {
  for (int level = static_cast<int>(isa); level >= kScalar; --level) {
    if (!isa_supported(static_cast<Isa>(level))) continue;  // AVX-VNNI below AVX-512
    const MatmulKernel* k = t.isa[level].matmul;
    if (k == nullptr) continue;
    if (m >= k->min_columns || level == kScalar) return k;
    if (k->narrow != nullptr) return k->narrow;
  }
  return nullptr;
}

bool dtype_layout_pays(DType layout, Isa isa) {
  const DTypeTraits* t = dtype_traits(layout);
  return t != nullptr && dtype_is_layout(layout) && isa >= t->layout_from;
}

RowToFloat dtype_to_float(const DTypeTraits& t, Isa isa) {
  for (int level = static_cast<int>(isa); level > kScalar; --level) {
    if (!isa_supported(static_cast<Isa>(level))) continue;
    if (t.isa[level].to_float != nullptr) return t.isa[level].to_float;
  }
  return t.dequantize;
}

RowFromFloat dtype_from_float(const DTypeTraits& t, Isa isa) {
  for (int level = static_cast<int>(isa); level > kScalar; --level) {
    if (!isa_supported(static_cast<Isa>(level))) continue;
    if (t.isa[level].from_float != nullptr) return t.isa[level].from_float;
  }
  return t.quantize;
}

}  // namespace strata
