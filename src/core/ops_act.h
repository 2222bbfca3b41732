// Element-wise ops that some architectures add to the llama set: scaling, the GELU-gated
// feed-forward activation (Gemma), gpt-oss's clamped SwiGLU and soft-capping (Gemma 2's
// logits). Scalar: they touch each element once, next to matmuls that read whole weight
// matrices.
//
// Conventions as core/ops.h: F32 [n, rows] with row strides in elements; y may alias an input;
// threads split rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace strata {

// y = x * s.
void scale(ThreadPool& pool, const float* x, size_t x_stride, float s, float* y, size_t y_stride,
           int64_t n, int64_t rows);

// y = gelu(gate) * up, GELU in its tanh approximation:
// gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
void geglu(ThreadPool& pool, const float* gate, size_t gate_stride, const float* up,
           size_t up_stride, float* y, size_t y_stride, int64_t n, int64_t rows);
// The same on the calling thread (rows of a matmul's input that a pool task produces).
void geglu_serial(const float* gate, size_t gate_stride, const float* up, size_t up_stride,
                  float* y, size_t y_stride, int64_t n, int64_t rows);

// gpt-oss's clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
// y = g / (1 + exp(-alpha g)) * (u + 1). limit > 0; a NaN gate stays NaN (min keeps it).
void swiglu_oai(ThreadPool& pool, const float* gate, size_t gate_stride, const float* up,
                size_t up_stride, float alpha, float limit, float* y, size_t y_stride, int64_t n,
                int64_t rows);

// y = cap * tanh(x / cap), cap > 0.
void softcap(ThreadPool& pool, const float* x, size_t x_stride, float cap, float* y,
             size_t y_stride, int64_t n, int64_t rows);

}  // namespace strata
