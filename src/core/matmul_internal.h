// Shared by matmul.cc and its per-ISA kernel files: the prepared arguments of one call and
// the entry points of each path. Not part of the public interface.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::matmul_detail {

// The activation format a weight dtype's dot product consumes: kQ8_0, kQ8_K, or kF32 (the
// activations are used as given).
DType activation_dtype(DType w);

struct MatmulArgs {
  DType dtype;
  const uint8_t* w;  // row r at w + r * w_row_bytes
  size_t w_row_bytes;
  int64_t k;
  int64_t m;
  const float* x;  // F32 activations, column j at x + j * x_stride (used for kF32 activations)
  size_t x_stride;
  const uint8_t* xq;  // quantised activations, column j at xq + j * xq_col_bytes
  size_t xq_col_bytes;
  float* y;  // y[j * y_stride + r]
  size_t y_stride;
};

// Compute y for the rows [r0, r1) and every column. Each output element's value depends only
// on its weight row and its activation column (never on m, the tile or the row range).
void matmul_rows_ref(const MatmulArgs& a, int64_t r0, int64_t r1);
void matmul_rows_avx2(const MatmulArgs& a, int64_t r0, int64_t r1);

// A Q8_0 activation column is its blocks followed (4-byte aligned) by their scales as floats,
// so that the SIMD kernels do not convert an f16 scale per block per weight row. The scales
// are spread by pairs of blocks (b, b + 1) over 8 floats, [d_b d_b d_b1 d_b1] twice, the lane
// order in which the AVX2 kernel sums a pair; an odd last block is paired with a zero scale.
inline size_t q8_0_scales_offset(int64_t k) {
  return (static_cast<size_t>(k / 32) * 34 + 3) & ~size_t{3};
}
inline size_t q8_0_column_bytes(int64_t k) {
  return q8_0_scales_offset(k) + static_cast<size_t>((k / 32 + 1) / 2) * 32;
}
inline void q8_0_set_scale(float* scales, int64_t b, float d) {
  float* s = scales + 8 * (b / 2) + 2 * (b % 2);
  s[0] = s[1] = s[4] = s[5] = d;
}

// Quantises one activation column of k elements to `act` (kQ8_0 with its float scales, or
// kQ8_K). The AVX2 version
// produces the same bytes as quantize_row (tested), so both paths see identical activations.
void quantize_activation_ref(DType act, const float* x, void* dst, int64_t k);
void quantize_activation_avx2(DType act, const float* x, void* dst, int64_t k);

// The AVX2 Q4_0 kernel's activation column: the Q8_0 quantisation of x (same values as
// quantize_row), regrouped by pairs of blocks (b, b + 1) so that one 256-bit weight register
// holds the low (or high) nibbles of both blocks. An odd last block is paired with zeros.
//   lo:  elements 0..15 of block b, then 0..15 of block b + 1
//   hi:  elements 16..31 of block b, then 16..31 of block b + 1
//   d:   the blocks' scales as floats, each repeated over the 4 lanes of its block
//   off: 8 * (sum of the activations that lane i of the kernel's integer sums covers), lane
//        i < 4 of block b covering elements 4i..4i+3 and 16+4i..16+4i+3: the nibbles are
//        used unsigned (0..15) and this takes their +8 bias back out, exactly.
struct Q4_0ActPair {
  int8_t lo[32];
  int8_t hi[32];
  float d[8];
  int32_t off[8];
};
static_assert(sizeof(Q4_0ActPair) == 128);

inline size_t q4_0_act_column_bytes(int64_t k) {
  return static_cast<size_t>((k / 32 + 1) / 2) * sizeof(Q4_0ActPair);
}
void pack_q4_0_activation_avx2(const float* x, void* dst, int64_t k);

}  // namespace strata::matmul_detail
