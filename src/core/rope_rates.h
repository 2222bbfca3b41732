// Rope from a table of per-pair rates: pair i of every head of a token at position pos is
// rotated by theta_i = pos * rates[i], with cos and sin scaled by mscale. The host fills the
// table (model/rope.h) for every scaling scheme (Llama 3.1 divisors, YaRN, LongRoPE...).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ops.h"
#include "core/thread_pool.h"

namespace strata {

// x F32 [head_dim, n_head, n_tokens], heads packed, token stride tok_stride (elements),
// rotated in place over its first n_rot dims; pos I32 [n_tokens]; rates F32 [n_rot / 2].
// Threads split tokens; each element is the same few operations whatever the split.
void rope_rates(ThreadPool& pool, float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens,
                size_t tok_stride, const int32_t* pos, int64_t n_rot, RopeMode mode,
                const float* rates, float mscale);

namespace ref {
void rope_rates(float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens, size_t tok_stride,
                const int32_t* pos, int64_t n_rot, RopeMode mode, const float* rates, float mscale);
}  // namespace ref

}  // namespace strata
