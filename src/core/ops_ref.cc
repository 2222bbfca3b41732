// Scalar reference kernels: the definition of each op, written for clarity. They are also the
// path taken on CPUs without AVX2 (ops.cc splits their rows over threads).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/quant_blocks.h"

namespace strata {
namespace ref {

// The sum of squares is accumulated in double, as ggml does: its rounding error (~n * 1e-16)
// is then far below float precision, so the result hardly depends on the summation order and
// the SIMD path, which must sum in another order, agrees with this one to the last bit or so.
void rms_norm(const float* x, size_t x_stride, const float* weight, float* y, size_t y_stride,
              int64_t n, int64_t rows, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (weight != nullptr) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * scale) * weight[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
    }
  }
}

void binary(BinaryOp op, const float* a, size_t a_stride, const float* b, size_t b_stride,
            int64_t b_rows, float* y, size_t y_stride, int64_t n, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * a_stride;
    const float* br = b + (r % b_rows) * b_stride;
    float* yr = y + r * y_stride;
    if (op == BinaryOp::kAdd) {
      for (int64_t i = 0; i < n; ++i) yr[i] = ar[i] + br[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = ar[i] * br[i];
    }
  }
}

void swiglu(const float* gate, size_t gate_stride, const float* up, size_t up_stride, float* y,
            size_t y_stride, int64_t n, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* yr = y + r * y_stride;
    for (int64_t i = 0; i < n; ++i) {
      const float silu = g[i] / (1.0f + std::exp(-g[i]));
      yr[i] = silu * u[i];
    }
  }
}

void rope(float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens, size_t tok_stride,
          const int32_t* pos, int64_t n_rot, RopeMode mode, float freq_base, float freq_scale) {
  STRATA_CHECK(n_rot % 2 == 0 && n_rot <= head_dim, "rope: n_rot must be even, <= head_dim");
  std::vector<float> cos_t(n_rot / 2), sin_t(n_rot / 2);
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    internal::rope_angles(pos[t], n_rot, freq_base, freq_scale, cos_t.data(), sin_t.data());
    for (int64_t h = 0; h < n_head; ++h) {
      float* xh = x + t * tok_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = mode == RopeMode::kNeox ? i : 2 * i;
        const int64_t i1 = mode == RopeMode::kNeox ? i + half : 2 * i + 1;
        const float x0 = xh[i0];
        const float x1 = xh[i1];
        xh[i0] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[i1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

void attention(const float* q, size_t q_tok_stride, int64_t head_dim, int64_t n_head,
               int64_t n_tokens, DType kv_dtype, const void* k, const void* v, KvStrides kv,
               int64_t n_head_kv, const int32_t* cells, int64_t max_len, const int32_t* tok,
               float scale, float* out, size_t out_tok_stride, const AttentionExtra& extra) {
  const internal::AttentionArgs a{
      q,     q_tok_stride, head_dim, n_head, n_tokens, kv_dtype,       k,    v, kv, n_head_kv,
      cells, max_len,      tok,      scale,  out,      out_tok_stride, extra};
  std::vector<float> scratch(static_cast<size_t>(max_len));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h) internal::attention_head_ref(a, t, h, scratch.data());
  }
}

}  // namespace ref

namespace internal {
namespace {

// Element d of kv head `kvh` of cache cell `cell`.
float kv_at(const AttentionArgs& a, const void* base, int32_t cell, int64_t kvh, int64_t d) {
  const auto* head = static_cast<const uint8_t*>(base) +
                     static_cast<size_t>(cell) * a.kv.cell_bytes +
                     static_cast<size_t>(kvh) * a.kv.head_bytes;
  if (a.kv_dtype == DType::kF16) {
    uint16_t h;
    std::memcpy(&h, head + d * 2, 2);
    return f16_to_f32(h);
  }
  if (a.kv_dtype == DType::kQ8_0) {  // q * d, exact
    BlockQ8_0 block;
    std::memcpy(&block, head + d / kQK8_0 * sizeof(BlockQ8_0), sizeof(BlockQ8_0));
    return static_cast<float>(block.qs[d % kQK8_0]) * f16_to_f32(block.d);
  }
  float f;
  std::memcpy(&f, head + d * 4, 4);
  return f;
}

}  // namespace

// Two passes over the cells: the scores, then softmax with the global maximum subtracted (so a
// score of 1e4 cannot overflow exp), then the weighted sum of V rows in cell order.
void attention_head_ref(const AttentionArgs& a, int64_t t, int64_t h, float* scratch) {
  STRATA_DCHECK(a.tok[2 * t + 1] >= 0 && a.tok[2 * t + 1] <= a.max_len);
  int64_t len = 0;
  const int32_t* cells = attention_cells(a, t, &len);
  const int64_t kvh = h / (a.n_head / a.n_head_kv);
  const float* qh = a.q + t * a.q_tok_stride + h * a.head_dim;
  float* oh = a.out + t * a.out_tok_stride + h * a.head_dim;

  float max = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < len; ++c) {
    float dot = 0.0f;
    for (int64_t d = 0; d < a.head_dim; ++d) dot += qh[d] * kv_at(a, a.k, cells[c], kvh, d);
    scratch[c] = attention_score(a, dot);
    if (scratch[c] > max) max = scratch[c];
  }
  // A sink joins the maximum and the denominator, after the cells' sum; it weighs no V row.
  const float* sink = a.extra.sinks != nullptr ? a.extra.sinks + h : nullptr;
  if (sink != nullptr) max = std::max(max, *sink);
  float sum = 0.0f;
  for (int64_t c = 0; c < len; ++c) {
    scratch[c] = std::exp(scratch[c] - max);
    sum += scratch[c];
  }
  if (sink != nullptr) sum += std::exp(*sink - max);
  for (int64_t d = 0; d < a.head_dim; ++d) oh[d] = 0.0f;
  for (int64_t c = 0; c < len; ++c) {
    for (int64_t d = 0; d < a.head_dim; ++d) oh[d] += scratch[c] * kv_at(a, a.v, cells[c], kvh, d);
  }
  const float inv = len > 0 ? 1.0f / sum : 0.0f;
  for (int64_t d = 0; d < a.head_dim; ++d) oh[d] *= inv;
}

}  // namespace internal
}  // namespace strata
