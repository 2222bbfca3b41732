#include "core/matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "core/isa.h"
#include "core/matmul_internal.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace strata {
namespace matmul_detail {

DType activation_dtype(DType w) {
  switch (w) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      return DType::kQ8_0;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DType::kQ8_K;
    default:
      return DType::kF32;
  }
}

void quantize_activation_ref(DType act, const float* x, void* dst, int64_t k) {
  quantize_row(act, x, dst, k);
  if (act == DType::kQ8_0) {
    const auto* blocks = static_cast<const BlockQ8_0*>(dst);
    float* scales = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + q8_0_scales_offset(k));
    const int64_t nb = k / kQK8_0;
    for (int64_t b = 0; b < nb; ++b) q8_0_set_scale(scales, b, f16_to_f32(blocks[b].d));
    if (nb % 2 != 0) q8_0_set_scale(scales, nb, 0.0f);
  }
}

}  // namespace matmul_detail

namespace {

using matmul_detail::MatmulArgs;

// Rows per thread chunk at least this many weight bytes: a chunk is one long sequential read,
// which the hardware prefetchers follow, and tiny matrices stay on one thread.
constexpr size_t kMinChunkBytes = 64 * 1024;

struct Job {
  MatmulArgs args;
  void (*rows)(const MatmulArgs&, int64_t, int64_t);
};

}  // namespace

void matmul(ThreadPool& pool, DType w_dtype, const void* w, size_t w_row_bytes, int64_t n,
            int64_t k, const float* x, size_t x_stride, int64_t m, float* y, size_t y_stride) {
  STRATA_CHECK(dtype_can_convert(w_dtype), "matmul: dtype without kernels");
  STRATA_CHECK(n >= 0 && m >= 0 && k >= 0 && k % dtype_block_size(w_dtype) == 0,
               "matmul: k must be a multiple of the weight block size");
  STRATA_CHECK(w_row_bytes >= dtype_row_bytes(w_dtype, k), "matmul: weight rows overlap");
  STRATA_CHECK(m <= 1 || (x_stride >= static_cast<size_t>(k) && y_stride >= static_cast<size_t>(n)),
               "matmul: column strides too small");
  if (n == 0 || m == 0) return;

  // One ISA decision per call; the kernels below never look at it again.
  const bool avx2 = isa_active() >= Isa::kAvx2;
  const DType act = matmul_detail::activation_dtype(w_dtype);

  Job job{{w_dtype, static_cast<const uint8_t*>(w), w_row_bytes, k, m, x, x_stride, nullptr, 0, y,
           y_stride},
          avx2 ? matmul_detail::matmul_rows_avx2 : matmul_detail::matmul_rows_ref};

  if (act != DType::kF32) {
    // The AVX2 Q4_0 kernel takes its activations regrouped (Q4_0ActPair).
    const bool q4_0_pairs = avx2 && w_dtype == DType::kQ4_0;
    // Reused per calling thread so that the decode loop does not allocate per matmul.
    thread_local std::vector<uint8_t> scratch;
    const size_t col_bytes = q4_0_pairs            ? matmul_detail::q4_0_act_column_bytes(k)
                             : act == DType::kQ8_0 ? matmul_detail::q8_0_column_bytes(k)
                                                   : dtype_row_bytes(act, k);
    const size_t need = col_bytes * static_cast<size_t>(m);
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t j = 0; j < m; ++j) {
      void* dst = scratch.data() + static_cast<size_t>(j) * col_bytes;
      if (q4_0_pairs) {
        matmul_detail::pack_q4_0_activation_avx2(x + j * x_stride, dst, k);
      } else if (avx2) {
        matmul_detail::quantize_activation_avx2(act, x + j * x_stride, dst, k);
      } else {
        matmul_detail::quantize_activation_ref(act, x + j * x_stride, dst, k);
      }
    }
    job.args.xq = scratch.data();
    job.args.xq_col_bytes = col_bytes;
  }

  const int64_t grain =
      std::max<int64_t>(1, static_cast<int64_t>(kMinChunkBytes / std::max<size_t>(w_row_bytes, 1)));
  pool.parallel_for(n, grain, [&job](int, int64_t r0, int64_t r1) { job.rows(job.args, r0, r1); });
}

}  // namespace strata
