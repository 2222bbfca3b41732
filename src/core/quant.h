// Quantisation: conversion of rows of any dtype strata has code for to and from float.
// These are the scalar references; they define the formats bit for bit as GGML does (block
// layouts in quant_blocks.h) and never depend on the instruction set, so a file written on one
// machine has the same bytes as on any other.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata {

// True for the dtypes whose rows can be converted: every dtype with kernels
// (dtype_info(t).has_kernels), and the activation formats of the dot products (q8_K...).
bool dtype_can_convert(DType t);

// dst[0..n) = src row of n elements. n must be a multiple of the block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Writes dtype_row_bytes(t, n) bytes. Deterministic: same input, same bytes.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace strata
