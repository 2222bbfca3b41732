#include "core/dtype_traits.h"

#include <array>

#include "core/matmul_internal.h"
#include "core/quant_rows.h"

namespace strata {
namespace {

namespace md = matmul_detail;

constexpr int kScalar = static_cast<int>(Isa::kScalar);

// One row per dtype strata has code for. The activation partners: the plain types multiply the
// F32 activations directly; the 32-element block types take Q8_0 (same block size, so a block
// pair is one scale product and an integer sum); the K-quants take Q8_K (a super-block of 256,
// with the 16-element sums that pay for the mins).
constinit const DTypeTraits kTraits[] = {
    {DType::kF32,
     DType::kF32,
     dequantize_row_f32,
     quantize_row_f32,
     {{.matmul = &md::kF32Ref}, {.matmul = &md::kF32Avx2}}},
    {DType::kF16,
     DType::kF32,
     dequantize_row_f16,
     quantize_row_f16,
     {{.matmul = &md::kF16Ref},
      {.matmul = &md::kF16Avx2,
       .to_float = dequantize_row_f16_avx2,
       .from_float = quantize_row_f16_avx2}}},
    {DType::kBF16,
     DType::kF32,
     dequantize_row_bf16,
     quantize_row_bf16,
     {{.matmul = &md::kBF16Ref}, {.matmul = &md::kBF16Avx2}}},
    {DType::kQ8_0,
     DType::kQ8_0,
     dequantize_row_q8_0,
     quantize_row_q8_0,
     {{.matmul = &md::kQ8_0Ref}, {.matmul = &md::kQ8_0Avx2}}},
    {DType::kQ4_0,
     DType::kQ8_0,
     dequantize_row_q4_0,
     quantize_row_q4_0,
     {{.matmul = &md::kQ4_0Ref}, {.matmul = &md::kQ4_0Avx2}}},
    {DType::kQ4_K,
     DType::kQ8_K,
     dequantize_row_q4_k,
     quantize_row_q4_k,
     {{.matmul = &md::kQ4_KRef}, {.matmul = &md::kQ4_KAvx2}}},
    {DType::kQ5_K,
     DType::kQ8_K,
     dequantize_row_q5_k,
     quantize_row_q5_k,
     {{.matmul = &md::kQ5_KRef}, {.matmul = &md::kQ5_KAvx2}}},
    {DType::kQ6_K,
     DType::kQ8_K,
     dequantize_row_q6_k,
     quantize_row_q6_k,
     {{.matmul = &md::kQ6_KRef}, {.matmul = &md::kQ6_KAvx2}}},
    // Activation format only: conversions, no kernels.
    {DType::kQ8_K, DType::kQ8_K, dequantize_row_q8_k, quantize_row_q8_k, {}},
};

// DType values are GGML ids below 40 (dtype.h); the index makes a lookup one load.
constexpr uint32_t kMaxId = 40;

constexpr std::array<int8_t, kMaxId> make_index() {
  std::array<int8_t, kMaxId> index{};
  for (auto& i : index) i = -1;
  for (size_t i = 0; i < std::size(kTraits); ++i) {
    index[static_cast<uint32_t>(kTraits[i].dtype)] = static_cast<int8_t>(i);
  }
  return index;
}

}  // namespace

const DTypeTraits* dtype_traits(DType t) {
  static constexpr std::array<int8_t, kMaxId> kIndex = make_index();
  const auto id = static_cast<uint32_t>(t);
  if (id >= kMaxId || kIndex[id] < 0) return nullptr;
  return &kTraits[kIndex[id]];
}

std::span<const DTypeTraits> dtype_traits_all() { return kTraits; }

const MatmulKernel* dtype_matmul_kernel(const DTypeTraits& t, Isa isa) {
  for (int level = static_cast<int>(isa); level >= kScalar; --level) {
    if (t.isa[level].matmul != nullptr) return t.isa[level].matmul;
  }
  return nullptr;
}

RowToFloat dtype_to_float(const DTypeTraits& t, Isa isa) {
  for (int level = static_cast<int>(isa); level > kScalar; --level) {
    if (t.isa[level].to_float != nullptr) return t.isa[level].to_float;
  }
  return t.dequantize;
}

RowFromFloat dtype_from_float(const DTypeTraits& t, Isa isa) {
  for (int level = static_cast<int>(isa); level > kScalar; --level) {
    if (t.isa[level].from_float != nullptr) return t.isa[level].from_float;
  }
  return t.quantize;
}

}  // namespace strata
