// Element types and their storage: the GGML type ids and block layouts that GGUF files use.
//
// Every type GGUF can name is listed so that a file can be parsed and described; only some
// have kernels (`has_kernels`, from the dtype table of core/dtype_traits.h). A quantised type
// stores `block_size` elements in `block_bytes` bytes; a row of n elements needs n to be a multiple
// of the block size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// Values are GGML's `ggml_type` ids as stored in GGUF tensor infos: never renumber.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  // Device layouts: a GGUF type's blocks rearranged in memory for a device's kernels; never in
  // a file (the GGUF reader refuses their ids) and never a GGML id. See core/rows16.h.
  kQ4_K_R16 = 64,  // q4_K, rows in groups of 16
  // 65 was q6_K's first layout (its file's ql and qh bytes moved). The quants' bits have moved
  // since, so the layout has a new id: a client never sends the new arrangement to a worker that
  // offers the old one, nor the old to a new worker (each takes the other for plain q6_K). Never
  // reuse 65.
  kQ6_K_R16 = 66,    // q6_K, rows in groups of 16
  kIQ4_XS_R16 = 67,  // iq4_xs, rows in groups of 16
  kQ5_K_R16 = 68,    // q5_K, rows in groups of 16
  kQ3_K_R16 = 69,    // q3_K, rows in groups of 16
  kQ2_K_R16 = 70,    // q2_K, rows in groups of 16
  kQ8_0_R16 = 71,    // q8_0, rows in groups of 16, a pair of blocks a block
  kQ4_0_R16 = 72,    // q4_0, rows in groups of 16, a pair of blocks a block
  kMXFP4_R16 = 73,   // mxfp4, rows in groups of 16, a pair of blocks a block
};

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // as llama.cpp prints it: "f32", "q4_K", ...
  int64_t block_size;     // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool has_kernels;       // matmul exists for it (and get_rows / dequantize, unless a layout)
  DType base;             // a layout's GGUF type (its bytes, rearranged); else dtype itself
};

// nullptr for an id that is not a known type (the value came from a file: check it).
const DTypeInfo* dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);

inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline int64_t dtype_block_size(DType t) { return dtype_info(t).block_size; }
inline size_t dtype_block_bytes(DType t) { return dtype_info(t).block_bytes; }
inline bool dtype_is_quantized(DType t) { return dtype_info(t).block_size > 1; }
// A device layout (kQ4_K_R16...): rows are not where the plain row arithmetic puts them.
inline bool dtype_is_layout(DType t) { return dtype_info(t).base != t; }

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers
// that handle untrusted shapes, asserted here).
size_t dtype_row_bytes(DType t, int64_t n);

// The names of the dtypes with kernels, in table order, joined by `separator`: what error
// messages and help texts list as supported.
std::string dtype_names_with_kernels(std::string_view separator = ", ");

// Parses a name as `strata gguf gen --dtype` takes it ("q8_0", "Q4_K", "f16"...); GGUF types
// only, never a device layout.
std::optional<DType> dtype_from_name(std::string_view name);

// DType values (GGML ids and the layouts after them) are below this, so that a table indexed by
// id makes a lookup one load.
inline constexpr uint32_t kDTypeTableSize = 74;

// The position in `rows` (entries with a `dtype` member) of each dtype id; -1 where none.
template <class Row, size_t N>
constexpr std::array<int8_t, kDTypeTableSize> dtype_row_index(const Row (&rows)[N]) {
  std::array<int8_t, kDTypeTableSize> index{};
  for (auto& i : index) i = -1;
  for (size_t i = 0; i < N; ++i)
    index[static_cast<uint32_t>(rows[i].dtype)] = static_cast<int8_t>(i);
  return index;
}

}  // namespace strata
