// The per-dtype row conversions that the dtype table (dtype_traits.cc) points at, one family
// per file: quant_float.cc, quant_legacy.cc (32-element blocks), quant_k.cc (256-element
// super-blocks). All take n, a multiple of the block size, and use the layouts of
// quant_blocks.h. Not part of the public interface: use quantize_row / dequantize_row.
#pragma once

#include <cstdint>

namespace strata {

// ---- quant_float.cc ----
void dequantize_row_f32(const void* src, float* dst, int64_t n);
void quantize_row_f32(const float* src, void* dst, int64_t n);
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);

// ---- quant_float_avx2.cc: F16C, bit-identical to the scalar rows ----
void dequantize_row_f16_avx2(const void* src, float* dst, int64_t n);
void quantize_row_f16_avx2(const float* src, void* dst, int64_t n);

// ---- quant_legacy.cc ----
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);
void quantize_row_mxfp4(const float* src, void* dst, int64_t n);

// ---- quant_k.cc ----
void dequantize_row_q4_k(const void* src, float* dst, int64_t n);
void quantize_row_q4_k(const float* src, void* dst, int64_t n);
void dequantize_row_q5_k(const void* src, float* dst, int64_t n);
void quantize_row_q5_k(const float* src, void* dst, int64_t n);
void dequantize_row_q6_k(const void* src, float* dst, int64_t n);
void quantize_row_q6_k(const float* src, void* dst, int64_t n);
void dequantize_row_q8_k(const void* src, float* dst, int64_t n);
void quantize_row_q8_k(const float* src, void* dst, int64_t n);
void dequantize_row_q2_k(const void* src, float* dst, int64_t n);
void quantize_row_q2_k(const float* src, void* dst, int64_t n);
void dequantize_row_q3_k(const void* src, float* dst, int64_t n);
void quantize_row_q3_k(const float* src, void* dst, int64_t n);
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n);

}  // namespace strata
