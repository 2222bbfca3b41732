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
#include <functional>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace strata {

void matmul(ThreadPool& pool, DType w_dtype, const void* w, size_t w_row_bytes, int64_t n,
            int64_t k, const float* x, size_t x_stride, int64_t m, float* y, size_t y_stride);

// One weight matrix of matmul_multi and where its product goes: W dtype [k, n], row r at
// w + r * w_row_bytes; Y F32 [n, m], y[j * y_stride + r].
struct MatmulPart {
  DType w_dtype;
  const void* w;
  size_t w_row_bytes;
  int64_t n;
  float* y;
  size_t y_stride;
};

// Writes the activation columns [j0, j1); see matmul_multi.
using MatmulColumnsFn = std::function<void(int64_t j0, int64_t j1)>;

// The products of several weight matrices with the same activations X F32 [k, m] (a layer's q,
// k and v; gate and up), in at most two passes over the pool instead of one or two per matrix:
//   1. the columns of X are quantised once per activation format the parts' kernels read,
//      threads splitting the columns (on the caller alone when they are few: no barrier). When
//      `columns` is given, a thread first calls it for its columns, which writes them: the op
//      that produces X (a norm) runs in the same pass.
//   2. the rows of all parts, concatenated, are split over the threads by weight bytes.
// Every output element is computed exactly as matmul() computes it: the same bits as one matmul
// per part, whatever the thread count. The Y regions must not overlap X, a weight or each other.
void matmul_multi(ThreadPool& pool, std::span<const MatmulPart> parts, int64_t k, const float* x,
                  size_t x_stride, int64_t m, const MatmulColumnsFn* columns = nullptr);

}  // namespace strata
