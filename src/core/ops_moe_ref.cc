// Scalar references of the mixture-of-experts kernels (core/ops_moe.h): plain loops in the
// order the header states, which the dispatch runs as they are (top-k, gating: a few dozen
// values per token) or which the SIMD path repeats bit for bit (moe_sum).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/ops_moe.h"

namespace strata::ref {

void moe_add_id(const float* x, size_t x_slot_stride, size_t x_tok_stride, const float* b,
                size_t b_stride, const int32_t* ids, size_t ids_stride, float* y,
                size_t y_slot_stride, size_t y_tok_stride, int64_t n, int64_t n_used,
                int64_t rows) {
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t s = 0; s < n_used; ++s) {
      const size_t xo =
          static_cast<size_t>(t) * x_tok_stride + static_cast<size_t>(s) * x_slot_stride;
      const size_t yo =
          static_cast<size_t>(t) * y_tok_stride + static_cast<size_t>(s) * y_slot_stride;
      const float* br =
          b + static_cast<size_t>(ids[static_cast<size_t>(t) * ids_stride + s]) * b_stride;
      for (int64_t i = 0; i < n; ++i) y[yo + i] = x[xo + i] + br[i];
    }
  }
}

void moe_top_k(const float* logits, size_t logits_stride, int64_t n_expert, int64_t rows, int64_t k,
               int32_t* ids, size_t ids_stride) {
  STRATA_CHECK(k >= 1 && k <= n_expert && n_expert <= kMaxExperts, "moe_top_k: bad k or n_expert");
  int32_t order[kMaxExperts];
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + static_cast<size_t>(r) * logits_stride;
    std::iota(order, order + n_expert, 0);
    // The order is strict and total: the first k are the same whatever the sort does.
    std::partial_sort(order, order + k, order + n_expert,
                      [x](int32_t a, int32_t b) { return moe_ranks_before(x[a], a, x[b], b); });
    std::copy(order, order + k, ids + static_cast<size_t>(r) * ids_stride);
  }
}

void moe_gate(const float* logits, size_t logits_stride, int64_t n_expert, const int32_t* ids,
              size_t ids_stride, int64_t k, int64_t rows, MoeGating gating, bool normalise,
              float scale, float* w, size_t w_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + static_cast<size_t>(r) * logits_stride;
    const int32_t* id = ids + static_cast<size_t>(r) * ids_stride;
    float* wr = w + static_cast<size_t>(r) * w_stride;
    switch (gating) {
      case MoeGating::kSoftmax: {
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n_expert; ++i) max = std::max(max, x[i]);
        float sum = 0.0f;
        for (int64_t i = 0; i < n_expert; ++i) sum += std::exp(x[i] - max);
        for (int64_t s = 0; s < k; ++s) wr[s] = std::exp(x[id[s]] - max) / sum;
        break;
      }
      case MoeGating::kSigmoid:
        for (int64_t s = 0; s < k; ++s) wr[s] = 1.0f / (1.0f + std::exp(-x[id[s]]));
        break;
      case MoeGating::kSoftmaxSelected: {
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < k; ++s) max = std::max(max, x[id[s]]);
        float sum = 0.0f;
        for (int64_t s = 0; s < k; ++s) {
          wr[s] = std::exp(x[id[s]] - max);
          sum += wr[s];
        }
        for (int64_t s = 0; s < k; ++s) wr[s] = wr[s] / sum;
        break;
      }
    }
    if (normalise) {
      float sum = 0.0f;
      for (int64_t s = 0; s < k; ++s) sum += wr[s];
      for (int64_t s = 0; s < k; ++s) wr[s] = wr[s] / sum;
    }
    for (int64_t s = 0; s < k; ++s) wr[s] = wr[s] * scale;
  }
}

void moe_sum(const float* y, size_t y_slot_stride, size_t y_tok_stride, const float* w,
             size_t w_stride, float* out, size_t out_stride, int64_t n, int64_t n_used,
             int64_t rows) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* yt = y + static_cast<size_t>(t) * y_tok_stride;
    const float* wt = w + static_cast<size_t>(t) * w_stride;
    float* ot = out + static_cast<size_t>(t) * out_stride;
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int64_t s = 0; s < n_used; ++s) {
        acc = std::fma(wt[s], yt[static_cast<size_t>(s) * y_slot_stride + i], acc);
      }
      ot[i] = acc;
    }
  }
}

}  // namespace strata::ref
