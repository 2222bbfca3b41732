#include "core/ops_act.h"

#include <algorithm>
#include <cmath>

namespace strata {
namespace {

int64_t grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

// fn(x_row, y_row) over rows [begin, end), rows of x and y `stride` elements apart.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t n, int64_t rows, const Fn& fn) {
  pool.parallel_for(rows, grain(n), [&](int, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

}  // namespace

void scale(ThreadPool& pool, const float* x, size_t x_stride, float s, float* y, size_t y_stride,
           int64_t n, int64_t rows) {
  for_rows(pool, n, rows, [&](int64_t r) {
    const float* xr = x + static_cast<size_t>(r) * x_stride;
    float* yr = y + static_cast<size_t>(r) * y_stride;
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * s;
  });
}

namespace {

void geglu_row(const float* g, const float* u, float* y, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCoef = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float gelu = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kCoef * x * x * x)));
    y[i] = gelu * u[i];
  }
}

}  // namespace

void geglu(ThreadPool& pool, const float* gate, size_t gate_stride, const float* up,
           size_t up_stride, float* y, size_t y_stride, int64_t n, int64_t rows) {
  for_rows(pool, n, rows, [&](int64_t r) {
    geglu_row(gate + static_cast<size_t>(r) * gate_stride, up + static_cast<size_t>(r) * up_stride,
              y + static_cast<size_t>(r) * y_stride, n);
  });
}

void geglu_serial(const float* gate, size_t gate_stride, const float* up, size_t up_stride,
                  float* y, size_t y_stride, int64_t n, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    geglu_row(gate + static_cast<size_t>(r) * gate_stride, up + static_cast<size_t>(r) * up_stride,
              y + static_cast<size_t>(r) * y_stride, n);
  }
}

void swiglu_oai(ThreadPool& pool, const float* gate, size_t gate_stride, const float* up,
                size_t up_stride, float alpha, float limit, float* y, size_t y_stride, int64_t n,
                int64_t rows) {
  for_rows(pool, n, rows, [&](int64_t r) {
    const float* gr = gate + static_cast<size_t>(r) * gate_stride;
    const float* ur = up + static_cast<size_t>(r) * up_stride;
    float* yr = y + static_cast<size_t>(r) * y_stride;
    for (int64_t i = 0; i < n; ++i) {
      const float g = std::min(gr[i], limit);
      const float u = std::clamp(ur[i], -limit, limit);
      yr[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
  });
}

void softcap(ThreadPool& pool, const float* x, size_t x_stride, float cap, float* y,
             size_t y_stride, int64_t n, int64_t rows) {
  for_rows(pool, n, rows, [&](int64_t r) {
    const float* xr = x + static_cast<size_t>(r) * x_stride;
    float* yr = y + static_cast<size_t>(r) * y_stride;
    for (int64_t i = 0; i < n; ++i) yr[i] = std::tanh(xr[i] / cap) * cap;
  });
}

}  // namespace strata
