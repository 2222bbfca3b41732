// CPU kernels of a mixture-of-experts layer around its expert matmuls (matmul_id, matmul.h):
// the router's top-k expert selection, the gating weights of the selected experts, the
// experts' biases (gpt-oss) and the weighted sum of the experts' outputs. Each has a scalar
// reference (namespace ref); moe_sum has an AVX2 path with the same operations, bit for bit.
//
// Every result of a token depends on that token's row alone, by a fixed sequence of
// operations: selection is a total order (no tie or NaN is left to the sort or the SIMD
// width), and threads split tokens, never a reduction, so a token's experts and weights do not
// depend on the batch it sits in or on the thread count.
//
// Conventions as core/ops.h: [n, rows] tensors are rows of n values; strides in elements.
// Non-goal: the router's matmul (a plain mul_mat) and the experts' activation (swiglu).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace strata {

// The most experts a layer may have. Qwen3-235B has 128, gpt-oss 128, DeepSeek-V3 256; 512
// leaves room and bounds a row's selection to a few KiB of stack, whatever a peer sends.
constexpr int64_t kMaxExperts = 512;

// How moe_gate turns the router logits into the weights of the selected experts. Stored in
// graphs (the op's i0): never renumber.
enum class MoeGating : int32_t {
  kSoftmax = 0,          // softmax over all n_expert logits, then the selected taken (qwen3moe)
  kSigmoid = 1,          // sigmoid of each selected logit
  kSoftmaxSelected = 2,  // softmax over the k selected logits only (gpt-oss)
};

// Whether expert a (logit xa) ranks before expert b (logit xb): the larger logit, then the
// lower index; a NaN ranks below every number (NaNs among themselves by index). A strict total
// order, so the selection is unique.
inline bool moe_ranks_before(float xa, int64_t a, float xb, int64_t b) {
  const bool nan_a = std::isnan(xa);
  const bool nan_b = std::isnan(xb);
  if (nan_a != nan_b) return nan_b;
  if (!nan_a && xa != xb) return xa > xb;
  return a < b;
}

// ids row r = the k experts of row r ranking first (moe_ranks_before), in rank order.
// F32 logits [n_expert, rows]; I32 ids [k, rows]. 1 <= k <= n_expert <= kMaxExperts.
void moe_top_k(ThreadPool& pool, const float* logits, size_t logits_stride, int64_t n_expert,
               int64_t rows, int64_t k, int32_t* ids, size_t ids_stride);

// The weights of the k experts selected for each row (ids, each in [0, n_expert): the caller
// checks them, they may come from a peer).
//   kSoftmax:         max of the row's logits in index order, e = exp(x - max), their sum in
//                     index order; w[s] = e[ids[s]] / sum
//   kSigmoid:         w[s] = 1 / (1 + exp(-x[ids[s]]))
//   kSoftmaxSelected: the same softmax over x[ids[0]], ..., x[ids[k-1]] in slot order
// then, with `normalise`, w[s] = w[s] / (sum of the k weights in slot order), and last
// w[s] = w[s] * scale. F32 logits [n_expert, rows]; I32 ids [k, rows]; F32 w [k, rows].
void moe_gate(ThreadPool& pool, const float* logits, size_t logits_stride, int64_t n_expert,
              const int32_t* ids, size_t ids_stride, int64_t k, int64_t rows, MoeGating gating,
              bool normalise, float scale, float* w, size_t w_stride);

// out[:, t] = sum over s in slot order of w[s, t] * y[:, s, t], each step one fused multiply-add
// from zero: acc = fma(w[s, t], y[i, s, t], acc). F32 y [n, n_used, rows], slot s of row t at
// y + t * y_tok_stride + s * y_slot_stride; w [n_used, rows]; out [n, rows]. out must not
// overlap y.
void moe_sum(ThreadPool& pool, const float* y, size_t y_slot_stride, size_t y_tok_stride,
             const float* w, size_t w_stride, float* out, size_t out_stride, int64_t n,
             int64_t n_used, int64_t rows);

// Per-expert biases (gpt-oss): y[:, s, t] = x[:, s, t] + b[:, ids[s, t]]. F32 x and y
// [n, n_used, rows] with the strides of moe_sum's y (y may be x); F32 b [n, n_expert], row e at
// b + e * b_stride; I32 ids [n_used, rows], each in [0, n_expert) (the caller checks them).
// One add per element: any order or vector width gives the same bits.
void moe_add_id(ThreadPool& pool, const float* x, size_t x_slot_stride, size_t x_tok_stride,
                const float* b, size_t b_stride, const int32_t* ids, size_t ids_stride, float* y,
                size_t y_slot_stride, size_t y_tok_stride, int64_t n, int64_t n_used, int64_t rows);

namespace ref {
void moe_add_id(const float* x, size_t x_slot_stride, size_t x_tok_stride, const float* b,
                size_t b_stride, const int32_t* ids, size_t ids_stride, float* y,
                size_t y_slot_stride, size_t y_tok_stride, int64_t n, int64_t n_used, int64_t rows);
void moe_top_k(const float* logits, size_t logits_stride, int64_t n_expert, int64_t rows, int64_t k,
               int32_t* ids, size_t ids_stride);
void moe_gate(const float* logits, size_t logits_stride, int64_t n_expert, const int32_t* ids,
              size_t ids_stride, int64_t k, int64_t rows, MoeGating gating, bool normalise,
              float scale, float* w, size_t w_stride);
void moe_sum(const float* y, size_t y_slot_stride, size_t y_tok_stride, const float* w,
             size_t w_stride, float* out, size_t out_stride, int64_t n, int64_t n_used,
             int64_t rows);
}  // namespace ref

}  // namespace strata
