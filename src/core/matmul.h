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
//   2. the rows of all parts, concatenated, are split over the threads by weight bytes; a thread
//      done with its rows takes the rest of another's (matmul_claims_stolen counts those takes).
// Every output element is computed exactly as matmul() computes it: the same bits as one matmul
// per part, whatever the thread count. The Y regions must not overlap X, a weight or each other.
void matmul_multi(ThreadPool& pool, std::span<const MatmulPart> parts, int64_t k, const float* x,
                  size_t x_stride, int64_t m, const MatmulColumnsFn* columns = nullptr);

// Row ranges that threads have taken from another thread's share since the process started
// (matmul, matmul_multi, matmul_id): for tests, which must see the taking happen.
uint64_t matmul_claims_stolen();

// The expert-indexed matmul of a mixture-of-experts layer (the graph op mul_mat_id):
//   W   dtype [k, n, n_expert]: expert e's row r at w + e * w_expert_bytes + r * w_row_bytes
//   X   F32 [k, x_m, n_tokens]: column (s, t) at x + t * x_tok_stride + s * x_slot_stride
//       (elements); x_m = 1: every slot of a token multiplies the token's one column
//   ids I32 [n_used, n_tokens]: ids[t * n_used + s] in [0, n_expert), checked by the caller
//       (ids may come from a peer)
//   Y   F32 [n, n_used, n_tokens]: column (s, t) at y + t * y_tok_stride + s * y_slot_stride
// Y(s, t) = W[ids(s, t)] X(x_m == 1 ? 0 : s, t). Only the experts some token selected are read:
// the (token, slot) pairs are grouped by expert (expert ascending, then token, then slot), each
// pair's activation column is gathered (quantised to the kernel's format) into the pool's
// scratch, and every expert's rows run once over its group's columns, the rows of all experts
// split over the threads by weight bytes in one pass. Each output element is the kernel's dot of
// one weight row and one activation column, computed exactly as matmul() computes it with that
// column alone: the grouping, the batch and the thread count never change a bit.
//
// The gathered columns and outputs use at most max(scratch_limit, one pair's) bytes of scratch
// (0: kMatmulIdScratchBytes): past that, the pairs run in consecutive slices of the grouped
// order, and an expert cut by a slice boundary reads its rows once per slice. Y must not
// overlap X or W.
struct MatmulIdArgs {
  DType w_dtype;
  const void* w;
  size_t w_row_bytes;
  size_t w_expert_bytes;
  int64_t k;
  int64_t n;
  int64_t n_expert;
  const float* x;
  size_t x_slot_stride;
  size_t x_tok_stride;
  int64_t x_m;
  const int32_t* ids;
  int64_t n_used;
  int64_t n_tokens;
  float* y;
  size_t y_slot_stride;
  size_t y_tok_stride;
  size_t scratch_limit = 0;
};
// 32 MiB: a prompt chunk of 512 tokens with 8 experts each (4096 pairs) of a 2048-wide model
// gathers ~21 MiB and runs in one slice; the bound keeps a batch a peer sends from asking for
// more than this beyond the one pair's column that its own buffers already hold.
constexpr size_t kMatmulIdScratchBytes = size_t{32} << 20;
void matmul_id(ThreadPool& pool, const MatmulIdArgs& a);

// Several expert-indexed matmuls of the same input, experts and weight dtype (a layer's gate and
// up experts), as one: the pairs are grouped and their columns gathered once, and the rows of
// every matrix of every selected expert are split over the threads in one pass (an expert's
// matrices next to each other). Each output element is the one matmul_id gives for its matrix
// alone. The scratch bound counts the outputs of all the matrices.
// When `columns` is given, X has one column per pair (x_m == n_used), and columns(p0, p1) writes
// the columns of pairs [p0, p1) (p = t * n_used + s), each once, before any is read and before
// any output is written: the op that produces X (the gated activation) runs in the pass that
// gathers the columns, or, when the pairs run in several scratch slices, in a pass before it.
constexpr size_t kMaxIdMatrices = 4;
void matmul_id_multi(ThreadPool& pool, std::span<const MatmulIdArgs> mats,
                     const MatmulColumnsFn* columns = nullptr);

}  // namespace strata
