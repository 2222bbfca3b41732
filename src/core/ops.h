// CPU kernels for the graph ops (except matmul, see matmul.h). Each has a scalar reference in
// ops_ref.cc (namespace strata::ref) that the SIMD path is tested against.
//
// Conventions: a "row" is the innermost (contiguous) dimension, as in GGML: a [n, rows] tensor
// is `rows` rows of n values. Strides are in elements for float buffers and in bytes for
// typed (possibly quantised) buffers. Threads split rows (or heads), never a reduction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace strata {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight   (weight may be null: no scaling).
// F32 x [n, rows], weight [n], y [n, rows]. y may alias x.
void rms_norm(ThreadPool& pool, const float* x, size_t x_stride, const float* weight, float* y,
              size_t y_stride, int64_t n, int64_t rows, float eps);
// The same on the calling thread alone (same bits), for a caller that splits the rows over a
// pass of its own.
void rms_norm_serial(const float* x, size_t x_stride, const float* weight, float* y,
                     size_t y_stride, int64_t n, int64_t rows, float eps);

enum class BinaryOp { kAdd, kMul };
// y[r] = a[r] op b[r % b_rows]: b is either as many rows as a or broadcast (b_rows = 1).
// F32 [n, rows]; y may alias a.
void binary(ThreadPool& pool, BinaryOp op, const float* a, size_t a_stride, const float* b,
            size_t b_stride, int64_t b_rows, float* y, size_t y_stride, int64_t n, int64_t rows);

// y = silu(gate) * up. F32 [n, rows]; y may alias gate or up.
void swiglu(ThreadPool& pool, const float* gate, size_t gate_stride, const float* up,
            size_t up_stride, float* y, size_t y_stride, int64_t n, int64_t rows);
// The same on the calling thread alone (same bits).
void swiglu_serial(const float* gate, size_t gate_stride, const float* up, size_t up_stride,
                   float* y, size_t y_stride, int64_t n, int64_t rows);

enum class RopeMode : int32_t {
  kNormal = 0,  // llama: rotate pairs (2i, 2i+1)
  kNeox = 2,    // qwen2/3, neox: rotate pairs (i, i + n_rot/2)
};
// Rotates the first n_rot dims of each head of x in place. F32 x [head_dim, n_head, n_tokens]
// with head stride head_dim and token stride tok_stride (elements); pos I32 [n_tokens].
// theta_i = pos * freq_scale * freq_base^(-2i/n_rot).
void rope(ThreadPool& pool, float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens,
          size_t tok_stride, const int32_t* pos, int64_t n_rot, RopeMode mode, float freq_base,
          float freq_scale);

// y[i] = dequantize(table row ids[i]). table: dtype rows of n elements, row_bytes apart;
// ids are checked by the caller against n_table_rows. y F32 [n * planes, n_ids], y_stride
// elements. With planes > 1, a table row is that many pieces of n, plane_bytes apart, and y's
// row their values one after the other (a head-major KV cache: a plane per kv head). A device
// layout's table (core/rows16.h: a tied embedding that is also the output matrix) is one matrix
// of n_table_rows rows, each read back to its base type's row first; it has one plane.
void get_rows(ThreadPool& pool, DType dtype, const void* table, size_t row_bytes, int64_t n,
              const int32_t* ids, int64_t n_ids, float* y, size_t y_stride,
              int64_t n_table_rows = 0, int64_t planes = 1, size_t plane_bytes = 0);

// dst row idx[i] = convert(src row i). dst dtype F32, F16 (round to nearest even) or Q8_0
// (quantize_row_q8_0: n a multiple of 32), rows dst_row_bytes apart. The idx must be distinct (rows
// are written in parallel). F32 src [n * planes, n_rows]: piece p of n values of src row i goes to
// plane p of dst row idx[i], plane_bytes further on (get_rows' planes).
void set_rows(ThreadPool& pool, DType dst_dtype, void* dst, size_t dst_row_bytes, const float* src,
              size_t src_stride, int64_t n, const int32_t* idx, int64_t n_rows, int64_t planes = 1,
              size_t plane_bytes = 0);

// What some models add to attention: a sliding window (a token attends to the last `window`
// of its cells; 0: all of them, which assumes a list holds consecutive positions, as the
// engine's lists do), soft-capping of the scores (score = softcap * tanh(score / softcap);
// 0: none) and sinks (gpt-oss): F32 [n_head], a learned logit per query head that joins the
// softmax's maximum and denominator but weighs no V row, so that a head may attend to nothing:
// p_c = exp(s_c - m) / (sum_c exp(s_c - m) + exp(sink - m)), m the maximum of the scores and
// the sink. nullptr: none.
struct AttentionExtra {
  int64_t window = 0;
  float softcap = 0.0f;
  const float* sinks = nullptr;
};

// Where a KV cache keeps kv head h of cell c: its head_dim values, packed, start at
// k + c * cell_bytes + h * head_bytes (the same for v). Cell-major (kv_cell_major, the layout of
// llama.cpp's cache): a cell's heads side by side, head_bytes = head_dim values. Head-major: each
// kv head's cells side by side, cell_bytes = head_dim values, so that a thread that attends with
// one kv head reads one stretch of memory.
struct KvStrides {
  size_t cell_bytes;
  size_t head_bytes;
};

// Cells of row_bytes that hold their heads side by side.
inline KvStrides kv_cell_major(size_t row_bytes, int64_t head_dim, DType kv_dtype) {
  return {row_bytes, dtype_row_bytes(kv_dtype, head_dim)};
}

// Attention of n_tokens queries over the KV cache.
//   q    F32 [head_dim, n_head, n_tokens], token stride q_tok_stride (elements)
//   k, v kv_dtype (F32, F16, or Q8_0 with head_dim a multiple of 32) caches of n_head_kv heads
//        of head_dim values per cell (a Q8_0 head reads as its exact q * d floats): kv head
//        h of cell c at k + c * kv.cell_bytes + h * kv.head_bytes (the same for v)
//   cells I32 [max_len, n_lists]: list l is the cache cells of one sequence in position order
//   tok  I32 [2, n_tokens]: token t attends to the first tok[2t+1] cells of list tok[2t]
//   out  F32 [head_dim, n_head, n_tokens], token stride out_tok_stride
// Grouped-query: query head h reads kv head h / (n_head / n_head_kv). softmax(q.k * scale) has
// the maximum score subtracted (numerically stable), and every sum runs in cell order, so the
// result for a token depends only on its own sequence's cells, never on the batch it sits in.
// A token with no cells gets zeros. out must not overlap q.
void attention(ThreadPool& pool, const float* q, size_t q_tok_stride, int64_t head_dim,
               int64_t n_head, int64_t n_tokens, DType kv_dtype, const void* k, const void* v,
               KvStrides kv, int64_t n_head_kv, const int32_t* cells, int64_t max_len,
               const int32_t* tok, float scale, float* out, size_t out_tok_stride,
               const AttentionExtra& extra = {});

// out[r] = index of the largest value of row r (the first one on ties). F32 [n, rows].
void argmax(ThreadPool& pool, const float* x, size_t x_stride, int64_t n, int64_t rows,
            int32_t* out);

namespace ref {
void rms_norm(const float* x, size_t x_stride, const float* weight, float* y, size_t y_stride,
              int64_t n, int64_t rows, float eps);
void binary(BinaryOp op, const float* a, size_t a_stride, const float* b, size_t b_stride,
            int64_t b_rows, float* y, size_t y_stride, int64_t n, int64_t rows);
void swiglu(const float* gate, size_t gate_stride, const float* up, size_t up_stride, float* y,
            size_t y_stride, int64_t n, int64_t rows);
void rope(float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens, size_t tok_stride,
          const int32_t* pos, int64_t n_rot, RopeMode mode, float freq_base, float freq_scale);
void attention(const float* q, size_t q_tok_stride, int64_t head_dim, int64_t n_head,
               int64_t n_tokens, DType kv_dtype, const void* k, const void* v, KvStrides kv,
               int64_t n_head_kv, const int32_t* cells, int64_t max_len, const int32_t* tok,
               float scale, float* out, size_t out_tok_stride, const AttentionExtra& extra = {});
}  // namespace ref

}  // namespace strata
