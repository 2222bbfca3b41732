// Re-rotates keys already in the KV cache by a position delta, in place: what a context shift
// needs when it moves a sequence's later tokens down to close the gap it discarded.
//
// Rope rotates pair i of a key at position p by theta_i(p); rotating it again by theta_i(d)
// gives a key at p + d up to float rounding (rope(p) then rope(d) is not bitwise rope(p + d),
// as in llama.cpp). Each row is converted to f32, rotated with the angles rope() or
// rope_rates() would use for position d, and converted back, so the result depends only on
// the row and its delta: never on the thread count or on which other rows are shifted.
// cos and sin are not scaled: a rate table's mscale was applied when the key was first roped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/ops.h"
#include "core/thread_pool.h"

namespace strata {

struct RopeShiftArgs {
  DType dtype = DType::kF16;  // of the cache: F16, F32 or Q8_0 (rows of whole blocks)
  void* cache = nullptr;
  size_t row_bytes = 0;  // between cells
  int64_t head_dim = 0;
  int64_t n_head = 0;  // heads per plane of a row
  // A cell's row is n_planes pieces of n_head heads, plane_bytes apart (a head-major cache: a
  // plane per kv head).
  int64_t n_planes = 1;
  size_t plane_bytes = 0;
  int64_t n_rot = 0;  // leading dims of each head that rotate (even, <= head_dim)
  RopeMode mode = RopeMode::kNormal;
  // The angles: rates[n_rot / 2] when not null (theta_i = d * rates[i]); else rope()'s
  // theta_i = d * freq_scale * freq_base^(-2i / n_rot).
  const float* rates = nullptr;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
};

// Rotates row cells[i] of the cache by delta[i] positions, for i < n. The cells must be
// distinct (rows are rotated in parallel). Threads split rows.
void rope_shift(ThreadPool& pool, const RopeShiftArgs& a, const int32_t* cells,
                const int32_t* delta, int64_t n);

namespace ref {
void rope_shift(const RopeShiftArgs& a, const int32_t* cells, const int32_t* delta, int64_t n);
}  // namespace ref

}  // namespace strata
