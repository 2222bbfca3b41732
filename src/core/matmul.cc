#include "core/matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/dtype_traits.h"
#include "core/isa.h"
#include "core/matmul_internal.h"

namespace strata {
namespace {

using matmul_detail::MatmulArgs;

// Rows per thread chunk at least this many weight bytes: a chunk is one long sequential read,
// which the hardware prefetchers follow, and tiny matrices stay on one thread.
constexpr size_t kMinChunkBytes = 64 * 1024;

// Scratch areas start on cache lines (and 512-bit register loads on their alignment).
constexpr size_t matmul_align(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

}  // namespace

void matmul(ThreadPool& pool, DType w_dtype, const void* w, size_t w_row_bytes, int64_t n,
            int64_t k, const float* x, size_t x_stride, int64_t m, float* y, size_t y_stride) {
  const DTypeTraits* traits = dtype_traits(w_dtype);
  // One ISA decision per call; the kernels below never look at it again.
  const MatmulKernel* kernel = traits ? dtype_matmul_kernel(*traits, isa_active()) : nullptr;
  STRATA_CHECK(kernel != nullptr, "matmul: dtype without kernels");
  STRATA_CHECK(n >= 0 && m >= 0 && k >= 0 && k % dtype_block_size(w_dtype) == 0,
               "matmul: k must be a multiple of the weight block size");
  STRATA_CHECK(w_row_bytes >= dtype_row_bytes(w_dtype, k), "matmul: weight rows overlap");
  STRATA_CHECK(m <= 1 || (x_stride >= static_cast<size_t>(k) && y_stride >= static_cast<size_t>(n)),
               "matmul: column strides too small");
  if (n == 0 || m == 0) return;

  MatmulArgs args{
      static_cast<const uint8_t*>(w), w_row_bytes, k, m, x, x_stride, nullptr, 0, y, y_stride};
  // The caller's scratch of the pool (thread 0), reused so that the decode loop does not
  // allocate per matmul: the activation columns (which the pool's threads only read), then
  // each thread's work area.
  const size_t col_bytes = kernel->act_column_bytes != nullptr ? kernel->act_column_bytes(k) : 0;
  const size_t cols_bytes = matmul_align(col_bytes * static_cast<size_t>(m));
  const size_t work_bytes = kernel->work_bytes != nullptr ? matmul_align(kernel->work_bytes(k)) : 0;
  uint8_t* scratch = pool.scratch(0, cols_bytes + work_bytes * static_cast<size_t>(pool.size()));
  if (col_bytes != 0) {
    for (int64_t j = 0; j < m; ++j) {
      kernel->quantize_activation(x + j * x_stride, scratch + static_cast<size_t>(j) * col_bytes,
                                  k);
    }
    args.xq = scratch;
    args.xq_col_bytes = col_bytes;
  }

  const int64_t grain =
      std::max<int64_t>(1, static_cast<int64_t>(kMinChunkBytes / std::max<size_t>(w_row_bytes, 1)));
  pool.parallel_for(n, grain, [&](int thread, int64_t r0, int64_t r1) {
    if (work_bytes == 0) return kernel->rows(args, r0, r1);
    MatmulArgs own = args;
    own.work = scratch + cols_bytes + work_bytes * static_cast<size_t>(thread);
    kernel->rows(own, r0, r1);
  });
}

}  // namespace strata
