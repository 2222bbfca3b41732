// Dispatch and threading of the mixture-of-experts kernels (core/ops_moe.h). Threads split
// tokens (rows), never a reduction; the instruction set is chosen once per call.
#include "core/ops_moe.h"

#include <algorithm>

#include "core/check.h"
#include "core/isa.h"
#include "core/ops_internal.h"

namespace strata {

using internal::row_grain;

void moe_top_k(ThreadPool& pool, const float* logits, size_t logits_stride, int64_t n_expert,
               int64_t rows, int64_t k, int32_t* ids, size_t ids_stride) {
  STRATA_CHECK(k >= 1 && k <= n_expert && n_expert <= kMaxExperts, "moe_top_k: bad k or n_expert");
  pool.parallel_for(rows, row_grain(n_expert * 8), [&](int, int64_t begin, int64_t end) {
    ref::moe_top_k(logits + static_cast<size_t>(begin) * logits_stride, logits_stride, n_expert,
                   end - begin, k, ids + static_cast<size_t>(begin) * ids_stride, ids_stride);
  });
}

void moe_gate(ThreadPool& pool, const float* logits, size_t logits_stride, int64_t n_expert,
              const int32_t* ids, size_t ids_stride, int64_t k, int64_t rows, MoeGating gating,
              bool normalise, float scale, float* w, size_t w_stride) {
  pool.parallel_for(rows, row_grain(n_expert * 4), [&](int, int64_t begin, int64_t end) {
    const auto b = static_cast<size_t>(begin);
    ref::moe_gate(logits + b * logits_stride, logits_stride, n_expert, ids + b * ids_stride,
                  ids_stride, k, end - begin, gating, normalise, scale, w + b * w_stride, w_stride);
  });
}

// Plain adds, which the compiler vectorises: no SIMD path of our own is needed for the bits, and
// n x n_used adds per token sit beside matmuls that read n_used experts' matrices.
void moe_add_id(ThreadPool& pool, const float* x, size_t x_slot_stride, size_t x_tok_stride,
                const float* b, size_t b_stride, const int32_t* ids, size_t ids_stride, float* y,
                size_t y_slot_stride, size_t y_tok_stride, int64_t n, int64_t n_used,
                int64_t rows) {
  pool.parallel_for(rows, row_grain(n * n_used), [&](int, int64_t begin, int64_t end) {
    const auto t = static_cast<size_t>(begin);
    ref::moe_add_id(x + t * x_tok_stride, x_slot_stride, x_tok_stride, b, b_stride,
                    ids + t * ids_stride, ids_stride, y + t * y_tok_stride, y_slot_stride,
                    y_tok_stride, n, n_used, end - begin);
  });
}

void moe_sum(ThreadPool& pool, const float* y, size_t y_slot_stride, size_t y_tok_stride,
             const float* w, size_t w_stride, float* out, size_t out_stride, int64_t n,
             int64_t n_used, int64_t rows) {
  auto* fn = isa_active() >= Isa::kAvx2 ? &internal::avx2::moe_sum : &ref::moe_sum;
  pool.parallel_for(rows, row_grain(n * n_used), [&](int, int64_t begin, int64_t end) {
    const auto b = static_cast<size_t>(begin);
    fn(y + b * y_tok_stride, y_slot_stride, y_tok_stride, w + b * w_stride, w_stride,
       out + b * out_stride, out_stride, n, n_used, end - begin);
  });
}

}  // namespace strata
