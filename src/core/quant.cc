#include "core/quant.h"

#include "core/check.h"
#include "core/dtype_traits.h"

namespace strata {

bool dtype_can_convert(DType t) {
  const DTypeTraits* traits = dtype_traits(t);
  return traits != nullptr && traits->dequantize != nullptr;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const DTypeTraits* traits = dtype_traits(t);
  STRATA_CHECK(traits != nullptr && traits->dequantize != nullptr,
               "dequantize_row: dtype has no conversion (check dtype_can_convert)");
  STRATA_CHECK(n >= 0 && n % dtype_block_size(t) == 0,
               "row length not a multiple of the block size");
  traits->dequantize(src, dst, n);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const DTypeTraits* traits = dtype_traits(t);
  STRATA_CHECK(traits != nullptr && traits->quantize != nullptr,
               "quantize_row: dtype has no conversion (check dtype_can_convert)");
  STRATA_CHECK(n >= 0 && n % dtype_block_size(t) == 0,
               "row length not a multiple of the block size");
  traits->quantize(src, dst, n);
}

}  // namespace strata
