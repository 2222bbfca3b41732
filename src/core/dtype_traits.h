// Everything the kernels know about a dtype, in one table row per dtype (dtype_traits.cc):
// its activation partner, its scalar conversions, and its kernels per instruction-set level.
// Adding a dtype is adding a row and the files its functions live in; the matmul driver, the
// quantiser dispatch and get_rows / set_rows only read the table.
//
// The scalar members define the format and are the reference every SIMD entry is tested
// against. A SIMD level may leave any entry null: the next level down is used, so a new dtype
// can land with scalar kernels only. The level is chosen once per call from isa_active().
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "core/dtype.h"
#include "core/isa.h"

namespace strata {

namespace matmul_detail {
struct MatmulArgs;
}

using RowToFloat = void (*)(const void* src, float* dst, int64_t n);
using RowFromFloat = void (*)(const float* src, void* dst, int64_t n);

// One matmul path: the layout of its activation columns and the kernel that reads them.
// act_column_bytes == nullptr: the kernel reads the F32 activations as given. Two kernels whose
// act_column_bytes is the same function share the column layout and must write the same bytes
// for the same input (tested), whatever their level.
struct MatmulKernel {
  size_t (*act_column_bytes)(int64_t k);
  void (*quantize_activation)(const float* x, void* dst, int64_t k);
  // y for the weight rows [r0, r1) and every column; see MatmulArgs.
  void (*rows)(const matmul_detail::MatmulArgs& a, int64_t r0, int64_t r1);
  // Bytes of MatmulArgs::work each thread's `rows` needs for a row length k (the weights of
  // a group of rows, unpacked once and used by every tile of columns); nullptr: none.
  size_t (*work_bytes)(int64_t k) = nullptr;
  // Below this many activation columns the next lower level's kernel of the dtype runs
  // instead. Only a kernel with the same bits as that one may set it (the AVX-512 kernels and
  // the AVX2 ones): it is a choice of speed, never of results. Measured: the AVX-512 kernels
  // walk two weight rows at once, and streaming a matrix from memory for one column that way
  // is slower than the AVX2 kernels' one row at a time for most dtypes.
  int64_t min_columns = 1;
  // Below min_columns, this kernel of the same level runs, when there is one: a kernel for few
  // columns (batch-1 decode) with the same bits as the lower level's.
  const MatmulKernel* narrow = nullptr;
};

// A dtype's entries at one instruction-set level; any may be null (absent at that level).
struct DTypeIsaKernels {
  const MatmulKernel* matmul = nullptr;
  RowToFloat to_float = nullptr;      // same bits as the scalar `dequantize`
  RowFromFloat from_float = nullptr;  // same bytes as the scalar `quantize`
};

struct DTypeTraits {
  DType dtype;
  // The format the activations are quantised to for this dtype's dot product (its
  // dequantised values are what the kernels multiply by); kF32 when they are used as given.
  DType act;
  RowToFloat dequantize;  // scalar reference; n a multiple of the block size
  RowFromFloat quantize;  // scalar reference; deterministic: same input, same bytes
  // Indexed by Isa. isa[kScalar].matmul is the reference dot product; a dtype without it has
  // conversions only (an activation format such as q8_K) and no kernels.
  DTypeIsaKernels isa[kIsaLevels];
  // A device layout (dtype_is_layout) is worth storing weights in from this level up, where it
  // has a kernel of its own; below, its entries only run the base type's kernels over it.
  Isa layout_from = Isa::kScalar;
};

// Whether a device at level `isa` stores weights of `base` in `layout` (its caps offer it).
bool dtype_layout_pays(DType layout, Isa isa);

// The row of t, or nullptr when strata has no code for t at all.
const DTypeTraits* dtype_traits(DType t);
std::span<const DTypeTraits> dtype_traits_all();

// The entry of the highest level <= isa that has one. The matmul kernel is nullptr for a
// dtype without kernels; the conversions fall back to the scalar references.
// The kernel for m activation columns at the level isa (or the nearest lower level that has
// one, and that the kernel's min_columns allows).
const MatmulKernel* dtype_matmul_kernel(const DTypeTraits& t, Isa isa,
                                        int64_t m = std::numeric_limits<int64_t>::max());
RowToFloat dtype_to_float(const DTypeTraits& t, Isa isa);
RowFromFloat dtype_from_float(const DTypeTraits& t, Isa isa);

}  // namespace strata
