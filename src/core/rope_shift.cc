#include "core/rope_shift.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/dtype_traits.h"
#include "core/ops_internal.h"

namespace strata {

namespace ref {

// Scalar on purpose: a shift touches each cached key once per context shift, and the
// conversions and angles dominate the few multiplies of the rotation.
void rope_shift(const RopeShiftArgs& a, const int32_t* cells, const int32_t* delta, int64_t n) {
  STRATA_CHECK((a.dtype == DType::kF16 || a.dtype == DType::kF32 || a.dtype == DType::kQ8_0) &&
                   a.head_dim * a.n_head % dtype_block_size(a.dtype) == 0,
               "rope_shift: the cache must be f16, f32 or q8_0 (rows of whole blocks)");
  STRATA_CHECK(a.n_rot % 2 == 0 && a.n_rot >= 2 && a.n_rot <= a.head_dim,
               "rope_shift: n_rot must be even and in [2, head_dim]");
  const DTypeTraits& traits = *dtype_traits(a.dtype);
  const int64_t n_row = a.head_dim * a.n_head;
  const int64_t half = a.n_rot / 2;
  std::vector<float> row(static_cast<size_t>(n_row));
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int64_t r = 0; r < n; ++r) {
    if (a.rates != nullptr) {
      const float d = static_cast<float>(delta[r]);
      for (int64_t i = 0; i < half; ++i) {
        const float theta = d * a.rates[i];
        cos_t[static_cast<size_t>(i)] = std::cos(theta);
        sin_t[static_cast<size_t>(i)] = std::sin(theta);
      }
    } else {
      internal::rope_angles(delta[r], a.n_rot, a.freq_base, a.freq_scale, cos_t.data(),
                            sin_t.data());
    }
    for (int64_t p = 0; p < a.n_planes; ++p) {
      uint8_t* dst = static_cast<uint8_t*>(a.cache) + static_cast<size_t>(cells[r]) * a.row_bytes +
                     static_cast<size_t>(p) * a.plane_bytes;
      traits.dequantize(dst, row.data(), n_row);
      for (int64_t h = 0; h < a.n_head; ++h) {
        float* xh = row.data() + h * a.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = a.mode == RopeMode::kNeox ? i : 2 * i;
          const int64_t i1 = a.mode == RopeMode::kNeox ? i + half : 2 * i + 1;
          const float x0 = xh[i0];
          const float x1 = xh[i1];
          xh[i0] = x0 * cos_t[static_cast<size_t>(i)] - x1 * sin_t[static_cast<size_t>(i)];
          xh[i1] = x0 * sin_t[static_cast<size_t>(i)] + x1 * cos_t[static_cast<size_t>(i)];
        }
      }
      traits.quantize(row.data(), dst, n_row);
    }
  }
}

}  // namespace ref

void rope_shift(ThreadPool& pool, const RopeShiftArgs& a, const int32_t* cells,
                const int32_t* delta, int64_t n) {
  const int64_t grain =
      std::max<int64_t>(1, 16384 / std::max<int64_t>(a.head_dim * a.n_head * a.n_planes, 1));
  pool.parallel_for(n, grain, [&](int, int64_t begin, int64_t end) {
    ref::rope_shift(a, cells + begin, delta + begin, end - begin);
  });
}

}  // namespace strata
