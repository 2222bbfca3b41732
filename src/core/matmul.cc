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

// Weight bytes per thread task at least this many: a task is one long sequential read, which the
// hardware prefetchers follow, and tiny matrices stay on one thread.
constexpr uint64_t kMinChunkBytes = 64 * 1024;
// Activations per quantisation task at least this many: below that, waking a thread costs more
// than the work.
constexpr int64_t kMinColumnElements = 16384;
// A task starts on a multiple of this many rows of its part, so that a split does not cut the
// kernels' row groups.
constexpr int64_t kRowAlign = 16;

// A part ready to run, and where it sits in the concatenation of all parts' rows and bytes.
struct Prepared {
  const MatmulKernel* kernel;
  MatmulArgs args;
  int64_t n;
  int64_t row0;
  uint64_t byte0;
};

// The activation columns of every part whose kernel reads this layout (kernels that share an
// act_column_bytes function write the same bytes: see MatmulKernel).
struct ActFormat {
  size_t (*column_bytes)(int64_t k);
  void (*quantize)(const float* x, void* dst, int64_t k);
  size_t col_bytes = 0;
  size_t offset = 0;  // of column 0 in the scratch
};

// The first concatenated row of task t of n_tasks: the first row whose weights start at or after
// byte total * t / n_tasks, moved up to kRowAlign within its part. Non-decreasing in t, 0 for
// t = 0 and n_rows for t = n_tasks, so the tasks' row ranges cover every row once.
int64_t task_row(const std::vector<Prepared>& parts, uint64_t total, int64_t n_rows, int64_t t,
                 int64_t n_tasks) {
  const uint64_t pos = total * static_cast<uint64_t>(t) / static_cast<uint64_t>(n_tasks);
  for (const Prepared& p : parts) {
    const uint64_t row_bytes = p.args.w_row_bytes;
    if (pos >= p.byte0 + static_cast<uint64_t>(p.n) * row_bytes) continue;
    const auto first = static_cast<int64_t>((pos - p.byte0 + row_bytes - 1) / row_bytes);
    return p.row0 + std::min(p.n, (first + kRowAlign - 1) / kRowAlign * kRowAlign);
  }
  return n_rows;
}

}  // namespace

void matmul(ThreadPool& pool, DType w_dtype, const void* w, size_t w_row_bytes, int64_t n,
            int64_t k, const float* x, size_t x_stride, int64_t m, float* y, size_t y_stride) {
  const MatmulPart part{w_dtype, w, w_row_bytes, n, y, y_stride};
  matmul_multi(pool, {&part, 1}, k, x, x_stride, m);
}

void matmul_multi(ThreadPool& pool, std::span<const MatmulPart> parts, int64_t k, const float* x,
                  size_t x_stride, int64_t m, const MatmulColumnsFn* columns) {
  STRATA_CHECK(m >= 0 && k >= 0, "matmul: negative size");
  STRATA_CHECK(m <= 1 || x_stride >= static_cast<size_t>(k), "matmul: column strides too small");
  // One ISA decision per call; the kernels below never look at it again.
  const Isa isa = isa_active();
  std::vector<Prepared> prep;
  std::vector<ActFormat> formats;
  uint64_t total_bytes = 0;
  int64_t total_rows = 0;
  for (const MatmulPart& part : parts) {
    const DTypeTraits* traits = dtype_traits(part.w_dtype);
    const MatmulKernel* kernel = traits ? dtype_matmul_kernel(*traits, isa, m) : nullptr;
    STRATA_CHECK(kernel != nullptr, "matmul: dtype without kernels");
    STRATA_CHECK(part.n >= 0 && k % dtype_block_size(part.w_dtype) == 0,
                 "matmul: k must be a multiple of the weight block size");
    STRATA_CHECK(part.w_row_bytes >= dtype_row_bytes(part.w_dtype, k),
                 "matmul: weight rows overlap");
    STRATA_CHECK(m <= 1 || part.y_stride >= static_cast<size_t>(part.n),
                 "matmul: column strides too small");
    if (part.n == 0) continue;
    prep.push_back({kernel,
                    MatmulArgs{static_cast<const uint8_t*>(part.w), part.w_row_bytes, k, m, x,
                               x_stride, nullptr, 0, part.y, part.y_stride},
                    part.n, total_rows, total_bytes});
    total_rows += part.n;
    total_bytes += static_cast<uint64_t>(part.n) * part.w_row_bytes;
    if (kernel->act_column_bytes != nullptr &&
        std::none_of(formats.begin(), formats.end(), [kernel](const ActFormat& f) {
          return f.column_bytes == kernel->act_column_bytes;
        })) {
      formats.push_back({kernel->act_column_bytes, kernel->quantize_activation});
    }
  }
  if (m == 0 || (total_rows == 0 && columns == nullptr)) return;

  // The quantised columns live in the caller's scratch of the pool (thread 0), reused so that
  // the decode loop does not allocate per matmul; one 64-byte aligned region per format. After
  // them, each thread's work area (MatmulKernel::work_bytes), as large as the largest part's.
  size_t scratch_bytes = 0;
  for (ActFormat& f : formats) {
    f.col_bytes = f.column_bytes(k);
    f.offset = scratch_bytes;
    scratch_bytes += (f.col_bytes * static_cast<size_t>(m) + 63) / 64 * 64;
  }
  const size_t work_offset = scratch_bytes;
  size_t work_bytes = 0;
  for (const Prepared& p : prep) {
    if (p.kernel->work_bytes != nullptr) {
      work_bytes = std::max(work_bytes, (p.kernel->work_bytes(k) + 63) / 64 * 64);
    }
  }
  scratch_bytes += work_bytes * static_cast<size_t>(pool.size());
  uint8_t* scratch = scratch_bytes == 0 ? nullptr : pool.scratch(0, scratch_bytes);
  if (!formats.empty() || columns != nullptr) {
    const int64_t grain = std::max<int64_t>(1, kMinColumnElements / std::max<int64_t>(k, 1));
    pool.parallel_for(m, grain, [&](int, int64_t j0, int64_t j1) {
      if (columns != nullptr) (*columns)(j0, j1);
      for (const ActFormat& f : formats) {
        for (int64_t j = j0; j < j1; ++j) {
          f.quantize(x + j * x_stride, scratch + f.offset + static_cast<size_t>(j) * f.col_bytes,
                     k);
        }
      }
    });
  }
  for (Prepared& p : prep) {
    for (const ActFormat& f : formats) {
      if (f.column_bytes != p.kernel->act_column_bytes) continue;
      p.args.xq = scratch + f.offset;
      p.args.xq_col_bytes = f.col_bytes;
    }
  }
  if (total_rows == 0) return;

  // Tasks of equal weight bytes, at most one per thread: parts of different dtypes read
  // different bytes per row. Threads split the output rows, never k: each output element is the
  // same sequence of operations whatever the split.
  const auto n_tasks = static_cast<int64_t>(
      std::clamp<uint64_t>(total_bytes / kMinChunkBytes, 1, static_cast<uint64_t>(pool.size())));
  pool.parallel_for(n_tasks, 1, [&](int thread, int64_t t0, int64_t t1) {
    const int64_t r0 = task_row(prep, total_bytes, total_rows, t0, n_tasks);
    const int64_t r1 = task_row(prep, total_bytes, total_rows, t1, n_tasks);
    for (const Prepared& p : prep) {
      const int64_t lo = std::max(r0, p.row0) - p.row0;
      const int64_t hi = std::min(r1, p.row0 + p.n) - p.row0;
      if (lo >= hi) continue;
      if (p.kernel->work_bytes == nullptr) {
        p.kernel->rows(p.args, lo, hi);
        continue;
      }
      MatmulArgs own = p.args;
      own.work = scratch + work_offset + work_bytes * static_cast<size_t>(thread);
      p.kernel->rows(own, lo, hi);
    }
  });
}

}  // namespace strata
