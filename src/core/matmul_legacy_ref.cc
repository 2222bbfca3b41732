// Scalar reference dot products of the 32-element block formats against Q8 activations: the
// definition the SIMD paths are tested against, and the path used on CPUs without AVX2.
// Integer block sums are exact. q8_0 and q4_0: the float part is one scale multiply per block
// and a running sum in block order. The later formats (q4_1, q5_0, q5_1, iq4_nl, mxfp4) fix an
// order that the SIMD kernels repeat exactly, so all give the same bits: see dot_q8_sum() and
// dot_mxfp4().
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/matmul_internal.h"
#include "core/quant_blocks.h"
#include "core/quant_rows.h"

namespace strata::matmul_detail {
namespace {

float dot_q8_0(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ8_0*>(wp);
  const auto* x = static_cast<const BlockQ8_0*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += w[b].qs[j] * x[b].qs[j];
    sum += f16_to_f32(w[b].d) * f16_to_f32(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_0(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockQ4_0*>(wp);
  const auto* x = static_cast<const BlockQ8_0*>(xp);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK4_0; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      isum += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK4_0 / 2];
    }
    sum += f16_to_f32(w[b].d) * f16_to_f32(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

// Eight running sums in the order of the SIMD kernels, which take the activations in pairs of
// blocks (Q4_0ActPair): blocks b and b + 1 of a pair fill lanes 0..3 and 4..7, lane
// 4 * (b % 2) + i summing the 8 products of elements 4i..4i+3 and 16+4i..16+4i+3. Per lane and
// block, exactly: lane = fma(dw * dx, float(isum), lane); at the end the lanes are added as
// avx2::hsum adds them. (A missing partner of an odd last block adds fma(0, 0, lane) = lane to
// its lanes: a lane is never -0.0, so skipping it here changes nothing.)
float dot_mxfp4(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const BlockMXFP4*>(wp);
  const auto* x = static_cast<const BlockQ8_0*>(xp);
  float lane[8] = {};
  for (int64_t b = 0; b < k / kQK_MXFP4; ++b) {
    const float d = mxfp4_half_scale(w[b].e) * f16_to_f32(x[b].d);
    for (int i = 0; i < 4; ++i) {
      int isum = 0;
      for (int j = 4 * i; j < 4 * i + 4; ++j) {
        isum += kMXFP4Values[w[b].qs[j] & 0xf] * x[b].qs[j];
        isum += kMXFP4Values[w[b].qs[j] >> 4] * x[b].qs[j + 16];
      }
      float& l = lane[4 * (b % 2) + i];
      l = std::fma(d, static_cast<float>(isum), l);
    }
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// ---- Against Q8 columns with block sums ----

// How each format turns element j of a block into its integer quant (the value its scale
// multiplies), and whether a min adds min * sum(x) per block.
struct Q4_1Values {
  using Block = BlockQ4_1;
  static constexpr bool kMin = true;
  static int value(const Block& b, int j) { return j < 16 ? b.qs[j] & 0xf : b.qs[j - 16] >> 4; }
};

inline int fifth_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

struct Q5_1Values {
  using Block = BlockQ5_1;
  static constexpr bool kMin = true;
  static int value(const Block& b, int j) {
    return (j < 16 ? b.qs[j] & 0xf : b.qs[j - 16] >> 4) | fifth_bit(b.qh, j) << 4;
  }
};

struct Q5_0Values {
  using Block = BlockQ5_0;
  static constexpr bool kMin = false;
  static int value(const Block& b, int j) {
    return ((j < 16 ? b.qs[j] & 0xf : b.qs[j - 16] >> 4) | fifth_bit(b.qh, j) << 4) - 16;
  }
};

struct IQ4_NLValues {
  using Block = BlockIQ4_NL;
  static constexpr bool kMin = false;
  static int value(const Block& b, int j) {
    return kIQ4NLValues[j < 16 ? b.qs[j] & 0xf : b.qs[j - 16] >> 4];
  }
};

// Block b's term t = (dw * dx) * float(isum) [+ m * s] goes into running sum b % 8, and the 8
// sums are added as avx2::hsum adds lanes: ((0+4) + (2+6)) + ((1+5) + (3+7)). That is the
// order in which the AVX2 kernel, holding 8 blocks' terms in the 8 lanes of one register,
// computes, so the two agree bit for bit; it does not depend on m, the tile or the thread.
template <typename V>
float dot_q8_sum(const uint8_t* wp, const void* xp, int64_t k) {
  const auto* w = reinterpret_cast<const typename V::Block*>(wp);
  const auto* xq = static_cast<const int8_t*>(xp);
  const auto* xd = reinterpret_cast<const float*>(xq + k);
  const float* xs = xd + q8_sum_padded_blocks(k);
  float lane[8] = {};
  for (int64_t b = 0; b < k / 32; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += V::value(w[b], j) * xq[32 * b + j] + V::value(w[b], j + 16) * xq[32 * b + j + 16];
    }
    float t = f16_to_f32(w[b].d) * xd[b] * static_cast<float>(isum);
    if constexpr (V::kMin) t = t + f16_to_f32(w[b].m) * xs[b];
    lane[b % 8] += t;
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

}  // namespace

int64_t q8_sum_padded_blocks(int64_t k) { return (k / 32 + 7) / 8 * 8; }

size_t q8_sum_column_bytes(int64_t k) {
  return static_cast<size_t>(k) + 3 * sizeof(float) * static_cast<size_t>(q8_sum_padded_blocks(k));
}

void quantize_act_q8_sum_ref(const float* x, void* dst, int64_t k) {
  auto* qs = static_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(qs + k);
  const int64_t nb = k / kQK8_0, nb8 = q8_sum_padded_blocks(k);
  float* s = d + nb8;
  auto* sums = reinterpret_cast<int32_t*>(s + nb8);
  for (int64_t b = 0; b < nb8; ++b) {
    if (b >= nb) {
      d[b] = s[b] = 0.0f;
      sums[b] = 0;
      continue;
    }
    BlockQ8_0 q;
    quantize_row_q8_0(x + kQK8_0 * b, &q, kQK8_0);
    int sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += q.qs[j];
    std::memcpy(qs + kQK8_0 * b, q.qs, kQK8_0);
    d[b] = f16_to_f32(q.d);
    s[b] = d[b] * static_cast<float>(sum);
    sums[b] = sum;
  }
}

size_t q8_0_scales_offset(int64_t k) {
  return (static_cast<size_t>(k / kQK8_0) * sizeof(BlockQ8_0) + 3) & ~size_t{3};
}

size_t q8_0_column_bytes(int64_t k) {
  return q8_0_scales_offset(k) + static_cast<size_t>((k / kQK8_0 + 1) / 2) * 32;
}

void quantize_act_q8_0_ref(const float* x, void* dst, int64_t k) {
  quantize_row_q8_0(x, dst, k);
  const auto* blocks = static_cast<const BlockQ8_0*>(dst);
  float* scales = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + q8_0_scales_offset(k));
  const int64_t nb = k / kQK8_0;
  for (int64_t b = 0; b < nb; ++b) q8_0_set_scale(scales, b, f16_to_f32(blocks[b].d));
  if (nb % 2 != 0) q8_0_set_scale(scales, nb, 0.0f);
}

size_t q4_0_pair_column_bytes(int64_t k) {
  return static_cast<size_t>((k / kQK4_0 + 1) / 2) * sizeof(Q4_0ActPair);
}

const MatmulKernel kQ8_0Ref = {q8_0_column_bytes, quantize_act_q8_0_ref, rows_ref<dot_q8_0>};
const MatmulKernel kQ4_0Ref = {q8_0_column_bytes, quantize_act_q8_0_ref, rows_ref<dot_q4_0>};
const MatmulKernel kQ4_1Ref = {q8_sum_column_bytes, quantize_act_q8_sum_ref,
                               rows_ref<dot_q8_sum<Q4_1Values>>};
const MatmulKernel kQ5_0Ref = {q8_sum_column_bytes, quantize_act_q8_sum_ref,
                               rows_ref<dot_q8_sum<Q5_0Values>>};
const MatmulKernel kQ5_1Ref = {q8_sum_column_bytes, quantize_act_q8_sum_ref,
                               rows_ref<dot_q8_sum<Q5_1Values>>};
const MatmulKernel kIQ4_NLRef = {q8_sum_column_bytes, quantize_act_q8_sum_ref,
                                 rows_ref<dot_q8_sum<IQ4_NLValues>>};
const MatmulKernel kMXFP4Ref = {q8_0_column_bytes, quantize_act_q8_0_ref, rows_ref<dot_mxfp4>};

}  // namespace strata::matmul_detail
