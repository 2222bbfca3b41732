// Rows in lanes: a device layout of K-quant (and IQ4_XS, Q8_0, Q4_0, MXFP4) weights for SIMD
// kernels that give each of 16 rows a lane of every register (core/matmul_rows16_avx512.cc), so
// that one-column products need almost no shuffles: a register of quants holds 4 bytes of each of
// the 16 rows, its activations are one broadcast 32-bit word, a sub-block's scales one load of 16
// lanes.
//
// The layout of a matrix of n rows (a tensor of several matrices, experts, is laid out matrix by
// matrix): rows [16 i, 16 i + 16) are group i, which takes the bytes those rows take in the base
// type, its super-block b at byte b * 16 * sizeof(block) of the group (for the 32-element types,
// below, a pair of blocks takes a super-block's place). A last group of fewer than
// 16 rows (the tail) keeps the base layout, row r at r * row_bytes. So a layout changes no
// size, offset or stride: only the order of the bytes (for Q6_K, of the bits) within each full
// group.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "core/quant_blocks.h"

namespace strata {

inline constexpr int64_t kLaneRows = 16;

// One super-block of a group of Q4_K rows (DType::kQ4_K_R16). Row r's block is, rearranged: its
// d and dmin at d[r] and dmin[r]; 32-bit word i of its 12 scale bytes at scales[i][r]; bytes
// 4g..4g+3 of its 32-byte quant chunk j (low nibbles: sub-block 2j, high: 2j + 1) at qs[g][j][r].
// The kernel reads it in this order.
struct Q4KRows16 {
  uint16_t d[kLaneRows];
  uint16_t dmin[kLaneRows];
  uint32_t scales[3][kLaneRows];
  uint8_t qs[8][4][kLaneRows][4];
};
static_assert(sizeof(Q4KRows16) == kLaneRows * sizeof(BlockQ4_K));

// One super-block of a group of Q5_K rows (DType::kQ5_K_R16): Q4KRows16's arrangement, and the
// fifth bits: bytes 4g..4g+3 of row r's qh at qh[g][r] (byte 4g + t's bits 2j, 2j + 1 are
// those of the quants in byte 4g + t of chunk j, low and high nibble).
struct Q5KRows16 {
  uint16_t d[kLaneRows];
  uint16_t dmin[kLaneRows];
  uint32_t scales[3][kLaneRows];
  uint8_t qh[8][kLaneRows][4];
  uint8_t qs[8][4][kLaneRows][4];
};
static_assert(sizeof(Q5KRows16) == kLaneRows * sizeof(BlockQ5_K));

// One super-block of a group of Q2_K rows (DType::kQ2_K_R16). Row r's block is, rearranged: its d
// and dmin at d[r], dmin[r]; bytes 4m..4m+3 of its 16 scale bytes at scales[m][r]; its quants as
// Q3KRows16's low plane.
struct Q2KRows16 {
  uint16_t d[kLaneRows];
  uint16_t dmin[kLaneRows];
  uint8_t scales[4][kLaneRows][4];
  uint8_t low[8][2][kLaneRows][4];
};
static_assert(sizeof(Q2KRows16) == kLaneRows * sizeof(BlockQ2_K));

// One super-block of a group of Q3_K rows (DType::kQ3_K_R16). Row r's block is, rearranged: its
// d at d[r]; word i of its 12 scale bytes at scales[i][r]; its quants' two low bits as
// low[p][h][r], whose byte t holds in bit pair i those of element 32p + 16h + 4i + t; and their
// third bits (the file's hmask) as high[p][r], whose byte t holds in bit m that of element
// 32p + 4m + t. So a register of one [p][h] or [p] holds, per row, the bits of 4 elements of
// each of its sub-blocks' 4-element steps, each step taken out by a shift and an AND.
struct Q3KRows16 {
  uint16_t d[kLaneRows];
  uint32_t scales[3][kLaneRows];
  uint8_t low[8][2][kLaneRows][4];
  uint8_t high[8][kLaneRows][4];
};
static_assert(sizeof(Q3KRows16) == kLaneRows * sizeof(BlockQ3_K));

// One super-block of a group of Q6_K rows (DType::kQ6_K_R16). Row r's block is, rearranged: its
// 16 sub-block scales at scales[s][r], its d at d[r]; its quants as 6-bit values, for each
// 4-byte column l (0..7) and half h (elements 128h..128h+127): elements 128h + 32i + 4l + k (i
// = 0..2, k = 0..3) at q[l][h][i][r][k], each over bits 2i, 2i + 1 of element 128h + 96 + 4l +
// k's quant in its bits 6..7. The kernel reads it in this order, and takes three of a column's
// four quants with one AND each (the file's nibbles and 2-bit pieces need shifts to join).
struct Q6KRows16 {
  int8_t scales[16][kLaneRows];
  uint16_t d[kLaneRows];
  uint8_t q[8][2][3][kLaneRows][4];
};
static_assert(sizeof(Q6KRows16) == kLaneRows * sizeof(BlockQ6_K));

// One super-block of a group of IQ4_XS rows (DType::kIQ4_XS_R16). Row r's block is, rearranged:
// its d at d[r], scales_h at scales_h[r], its 4 scales_l bytes as the word scales_l[r]; bytes
// 4g..4g+3 of sub-block s's 16 bytes of quants (low nibbles: elements 4g..4g+3, high:
// 16+4g..16+4g+3) at qs[s][g][r].
struct IQ4XSRows16 {
  uint16_t d[kLaneRows];
  uint16_t scales_h[kLaneRows];
  uint32_t scales_l[kLaneRows];
  uint8_t qs[8][4][kLaneRows][4];
};
static_assert(sizeof(IQ4XSRows16) == kLaneRows * sizeof(BlockIQ4_XS));

// The 32-element types take a pair of blocks (64 elements) of each row as their unit, the pair
// their AVX2 kernels sum together, so that a group's rows are whole units as the K-quants' are:
// their layouts' dtype block is 64 elements, and a matrix whose rows are an odd number of blocks
// keeps the base type.
//
// A pair of blocks of a group of Q8_0 rows (DType::kQ8_0_R16). Row r's blocks are, rearranged:
// block h's d at d[h][r]; bytes 4t..4t+3 of the pair's 64 quants (block 0's, then block 1's) at
// qs[t][r], each quant stored plus 128 (its byte XOR 0x80): the unsigned operand of dpbusd.
struct Q8_0Rows16 {
  uint16_t d[2][kLaneRows];
  uint8_t qs[16][kLaneRows][4];
};
// The base type's bytes of that unit of one row.
struct BlockQ8_0x2 {
  BlockQ8_0 b[2];
};
static_assert(sizeof(BlockQ8_0x2) == 2 * sizeof(BlockQ8_0));
static_assert(sizeof(Q8_0Rows16) == kLaneRows * sizeof(BlockQ8_0x2));

// A pair of blocks of a group of Q4_0 rows (DType::kQ4_0_R16). Row r's blocks are, rearranged:
// block h's d at d[h][r]; bytes 4j..4j+3 of block h's 16 bytes of nibbles (low: elements
// 4j..4j+3, high: 16+4j..16+4j+3) at qs[4h + j][r]: the quants of lane 4h + j of the AVX2
// kernel's pair.
struct Q4_0Rows16 {
  uint16_t d[2][kLaneRows];
  uint8_t qs[8][kLaneRows][4];
};
struct BlockQ4_0x2 {
  BlockQ4_0 b[2];
};
static_assert(sizeof(BlockQ4_0x2) == 2 * sizeof(BlockQ4_0));
static_assert(sizeof(Q4_0Rows16) == kLaneRows * sizeof(BlockQ4_0x2));

// A pair of blocks of a group of MXFP4 rows (DType::kMXFP4_R16): Q4_0's arrangement, with block
// h's exponent at e[h][r].
struct MXFP4Rows16 {
  uint8_t e[2][kLaneRows];
  uint8_t qs[8][kLaneRows][4];
};
struct BlockMXFP4x2 {
  BlockMXFP4 b[2];
};
static_assert(sizeof(BlockMXFP4x2) == 2 * sizeof(BlockMXFP4));
static_assert(sizeof(MXFP4Rows16) == kLaneRows * sizeof(BlockMXFP4x2));

// The rows-in-lanes layout of a GGUF type, if it has one.
std::optional<DType> rows16_layout(DType base);

// Writes the n rows of k elements at src (in the layout's base type, packed) into dst in the
// layout; dst has the same size and must not overlap src.
void rows16_pack(DType layout, const void* src, void* dst, int64_t n, int64_t k);

// Writes group g of the packed matrix `matrix` (rows [16 g, 16 g + 16), all of them in a full
// group) to dst as 16 rows of the base type, packed.
void rows16_unpack_group(DType layout, const void* matrix, int64_t g, int64_t k, void* dst);

// Writes row r (< n) of the packed matrix of n rows of k to dst as a row of the base type.
void rows16_unpack_row(DType layout, const void* matrix, int64_t n, int64_t r, int64_t k,
                       void* dst);

}  // namespace strata
