// The kernels of the rows-in-lanes layouts at the levels that have no kernel of their own: the
// base type's kernel of that level over each group unpacked. The same bits as the base type's
// kernel, so that a layout never changes a result; the CPU device stores weights in a layout
// only where the level has a kernel of its own (matmul_rows16_avx512.cc).
#include <algorithm>

#include "core/check.h"
#include "core/matmul_internal.h"
#include "core/quant_rows.h"
#include "core/rows16.h"

namespace strata::matmul_detail {

void rows16_by_base(const MatmulKernel& base, DType layout, const MatmulArgs& a, int64_t r0,
                    int64_t r1) {
  STRATA_DCHECK(base.work_bytes == nullptr && a.work != nullptr);
  const int64_t full = a.n_rows / kLaneRows * kLaneRows;
  STRATA_DCHECK(r0 % kLaneRows == 0 || r0 >= full);
  STRATA_DCHECK(r1 % kLaneRows == 0 || r1 >= full);
  MatmulArgs rows = a;
  rows.work = nullptr;
  for (int64_t g0 = r0; g0 < std::min(r1, full); g0 += kLaneRows) {
    rows16_unpack_group(layout, a.w, g0 / kLaneRows, a.k, a.work);
    rows.w = a.work;
    rows.y = a.y + g0;
    rows.n_rows = kLaneRows;
    base.rows(rows, 0, kLaneRows);
  }
  if (r1 > full) {
    rows.w = a.w;
    rows.y = a.y;
    rows.n_rows = a.n_rows;
    base.rows(rows, std::max(r0, full), r1);
  }
}

size_t q8_0_starts_offset(int64_t k) { return q8_0_column_bytes(k); }
size_t q8_0_starts_column_bytes(int64_t k) {
  return q8_0_starts_offset(k) + static_cast<size_t>(k / (2 * kQK8_0)) * 8 * sizeof(int32_t);
}

template <DType kBase>
size_t rows16_work_bytes(int64_t k) {
  return static_cast<size_t>(kLaneRows) * dtype_row_bytes(kBase, k);
}
template size_t rows16_work_bytes<DType::kQ4_K>(int64_t k);
template size_t rows16_work_bytes<DType::kQ6_K>(int64_t k);
template size_t rows16_work_bytes<DType::kIQ4_XS>(int64_t k);
template size_t rows16_work_bytes<DType::kQ5_K>(int64_t k);
template size_t rows16_work_bytes<DType::kQ3_K>(int64_t k);
template size_t rows16_work_bytes<DType::kQ2_K>(int64_t k);
template size_t rows16_work_bytes<DType::kQ8_0>(int64_t k);
template size_t rows16_work_bytes<DType::kQ4_0>(int64_t k);
template size_t rows16_work_bytes<DType::kMXFP4>(int64_t k);

namespace {

template <const MatmulKernel& kBase, DType kLayout>
void rows16_by(const MatmulArgs& a, int64_t r0, int64_t r1) {
  rows16_by_base(kBase, kLayout, a, r0, r1);
}

}  // namespace

const MatmulKernel kQ4_K_R16Ref = {q8_k_column_bytes, quantize_row_q8_k,
                                   rows16_by<kQ4_KRef, DType::kQ4_K_R16>,
                                   rows16_work_bytes<DType::kQ4_K>};
const MatmulKernel kQ6_K_R16Ref = {q8_k_column_bytes, quantize_row_q8_k,
                                   rows16_by<kQ6_KRef, DType::kQ6_K_R16>,
                                   rows16_work_bytes<DType::kQ6_K>};
const MatmulKernel kQ5_K_R16Ref = {q8_k_column_bytes, quantize_row_q8_k,
                                   rows16_by<kQ5_KRef, DType::kQ5_K_R16>,
                                   rows16_work_bytes<DType::kQ5_K>};
const MatmulKernel kQ2_K_R16Ref = {q8_k_column_bytes, quantize_row_q8_k,
                                   rows16_by<kQ2_KRef, DType::kQ2_K_R16>,
                                   rows16_work_bytes<DType::kQ2_K>};
const MatmulKernel kQ2_K_R16Avx2 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                    rows16_by<kQ2_KAvx2, DType::kQ2_K_R16>,
                                    rows16_work_bytes<DType::kQ2_K>};
const MatmulKernel kQ3_K_R16Ref = {q8_k_column_bytes, quantize_row_q8_k,
                                   rows16_by<kQ3_KRef, DType::kQ3_K_R16>,
                                   rows16_work_bytes<DType::kQ3_K>};
const MatmulKernel kQ3_K_R16Avx2 = {q8_k_column_bytes, quantize_act_q8_k_avx2,
                                    rows16_by<kQ3_KAvx2, DType::kQ3_K_R16>,
                                    rows16_work_bytes<DType::kQ3_K>};
const MatmulKernel kIQ4_XS_R16Ref = {q8_k_column_bytes, quantize_row_q8_k,
                                     rows16_by<kIQ4_XSRef, DType::kIQ4_XS_R16>,
                                     rows16_work_bytes<DType::kIQ4_XS>};
const MatmulKernel kQ8_0_R16Ref = {q8_0_column_bytes, quantize_act_q8_0_ref,
                                   rows16_by<kQ8_0Ref, DType::kQ8_0_R16>,
                                   rows16_work_bytes<DType::kQ8_0>};
const MatmulKernel kQ4_0_R16Ref = {q8_0_column_bytes, quantize_act_q8_0_ref,
                                   rows16_by<kQ4_0Ref, DType::kQ4_0_R16>,
                                   rows16_work_bytes<DType::kQ4_0>};
const MatmulKernel kQ4_0_R16Avx2 = {q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
                                    rows16_by<kQ4_0Avx2, DType::kQ4_0_R16>,
                                    rows16_work_bytes<DType::kQ4_0>};
const MatmulKernel kMXFP4_R16Ref = {q8_0_column_bytes, quantize_act_q8_0_ref,
                                    rows16_by<kMXFP4Ref, DType::kMXFP4_R16>,
                                    rows16_work_bytes<DType::kMXFP4>};
const MatmulKernel kMXFP4_R16Avx2 = {q4_0_pair_column_bytes, quantize_act_q4_0_pairs_avx2,
                                     rows16_by<kMXFP4Avx2, DType::kMXFP4_R16>,
                                     rows16_work_bytes<DType::kMXFP4>};

}  // namespace strata::matmul_detail
