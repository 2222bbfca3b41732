#include "core/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "core/check.h"

namespace strata {
namespace {

constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "f32", 1, 4, true},
    {DType::kF16, "f16", 1, 2, true},
    {DType::kQ4_0, "q4_0", 32, 18, true},
    {DType::kQ4_1, "q4_1", 32, 20, false},
    {DType::kQ5_0, "q5_0", 32, 22, false},
    {DType::kQ5_1, "q5_1", 32, 24, false},
    {DType::kQ8_0, "q8_0", 32, 34, true},
    {DType::kQ8_1, "q8_1", 32, 36, false},
    {DType::kQ2_K, "q2_K", 256, 84, false},
    {DType::kQ3_K, "q3_K", 256, 110, false},
    {DType::kQ4_K, "q4_K", 256, 144, true},
    {DType::kQ5_K, "q5_K", 256, 176, true},
    {DType::kQ6_K, "q6_K", 256, 210, true},
    {DType::kQ8_K, "q8_K", 256, 292, false},
    {DType::kIQ2_XXS, "iq2_xxs", 256, 66, false},
    {DType::kIQ2_XS, "iq2_xs", 256, 74, false},
    {DType::kIQ3_XXS, "iq3_xxs", 256, 98, false},
    {DType::kIQ1_S, "iq1_s", 256, 50, false},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, false},
    {DType::kIQ3_S, "iq3_s", 256, 110, false},
    {DType::kIQ2_S, "iq2_s", 256, 82, false},
    {DType::kIQ4_XS, "iq4_xs", 256, 136, false},
    {DType::kI8, "i8", 1, 1, false},
    {DType::kI16, "i16", 1, 2, false},
    {DType::kI32, "i32", 1, 4, false},
    {DType::kI64, "i64", 1, 8, false},
    {DType::kF64, "f64", 1, 8, false},
    {DType::kIQ1_M, "iq1_m", 256, 56, false},
    {DType::kBF16, "bf16", 1, 2, true},
    {DType::kTQ1_0, "tq1_0", 256, 54, false},
    {DType::kTQ2_0, "tq2_0", 256, 66, false},
};

constexpr uint32_t kMaxId = 40;

constexpr std::array<int8_t, kMaxId> make_index() {
  std::array<int8_t, kMaxId> index{};
  for (auto& i : index) i = -1;
  for (size_t i = 0; i < std::size(kInfos); ++i) {
    index[static_cast<uint32_t>(kInfos[i].dtype)] = static_cast<int8_t>(i);
  }
  return index;
}
constexpr auto kIndex = make_index();

}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  if (id >= kMaxId || kIndex[id] < 0) return nullptr;
  return &kInfos[kIndex[id]];
}

const DTypeInfo& dtype_info(DType t) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t));
  STRATA_CHECK(info != nullptr, "DType value outside the table");
  return *info;
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  STRATA_CHECK(n >= 0 && n % info.block_size == 0, "row length not a multiple of the block");
  return static_cast<size_t>(n / info.block_size) * info.block_bytes;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& info : kInfos) {
    if (info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(name[i])) !=
          std::tolower(static_cast<unsigned char>(info.name[i]))) {
        same = false;
        break;
      }
    }
    if (same) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace strata
