// Pieces shared by the scalar (ops_ref.cc) and SIMD (ops_avx2.cc, attention_*.cc) kernels and the
// dispatch in ops.cc. Not part of the public interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/isa.h"
#include "core/ops.h"

namespace strata::internal {

// The arguments of attention(), bundled for the per-(token, head) kernels.
struct AttentionArgs {
  const float* q;
  size_t q_tok_stride;
  int64_t head_dim;
  int64_t n_head;
  int64_t n_tokens;
  DType kv_dtype;
  const void* k;
  const void* v;
  KvStrides kv;
  int64_t n_head_kv;
  const int32_t* cells;
  int64_t max_len;
  const int32_t* tok;
  float scale;
  float* out;
  size_t out_tok_stride;
  AttentionExtra extra = {};
};

// The inline helpers have internal linkage (the unnamed namespace): the SIMD kernel files include
// this header, and an inline function with external linkage is merged across files by the
// linker, which could hand a machine without AVX-512 the copy compiled for it.
namespace {

// Rows per task so that a task has at least ~16K elements: below that, waking a thread costs
// more than the work.
inline int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
}

// cos/sin of theta_i = pos * freq_scale * freq_base^(-2i/n_rot) for i < n_rot / 2, computed as
// ggml does (the power by repeated multiplication in float, then scaled) so that the angles,
// and therefore the rotated values, are the ones llama.cpp produces.
inline void rope_angles(int32_t pos, int64_t n_rot, float freq_base, float freq_scale,
                        float* cos_out, float* sin_out) {
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float t = freq_scale * theta;
    cos_out[i] = std::cos(t);
    sin_out[i] = std::sin(t);
    theta *= theta_scale;
  }
}

// The cells a token attends to: the first tok[2t+1] of its list, or of those the last
// `window` (sliding-window attention).
inline const int32_t* attention_cells(const AttentionArgs& a, int64_t t, int64_t* len) {
  const int32_t* cells = a.cells + static_cast<int64_t>(a.tok[2 * t]) * a.max_len;
  *len = a.tok[2 * t + 1];
  if (a.extra.window > 0 && *len > a.extra.window) {
    cells += *len - a.extra.window;
    *len = a.extra.window;
  }
  return cells;
}

// A score as every attention kernel computes it from the dot product of q and k.
inline float attention_score(const AttentionArgs& a, float dot) {
  const float s = dot * a.scale;
  if (a.extra.softcap > 0.0f) return std::tanh(s / a.extra.softcap) * a.extra.softcap;
  return s;
}

}  // namespace

// Scalar attention of token t, query head h. scratch: at least max_len floats.
void attention_head_ref(const AttentionArgs& a, int64_t t, int64_t h, float* scratch);

// Attention of the tokens toks[0..n), which must all attend to one list, for the query heads
// [h0, h1), which must share one kv head; n <= kAttentionMaxTileTokens. Each output element is
// computed exactly as avx2::attention_heads_untiled computes it, at every instruction set.
// scratch: attention_tile_scratch_floats(a, n, h1 - h0, span) floats, span >= every token's cell
// count (one layout for every instruction set: they share the tiling of attention_tile.h).
inline constexpr int64_t kAttentionMaxTileTokens = 16;
using AttentionTileFn = void (*)(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0,
                                 int64_t h1, float* scratch);
size_t attention_tile_scratch_floats(const AttentionArgs& a, int64_t n, int64_t n_heads,
                                     int64_t span);

// The instruction set whose attention kernel attention() runs at `isa`: a level without a kernel
// of its own runs the one below (AVX-VNNI runs AVX2's: its dot products are in float).
Isa attention_kernel_level(Isa isa);

namespace avx2 {

// Same contracts as the functions of ops.h / ops_ref.cc, for a range of rows.
void rms_norm(const float* x, size_t x_stride, const float* weight, float* y, size_t y_stride,
              int64_t n, int64_t rows, float eps);
void binary(BinaryOp op, const float* a, size_t a_stride, const float* b, size_t b_stride,
            int64_t b_rows, float* y, size_t y_stride, int64_t n, int64_t rows);
void swiglu(const float* gate, size_t gate_stride, const float* up, size_t up_stride, float* y,
            size_t y_stride, int64_t n, int64_t rows);
void rope(float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens, size_t tok_stride,
          const int32_t* pos, int64_t n_rot, RopeMode mode, float freq_base, float freq_scale);
int32_t argmax_row(const float* x, int64_t n);
// As ref::moe_sum (core/ops_moe.h), the same bits.
void moe_sum(const float* y, size_t y_slot_stride, size_t y_tok_stride, const float* w,
             size_t w_stride, float* out, size_t out_stride, int64_t n, int64_t n_used,
             int64_t rows);

// An AttentionTileFn.
void attention_tile(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
                    float* scratch);

// Attention of token t for the query heads [h0, h1), which must share one kv head, one token at
// a time: the kernel before tiling, kept as the tests' bitwise oracle. scratch:
// attention_untiled_scratch_floats(a) floats.
void attention_heads_untiled(const AttentionArgs& a, int64_t t, int64_t h0, int64_t h1,
                             float* scratch);
size_t attention_untiled_scratch_floats(const AttentionArgs& a);

}  // namespace avx2

namespace avx512 {

// An AttentionTileFn: the same bits as avx2::attention_tile.
void attention_tile(const AttentionArgs& a, const int32_t* toks, int64_t n, int64_t h0, int64_t h1,
                    float* scratch);

}  // namespace avx512

}  // namespace strata::internal
