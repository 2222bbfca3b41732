#include "core/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "core/check.h"
#include "core/dtype_traits.h"

namespace strata {
namespace {

// Marks a row that is its own base type (every GGUF type).
constexpr auto kSelf = static_cast<DType>(~uint32_t{0});

// The storage facts of every type GGUF can name, and of the device layouts after them (whose
// `base` is the GGUF type they rearrange). Whether a type has kernels is not kept here but read
// from the dtype table (dtype_traits.cc), so the two cannot disagree.
struct Layout {
  DType dtype;
  std::string_view name;
  int64_t block_size;
  size_t block_bytes;
  DType base = kSelf;
};

constexpr Layout kLayouts[] = {
    {DType::kF32, "f32", 1, 4},
    {DType::kF16, "f16", 1, 2},
    {DType::kQ4_0, "q4_0", 32, 18},
    {DType::kQ4_1, "q4_1", 32, 20},
    {DType::kQ5_0, "q5_0", 32, 22},
    {DType::kQ5_1, "q5_1", 32, 24},
    {DType::kQ8_0, "q8_0", 32, 34},
    {DType::kQ8_1, "q8_1", 32, 36},
    {DType::kQ2_K, "q2_K", 256, 84},
    {DType::kQ3_K, "q3_K", 256, 110},
    {DType::kQ4_K, "q4_K", 256, 144},
    {DType::kQ5_K, "q5_K", 256, 176},
    {DType::kQ6_K, "q6_K", 256, 210},
    {DType::kQ8_K, "q8_K", 256, 292},
    {DType::kIQ2_XXS, "iq2_xxs", 256, 66},
    {DType::kIQ2_XS, "iq2_xs", 256, 74},
    {DType::kIQ3_XXS, "iq3_xxs", 256, 98},
    {DType::kIQ1_S, "iq1_s", 256, 50},
    {DType::kIQ4_NL, "iq4_nl", 32, 18},
    {DType::kIQ3_S, "iq3_s", 256, 110},
    {DType::kIQ2_S, "iq2_s", 256, 82},
    {DType::kIQ4_XS, "iq4_xs", 256, 136},
    {DType::kI8, "i8", 1, 1},
    {DType::kI16, "i16", 1, 2},
    {DType::kI32, "i32", 1, 4},
    {DType::kI64, "i64", 1, 8},
    {DType::kF64, "f64", 1, 8},
    {DType::kIQ1_M, "iq1_m", 256, 56},
    {DType::kBF16, "bf16", 1, 2},
    {DType::kTQ1_0, "tq1_0", 256, 54},
    {DType::kTQ2_0, "tq2_0", 256, 66},
    {DType::kMXFP4, "mxfp4", 32, 17},
    // Layouts: the same bytes per row as their base type (a group of 16 rows is a
    // rearrangement of those rows' bits: for q4_K of their bytes).
    {DType::kQ4_K_R16, "q4_K_r16", 256, 144, DType::kQ4_K},
    {DType::kQ6_K_R16, "q6_K_r16", 256, 210, DType::kQ6_K},
    {DType::kIQ4_XS_R16, "iq4_xs_r16", 256, 136, DType::kIQ4_XS},
    {DType::kQ5_K_R16, "q5_K_r16", 256, 176, DType::kQ5_K},
    {DType::kQ3_K_R16, "q3_K_r16", 256, 110, DType::kQ3_K},
    {DType::kQ2_K_R16, "q2_K_r16", 256, 84, DType::kQ2_K},
    // The 32-element types' unit in the layout is a pair of blocks (core/rows16.h).
    {DType::kQ8_0_R16, "q8_0_r16", 64, 68, DType::kQ8_0},
    {DType::kQ4_0_R16, "q4_0_r16", 64, 36, DType::kQ4_0},
    {DType::kMXFP4_R16, "mxfp4_r16", 64, 34, DType::kMXFP4},
};

constexpr auto kLayoutIndex = dtype_row_index(kLayouts);

using Infos = std::array<DTypeInfo, std::size(kLayouts)>;

// Built on first use (the dtype table is constant-initialised, so it is ready by then).
const Infos& infos() {
  static const Infos table = [] {
    Infos t{};
    for (size_t i = 0; i < std::size(kLayouts); ++i) {
      const Layout& l = kLayouts[i];
      const DTypeTraits* traits = dtype_traits(l.dtype);
      const bool kernels = traits != nullptr && traits->isa[0].matmul != nullptr;
      t[i] = DTypeInfo{l.dtype,       l.name,  l.block_size,
                       l.block_bytes, kernels, l.base == kSelf ? l.dtype : l.base};
    }
    return t;
  }();
  return table;
}

}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  if (id >= kDTypeTableSize || kLayoutIndex[id] < 0) return nullptr;
  return &infos()[kLayoutIndex[id]];
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

std::string dtype_names_with_kernels(std::string_view separator) {
  std::string names;
  for (const DTypeTraits& t : dtype_traits_all()) {
    if (!dtype_info(t.dtype).has_kernels || dtype_is_layout(t.dtype)) continue;
    if (!names.empty()) names += separator;
    names += dtype_name(t.dtype);
  }
  return names;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& info : infos()) {
    if (info.name.size() != name.size() || info.base != info.dtype) continue;
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
