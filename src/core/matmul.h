// Matrix multiplication of a weight matrix in any supported dtype by F32 activations.
//
//   W  dtype [k, n]: n rows of k elements, row r at w + r * w_row_bytes
//   X  F32 [k, m]:   m columns (tokens), column j at x + j * x_stride (elements)
//   Y  F32 [n, m]:   y[j * y_stride + r] = dot(W row r, X column j)
//
// Activations are quantised on the fly where the weight type has an integer dot product
// (Q8_0 blocks for q4_0/q8_0, Q8_K blocks for the K-quants). Threads split the n output rows,
// never k: each output element is the same sequence of operations whatever the thread count
// and whatever m is, so a token's result does not depend on the batch it shares.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace strata {

void matmul(ThreadPool& pool, DType w_dtype, const void* w, size_t w_row_bytes, int64_t n,
            int64_t k, const float* x, size_t x_stride, int64_t m, float* y, size_t y_stride);

}  // namespace strata
