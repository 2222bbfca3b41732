// Shared by matmul.cc, the dtype table and the kernel files: the prepared arguments of one call,
// the activation column layouts and the kernels of each dtype family. Not part of the public
// interface.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype_traits.h"

namespace strata::matmul_detail {

struct MatmulArgs {
  const uint8_t* w;  // row r at w + r * w_row_bytes
  size_t w_row_bytes;
  int64_t k;
  int64_t m;
  const float* x;  // F32 activations, column j at x + j * x_stride
  size_t x_stride;
  const uint8_t* xq;    // the kernel's activation columns, column j at xq + j * xq_col_bytes;
  size_t xq_col_bytes;  // nullptr when the kernel reads x as given
  float* y;             // y[j * y_stride + r]
  size_t y_stride;
  uint8_t* work = nullptr;  // this thread's MatmulKernel::work_bytes, 64-byte aligned
  // Rows of the whole matrix that w starts (an expert's, in an expert-indexed matmul): where a
  // rows-in-lanes layout's tail starts (core/rows16.h).
  int64_t n_rows = 0;

  // What the kernel reads for column j: its own activation column, or the F32 one.
  const void* column(int64_t j) const {
    return xq != nullptr ? static_cast<const void*>(xq + j * xq_col_bytes)
                         : static_cast<const void*>(x + j * x_stride);
  }
};

// The scalar reference kernel of a dot product `dot(weight row, activation column, k)`. Each
// output element's value depends only on its weight row and its activation column (never on
// m, the tile or the row range).
template <float (*kDot)(const uint8_t* w, const void* x, int64_t k)>
void rows_ref(const MatmulArgs& a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* w = a.w + r * a.w_row_bytes;
    for (int64_t j = 0; j < a.m; ++j) a.y[j * a.y_stride + r] = kDot(w, a.column(j), a.k);
  }
}

// ---- Activation columns ----

// Q8_0: the blocks of quantize_row_q8_0 followed (4-byte aligned) by their scales as floats,
// so that the SIMD kernels do not convert an f16 scale per block per weight row. The scales
// are spread by pairs of blocks (b, b + 1) over 8 floats, [d_b d_b d_b1 d_b1] twice, the lane
// order in which the AVX2 kernel sums a pair; an odd last block is paired with a zero scale.
size_t q8_0_scales_offset(int64_t k);
size_t q8_0_column_bytes(int64_t k);
inline void q8_0_set_scale(float* scales, int64_t b, float d) {
  float* s = scales + 8 * (b / 2) + 2 * (b % 2);
  s[0] = s[1] = s[4] = s[5] = d;
}
void quantize_act_q8_0_ref(const float* x, void* dst, int64_t k);
void quantize_act_q8_0_avx2(const float* x, void* dst, int64_t k);
// The Q8_0 rows-in-lanes kernels' column where they take the quants + 128 (dpbusd's unsigned
// operand): the Q8_0 column, which the tail rows' kernel reads, then per pair of blocks 8 int32
// starts, -128 * (the sum of the activations each lane of the pair covers), in the lanes' order
// (core/matmul_rows16_avx512.cc).
size_t q8_0_starts_offset(int64_t k);
size_t q8_0_starts_column_bytes(int64_t k);
void quantize_act_q8_0_starts_avx2(const float* x, void* dst, int64_t k);

// Q8_K: the blocks of quantize_row_q8_k, nothing else.
size_t q8_k_column_bytes(int64_t k);
void quantize_act_q8_k_avx2(const float* x, void* dst, int64_t k);

// Q8 with block sums: the column of the q4_1 / q5_0 / q5_1 / iq4_nl kernels, scalar and AVX2.
//   int8_t qs[k]     the quants of quantize_row_q8_0, block b at 32 * b
//   float d[nb8]     block b's scale: the f16 value Q8_0 stores, as a float
//   float s[nb8]     d[b] * sum(qs of block b): the sum Q8_1 carries, here in f32
//   int32_t sum[nb8] sum(qs of block b) itself, for kernels that bias their quants
// nb8 is the block count rounded up to 8, the number of blocks the AVX2 kernels take a step;
// the padding is zero.
int64_t q8_sum_padded_blocks(int64_t k);
size_t q8_sum_column_bytes(int64_t k);
void quantize_act_q8_sum_ref(const float* x, void* dst, int64_t k);
void quantize_act_q8_sum_avx2(const float* x, void* dst, int64_t k);

// The AVX2 and AVX-512 Q4_0 and MXFP4 kernels' activation column: the Q8_0 quantisation of x (same
// values as quantize_row), regrouped by pairs of blocks (b, b + 1) so that one 256-bit weight
// register holds the low (or high) nibbles of both blocks. An odd last block is paired with zeros.
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
size_t q4_0_pair_column_bytes(int64_t k);
void quantize_act_q4_0_pairs_avx2(const float* x, void* dst, int64_t k);

// ---- Rows in lanes (core/rows16.h) ----

// Rows [r0, r1) of a matrix in `layout` by `base`, a kernel of the layout's base type: each full
// group unpacked into a.work (16 rows of the base type) and multiplied there, the tail rows
// where they are. base's bits, whatever the layout. r0 and r1 are multiples of 16 or past the
// last full group (matmul's row splits are: see kRowAlign).
void rows16_by_base(const MatmulKernel& base, DType layout, const MatmulArgs& a, int64_t r0,
                    int64_t r1);
// The work area of a kernel on a layout of kBase: one unpacked group of 16 rows of k. Defined
// (and instantiated for each base type) in matmul_rows16.cc, compiled for every CPU.
template <DType kBase>
size_t rows16_work_bytes(int64_t k);

// ---- Kernels, one per (dtype, level) that has one ----

// matmul_float_ref.cc / matmul_float_avx2.cc
extern const MatmulKernel kF32Ref, kF16Ref, kBF16Ref;
extern const MatmulKernel kF32Avx2, kF16Avx2, kBF16Avx2;
// matmul_legacy_ref.cc / matmul_legacy_avx2.cc
extern const MatmulKernel kQ8_0Ref, kQ4_0Ref, kQ4_1Ref, kQ5_0Ref, kQ5_1Ref, kIQ4_NLRef, kMXFP4Ref;
extern const MatmulKernel kQ8_0Avx2, kQ4_0Avx2, kQ4_1Avx2, kQ5_0Avx2, kQ5_1Avx2, kIQ4_NLAvx2,
    kMXFP4Avx2;
// matmul_k_ref.cc / matmul_k_avx2.cc
extern const MatmulKernel kQ4_KRef, kQ5_KRef, kQ6_KRef, kQ2_KRef, kQ3_KRef, kIQ4_XSRef;
extern const MatmulKernel kQ4_KAvx2, kQ5_KAvx2, kQ6_KAvx2, kQ2_KAvx2, kQ3_KAvx2, kIQ4_XSAvx2;
// matmul_legacy_avxvnni.cc / matmul_k_avxvnni.cc: the AVX2 kernels with AVX-VNNI's dot
// products, the same bits
extern const MatmulKernel kQ8_0AvxVnni, kQ4_0AvxVnni, kQ4_1AvxVnni, kQ5_0AvxVnni, kQ5_1AvxVnni,
    kIQ4_NLAvxVnni, kMXFP4AvxVnni;
extern const MatmulKernel kQ4_KAvxVnni, kQ5_KAvxVnni, kQ6_KAvxVnni, kQ2_KAvxVnni, kQ3_KAvxVnni,
    kIQ4_XSAvxVnni;
// matmul_float_avx512.cc / matmul_legacy_avx512.cc / matmul_k_avx512.cc: the same bits as
// the AVX2 kernels
extern const MatmulKernel kF32Avx512, kF16Avx512, kBF16Avx512;
extern const MatmulKernel kQ8_0Avx512, kQ4_0Avx512, kMXFP4Avx512;
extern const MatmulKernel kQ4_KAvx512, kQ5_KAvx512, kQ6_KAvx512, kIQ4_XSAvx512;
// matmul_rows16.cc / matmul_rows16_avx2.cc / matmul_rows16_avxvnni.cc /
// matmul_rows16_avx512.cc: the layouts in rows in lanes, the bits of the base type's kernel of
// the same level
extern const MatmulKernel kQ4_K_R16Ref, kQ4_K_R16Avx2, kQ4_K_R16AvxVnni, kQ4_K_R16Avx512;
extern const MatmulKernel kQ6_K_R16Ref, kQ6_K_R16Avx2, kQ6_K_R16AvxVnni, kQ6_K_R16Avx512;
extern const MatmulKernel kIQ4_XS_R16Ref, kIQ4_XS_R16Avx2, kIQ4_XS_R16AvxVnni, kIQ4_XS_R16Avx512;
extern const MatmulKernel kQ5_K_R16Ref, kQ5_K_R16Avx2, kQ5_K_R16AvxVnni, kQ5_K_R16Avx512;
extern const MatmulKernel kQ3_K_R16Ref, kQ3_K_R16Avx2, kQ3_K_R16Avx512;
extern const MatmulKernel kQ2_K_R16Ref, kQ2_K_R16Avx2, kQ2_K_R16Avx512;
extern const MatmulKernel kQ8_0_R16Ref, kQ8_0_R16Avx2, kQ8_0_R16AvxVnni, kQ8_0_R16Avx512;
extern const MatmulKernel kQ4_0_R16Ref, kQ4_0_R16Avx2, kQ4_0_R16Avx512;
extern const MatmulKernel kMXFP4_R16Ref, kMXFP4_R16Avx2, kMXFP4_R16Avx512;

}  // namespace strata::matmul_detail
