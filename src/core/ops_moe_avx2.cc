// AVX2 + FMA path of moe_sum (core/ops_moe.h): eight elements a step, each summed over the slots
// with one fused multiply-add per slot from zero, as the scalar reference does with std::fma,
// so the two give the same bits. Entered only when isa_active() >= Isa::kAvx2.
#include <immintrin.h>

#include "core/ops_internal.h"
#include "core/ops_moe.h"

namespace strata::internal::avx2 {

void moe_sum(const float* y, size_t y_slot_stride, size_t y_tok_stride, const float* w,
             size_t w_stride, float* out, size_t out_stride, int64_t n, int64_t n_used,
             int64_t rows) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* yt = y + static_cast<size_t>(t) * y_tok_stride;
    const float* wt = w + static_cast<size_t>(t) * w_stride;
    float* ot = out + static_cast<size_t>(t) * out_stride;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t s = 0; s < n_used; ++s) {
        acc =
            _mm256_fmadd_ps(_mm256_set1_ps(wt[s]),
                            _mm256_loadu_ps(yt + static_cast<size_t>(s) * y_slot_stride + i), acc);
      }
      _mm256_storeu_ps(ot + i, acc);
    }
    // The last n % 8 elements: the reference's own loop, the same operations.
    ref::moe_sum(yt + i, y_slot_stride, y_tok_stride, wt, w_stride, ot + i, out_stride, n - i,
                 n_used, 1);
  }
}

}  // namespace strata::internal::avx2
