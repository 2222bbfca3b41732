#include "core/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype_traits.h"
#include "core/fp16.h"
#include "core/isa.h"
#include "core/kernel_test_util.h"
#include "core/matmul_internal.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace strata {
namespace {

using testing::isas;
using testing::IsaScope;
using testing::same_bits;

// One row per dtype with kernels (checked against the dtype table below).
//   mins:    the dot product adds a min part computed apart from the scale part (see
//            reference()), so its rounding error scales with the min offsets too.
//   bitwise: the SIMD kernels repeat the scalar reference's operations in its order, so
//            they must agree bit for bit; the others sum in another order (within tolerance).
struct TypeCase {
  DType dtype;
  bool mins;
  bool bitwise;
};

constexpr TypeCase kCases[] = {
    {DType::kF32, false, false},  {DType::kF16, false, false},  {DType::kBF16, false, false},
    {DType::kQ8_0, false, false}, {DType::kQ4_0, false, false}, {DType::kQ4_K, true, false},
    {DType::kQ5_K, true, false},  {DType::kQ6_K, false, false}, {DType::kQ4_1, true, true},
    {DType::kQ5_0, false, true},  {DType::kQ5_1, true, true},   {DType::kIQ4_NL, false, true},
    {DType::kQ2_K, true, true},   {DType::kQ3_K, false, true},  {DType::kIQ4_XS, false, true},
    {DType::kMXFP4, false, true},
};

const TypeCase& case_of(DType t) {
  for (const TypeCase& c : kCases) {
    if (c.dtype == t) return c;
  }
  static const TypeCase kNone{DType::kF32, false, false};
  ADD_FAILURE() << dtype_name(t) << " has no row in kCases";
  return kNone;
}

DType activation_dtype(DType t) { return dtype_traits(t)->act; }

TEST(MatmulTest, EveryDtypeWithKernelsHasACase) {
  size_t with_kernels = 0;
  for (const DTypeTraits& t : dtype_traits_all()) {
    // Device layouts have tests of their own (matmul_rows16_test.cc).
    if (!dtype_info(t.dtype).has_kernels || dtype_is_layout(t.dtype)) continue;
    ++with_kernels;
    EXPECT_EQ(case_of(t.dtype).dtype, t.dtype);
  }
  EXPECT_EQ(with_kernels, std::size(kCases));
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// W: n rows of k, quantised row by row; also kept dequantised for the references.
struct Weights {
  // spread: every 32 elements scaled by another power of two (2^-4 .. 2^4), so that block
  // scales span several binades.
  Weights(DType t, int64_t n, int64_t k, uint32_t seed, bool spread = false)
      : dtype(t), n(n), k(k) {
    row_bytes = dtype_row_bytes(t, k);
    bytes.resize(row_bytes * n);
    deq.resize(static_cast<size_t>(n * k));
    std::vector<float> src = random_vec(static_cast<size_t>(n * k), seed);
    if (spread) {
      for (size_t i = 0; i < src.size(); ++i)
        src[i] *= std::ldexp(1.0f, static_cast<int>(i / 32 % 9) - 4);
    }
    for (int64_t r = 0; r < n; ++r) {
      quantize_row(t, &src[r * k], &bytes[r * row_bytes], k);
      dequantize_row(t, &bytes[r * row_bytes], &deq[r * k], k);
    }
  }
  DType dtype;
  int64_t n, k;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;
};

// X: m columns of k with a stride larger than k, to catch stride mix-ups.
struct Acts {
  Acts(int64_t k, int64_t m, uint32_t seed) : k(k), m(m), stride(k + 3) {
    data = random_vec(static_cast<size_t>(stride * m), seed);
  }
  int64_t k, m;
  size_t stride;
  std::vector<float> data;
};

std::vector<float> run(ThreadPool& pool, const Weights& w, const Acts& x, int64_t m,
                       const float* x0) {
  const size_t y_stride = static_cast<size_t>(w.n) + 1;
  std::vector<float> y(y_stride * m, -1234.5f);
  matmul(pool, w.dtype, w.bytes.data(), w.row_bytes, w.n, w.k, x0, x.stride, m, y.data(), y_stride);
  return y;
}

// Column j's result must not depend on m, j's position in the batch, or the thread count.
TEST(MatmulTest, BitwiseIndependentOfBatchAndThreads) {
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  // n and k chosen so that the row chunking really splits over 2 and 3 threads for every type.
  // n odd so that two-row tiles leave a row; k an odd number of 32-blocks so that paired-block
  // kernels have a tail, and not a multiple of 16 for the plain types.
  const int64_t n = 131, max_m = 17;
  for (Isa isa : isas()) {
    IsaScope guard(isa);
    for (const TypeCase& tc : kCases) {
      const DType t = tc.dtype;
      const int64_t bs = dtype_block_size(t);
      const int64_t k = bs == kQKK ? 1280 : bs == kQK8_0 ? 1312 : 1283;
      const Weights w(t, n, k, 11);
      const Acts x(k, max_m, 12);
      // Alone: one column at a time, one thread.
      std::vector<std::vector<float>> alone(max_m);
      for (int64_t j = 0; j < max_m; ++j) alone[j] = run(pools[0], w, x, 1, &x.data[j * x.stride]);
      for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 16, 17}) {
        for (int p = 0; p < 3; ++p) {
          // Start at column 17 - m so the batch holds columns in other positions than alone.
          const int64_t j0 = max_m - m;
          const std::vector<float> y = run(pools[p], w, x, m, &x.data[j0 * x.stride]);
          for (int64_t j = 0; j < m; ++j) {
            for (int64_t r = 0; r < n; ++r) {
              ASSERT_TRUE(same_bits(y[j * (n + 1) + r], alone[j0 + j][r]))
                  << isa_name(isa) << " " << dtype_name(t) << " m " << m << " threads " << p + 1
                  << " column " << j0 + j << " row " << r << ": " << y[j * (n + 1) + r] << " vs "
                  << alone[j0 + j][r];
            }
            ASSERT_EQ(y[j * (n + 1) + n], -1234.5f) << "wrote past row n";
          }
        }
      }
    }
  }
}

// Reference in double from the dequantised weights and the dequantised quantised activations
// (the kernels see exactly those values), and a bound on the float error of any summation
// order: both paths round each block term a few times and sum at most k terms, so each is
// within about (k + 16) * 2^-24 * M of the exact value, M = sum of |terms|. For Q4_K/Q5_K the
// scale and min parts are summed separately, so M also counts |min offset * x|, which the
// 2 * max|w| term bounds (an offset never exceeds the largest |element| of its row by much).
struct Expect {
  std::vector<double> y;
  std::vector<double> tol;
};

Expect reference(const Weights& w, const Acts& x, int64_t m) {
  Expect e;
  const DType act = activation_dtype(w.dtype);
  const bool mins = case_of(w.dtype).mins;
  std::vector<float> xd(static_cast<size_t>(w.k));
  std::vector<uint8_t> xq(dtype_row_bytes(act, w.k));
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = &x.data[j * x.stride];
    if (act == DType::kF32) {
      std::memcpy(xd.data(), xj, sizeof(float) * w.k);
    } else {
      quantize_row(act, xj, xq.data(), w.k);
      dequantize_row(act, xq.data(), xd.data(), w.k);
    }
    for (int64_t r = 0; r < w.n; ++r) {
      const float* wr = &w.deq[r * w.k];
      double wmax = 0.0;
      for (int64_t i = 0; i < w.k; ++i) wmax = std::max(wmax, std::fabs(double{wr[i]}));
      double sum = 0.0, mag = 0.0;
      for (int64_t i = 0; i < w.k; ++i) {
        sum += double{wr[i]} * xd[i];
        mag += (std::fabs(double{wr[i]}) + (mins ? 2.0 * wmax : 0.0)) * std::fabs(double{xd[i]});
      }
      e.y.push_back(sum);
      e.tol.push_back((static_cast<double>(w.k) + 16.0) * std::ldexp(1.0, -23) * mag + 1e-30);
    }
  }
  return e;
}

// The weights, activations and reference of one shape, made once; the product at every
// instruction set the CPU runs against them.
void check_against_reference(DType t, int64_t n, int64_t k, int64_t m, ThreadPool& pool) {
  const Weights w(t, n, k, static_cast<uint32_t>(n * 7 + k));
  const Acts x(k, m, static_cast<uint32_t>(m + 100));
  const Expect e = reference(w, x, m);
  for (Isa isa : isas()) {
    IsaScope guard(isa);
    const std::vector<float> y = run(pool, w, x, m, x.data.data());
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t r = 0; r < n; ++r) {
        const size_t i = static_cast<size_t>(j * n + r);
        ASSERT_NEAR(y[j * (n + 1) + r], e.y[i], e.tol[i])
            << isa_name(isa) << " " << dtype_name(t) << " n " << n << " k " << k << " m " << m
            << " column " << j << " row " << r;
      }
    }
  }
}

std::vector<int64_t> ks_for(DType t) {
  const int64_t bs = dtype_block_size(t);
  std::vector<int64_t> ks{bs == 1 ? 16 : bs, 256, 1024 + 256};
  if (bs == 1) {  // plain types take any k: exercise the vector tail
    ks.push_back(7);
    ks.push_back(33);
  }
  if (bs == 32) {  // block counts that are not a multiple of the 2- or 8-block SIMD steps
    ks.push_back(3 * 32);
    ks.push_back(25 * 32);
  }
  if (bs == 256) ks.push_back(2 * 256);  // the two-block steps with no single block after them
  return ks;
}

// Under a sanitizer the largest n is 35, not 67: also two 16-row groups and an odd tail, half
// the work. Each shape's weights and reference are made once for every instruction set (made
// per instruction set, they took 17-25 s of the test's time under ASan; now 4.4 s in all).
TEST(MatmulTest, EveryPathMatchesDequantisedReference) {
  ThreadPool pool(2);
  for (const TypeCase& tc : kCases) {
    const DType t = tc.dtype;
    for (int64_t n :
         {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{STRATA_TEST_SANITIZED ? 35 : 67}}) {
      for (int64_t k : ks_for(t)) {
        for (int64_t m : {1, 4, 17}) check_against_reference(t, n, k, m, pool);
      }
    }
  }
}

// AVX2 against the scalar path directly: same activations, different summation order only.
TEST(MatmulTest, Avx2MatchesScalar) {
  if (isa_best_supported() < Isa::kAvx2) GTEST_SKIP() << "CPU has no AVX2";
  ThreadPool pool(2);
  for (const TypeCase& tc : kCases) {
    const DType t = tc.dtype;
    for (int64_t n : {1, 3, 17, 67}) {
      for (int64_t k : ks_for(t)) {
        const Weights w(t, n, k, 5);
        const Acts x(k, 17, 6);
        std::vector<float> ys, yv;
        {
          IsaScope g(Isa::kScalar);
          ys = run(pool, w, x, 17, x.data.data());
        }
        {
          IsaScope g(Isa::kAvx2);
          yv = run(pool, w, x, 17, x.data.data());
        }
        const Expect e = reference(w, x, 17);
        for (int64_t j = 0; j < 17; ++j) {
          for (int64_t r = 0; r < n; ++r) {
            // Each is within tol of the exact value, so they are within 2 * tol of each other.
            ASSERT_NEAR(ys[j * (n + 1) + r], yv[j * (n + 1) + r], 2 * e.tol[j * n + r])
                << dtype_name(t) << " n " << n << " k " << k << " column " << j << " row " << r;
          }
        }
      }
    }
  }
}

// Two kernels of a dtype with the same column layout (the same act_column_bytes) must write
// the same bytes: the SIMD quantiser is a faster way to the scalar one's result.
// The kernels that repeat the reference's operations: bit for bit on odd shapes (block counts
// that leave a partial SIMD step, odd n, every m from 1 to 17), several seeds, and weights with
// a wide range of scales.
TEST(MatmulTest, Avx2EqualsScalarBitwise) {
  if (isa_best_supported() < Isa::kAvx2) GTEST_SKIP() << "CPU has no AVX2";
  ThreadPool pool(2);
  int checked = 0;
  for (const TypeCase& tc : kCases) {
    if (!tc.bitwise) continue;
    ++checked;
    const DType t = tc.dtype;
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      for (int64_t n : {1, 7, 33}) {
        for (int64_t k : ks_for(t)) {
          const Weights w(t, n, k, seed * 1000 + static_cast<uint32_t>(n + k), seed % 2 == 0);
          const Acts x(k, 17, seed);
          for (int64_t m = 1; m <= 17; ++m) {
            std::vector<float> ys, yv;
            {
              IsaScope g(Isa::kScalar);
              ys = run(pool, w, x, m, x.data.data());
            }
            {
              IsaScope g(Isa::kAvx2);
              yv = run(pool, w, x, m, x.data.data());
            }
            for (int64_t j = 0; j < m; ++j) {
              for (int64_t r = 0; r < n; ++r) {
                const float a = ys[j * (n + 1) + r], b = yv[j * (n + 1) + r];
                ASSERT_TRUE(same_bits(a, b))
                    << dtype_name(t) << " seed " << seed << " n " << n << " k " << k << " m " << m
                    << " column " << j << " row " << r << ": " << a << " vs " << b;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Every kernel of `level` gives the AVX2 kernel's bits: bit for bit, every dtype, odd shapes,
// every m from 1 to 17 (tiles of every width), weights with a wide range of scales. Returns how
// many dtypes have a kernel of their own at that level.
int expect_same_bits_as_avx2(Isa level) {
  ThreadPool pool(2);
  int own_kernels = 0;
  for (const TypeCase& tc : kCases) {
    const DType t = tc.dtype;
    const DTypeTraits& traits = *dtype_traits(t);
    if (dtype_matmul_kernel(traits, level) != dtype_matmul_kernel(traits, Isa::kAvx2)) {
      ++own_kernels;
    }
    for (uint32_t seed = 1; seed <= 2; ++seed) {
      for (int64_t n : {1, 6, 33}) {
        for (int64_t k : ks_for(t)) {
          const Weights w(t, n, k, seed * 1000 + static_cast<uint32_t>(n + k), seed % 2 == 0);
          const Acts x(k, 17, seed);
          for (int64_t m = 1; m <= 17; ++m) {
            std::vector<float> y2, yl;
            {
              IsaScope g(Isa::kAvx2);
              y2 = run(pool, w, x, m, x.data.data());
            }
            {
              IsaScope g(level);
              yl = run(pool, w, x, m, x.data.data());
            }
            for (int64_t j = 0; j < m; ++j) {
              for (int64_t r = 0; r <= n; ++r) {  // r == n: the sentinel past the last row
                const float a = y2[j * (n + 1) + r], b = yl[j * (n + 1) + r];
                EXPECT_TRUE(same_bits(a, b))
                    << isa_name(level) << " " << dtype_name(t) << " seed " << seed << " n " << n
                    << " k " << k << " m " << m << " column " << j << " row " << r << ": " << a
                    << " vs " << b;
                if (!same_bits(a, b)) return own_kernels;
              }
            }
          }
        }
      }
    }
  }
  return own_kernels;
}

// The AVX-512 kernels repeat the AVX2 kernels' operations per output element (a split over
// machines with and without AVX-512 gives one answer).
TEST(MatmulTest, Avx512EqualsAvx2Bitwise) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "CPU has no AVX-512 (F/BW/VL/DQ/VNNI)";
  EXPECT_GT(expect_same_bits_as_avx2(Isa::kAvx512), 0);
}

// The AVX-VNNI kernels are the AVX2 kernels with each maddubs + madd a vpdpbusd, each madd +
// add a vpdpwssd: the same integers, so the same bits. All 13 integer dtypes have one.
TEST(MatmulTest, AvxVnniEqualsAvx2Bitwise) {
  if (!isa_supported(Isa::kAvxVnni))
    GTEST_SKIP() << "CPU has no AVX-VNNI: its kernels are not tested";
  EXPECT_EQ(expect_same_bits_as_avx2(Isa::kAvxVnni), 13);
}

// The n x m products of weights w (raw blocks of `t`, n rows of k) and activations x at each of
// `levels` are the same bits.
void expect_same_bits_at(const std::vector<Isa>& levels, DType t, const void* w, int64_t n,
                         int64_t k, const Acts& x, int64_t m) {
  ThreadPool pool(2);
  std::vector<std::vector<float>> ys;
  for (Isa isa : levels) {
    IsaScope g(isa);
    ys.emplace_back(static_cast<size_t>(n * m));
    matmul(pool, t, w, dtype_row_bytes(t, k), n, k, x.data.data(), x.stride, m, ys.back().data(),
           n);
  }
  for (size_t i = 1; i < ys.size(); ++i) {
    for (size_t j = 0; j < ys[0].size(); ++j) {
      ASSERT_TRUE(same_bits(ys[i][j], ys[0][j]))
          << dtype_name(t) << " " << isa_name(levels[i]) << " element " << j << ": " << ys[i][j]
          << " vs " << ys[0][j];
    }
  }
}

// Q8_0 quants span -128..127 in a file (the quantiser makes -127..127 only): with -128 the
// AVX2 path's maddubs pairs come closest to 16-bit saturation (2 * 128 * 127), and every SIMD
// level still gives the same bits (the scalar reference sums in another order).
TEST(MatmulTest, Q8_0AnyQuantsSameBitsOnEverySimdIsa) {
  std::vector<Isa> levels;
  for (Isa isa : isas()) {
    if (isa >= Isa::kAvx2) levels.push_back(isa);
  }
  if (levels.size() < 2) GTEST_SKIP() << "this CPU has one SIMD level at most: nothing to compare";
  std::mt19937 rng(23);
  const int64_t n = 5, k = 9 * kQK8_0, m = 13;
  std::vector<BlockQ8_0> w(static_cast<size_t>(n * k / kQK8_0));
  for (size_t i = 0; i < w.size(); ++i) {
    w[i].d = static_cast<uint16_t>(0x3c00 + rng() % 64);  // 1.0 and a little more
    for (int8_t& q : w[i].qs) q = static_cast<int8_t>(i % 3 == 0 ? -128 : rng());
  }
  expect_same_bits_at(levels, DType::kQ8_0, w.data(), n, k, Acts(k, m, 24), m);
}

// Every byte string is an MXFP4 block: random codes and exponents (subnormal scales included,
// up to 2^72 so that no sum overflows) give the same bits on every instruction set, with scales
// far apart so that the order of the additions shows.
TEST(MatmulTest, MXFP4AnyBytesSameBitsOnEveryIsa) {
  std::mt19937 rng(17);
  const int64_t n = 7, k = 25 * kQK_MXFP4, m = 17;
  std::vector<BlockMXFP4> w(static_cast<size_t>(n * k / kQK_MXFP4));
  for (BlockMXFP4& b : w) {
    b.e = static_cast<uint8_t>(rng() % 201);
    for (uint8_t& q : b.qs) q = static_cast<uint8_t>(rng());
  }
  expect_same_bits_at(isas(), DType::kMXFP4, w.data(), n, k, Acts(k, m, 18), m);
}

TEST(MatmulTest, Avx2ActivationQuantisationIsBitExact) {
  if (isa_best_supported() < Isa::kAvx2) GTEST_SKIP() << "CPU has no AVX2";
  int compared = 0;
  for (const TypeCase& tc : kCases) {
    const DTypeTraits& traits = *dtype_traits(tc.dtype);
    const MatmulKernel* ref = dtype_matmul_kernel(traits, Isa::kScalar);
    const MatmulKernel* simd = dtype_matmul_kernel(traits, Isa::kAvx2);
    if (ref->act_column_bytes == nullptr || ref == simd ||
        ref->act_column_bytes != simd->act_column_bytes) {
      continue;
    }
    ++compared;
    const int64_t bs = dtype_block_size(traits.act);
    for (uint32_t seed = 0; seed < 8; ++seed) {
      // An odd number of 32-element blocks in every other case (the paired scales' zero tail).
      const int64_t k = bs == 32 && seed % 2 == 1 ? 1312 : 1280;
      std::vector<float> x = random_vec(k, seed);
      for (float& v : x) v *= std::ldexp(1.0f, static_cast<int>(seed) * 3 - 12);
      std::fill(x.begin(), x.begin() + 256, 0.0f);                              // an all-zero block
      for (int i = 256; i < 288; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;  // exact ties
      const size_t bytes = ref->act_column_bytes(k);
      std::vector<uint8_t> a(bytes, 0), b(bytes, 0);
      ref->quantize_activation(x.data(), a.data(), k);
      simd->quantize_activation(x.data(), b.data(), k);
      ASSERT_EQ(a, b) << dtype_name(tc.dtype) << " seed " << seed;
    }
  }
  EXPECT_GT(compared, 0);
}

// The regrouped Q4_0 activations hold exactly the Q8_0 quantisation, and their offsets add up
// to 8 times each block's sum (what the unsigned nibbles' bias contributes).
TEST(MatmulTest, Avx2Q4_0ActivationPairsHoldQ8_0) {
  if (isa_best_supported() < Isa::kAvx2) GTEST_SKIP() << "CPU has no AVX2";
  for (int64_t nb : {1, 2, 7, 40}) {
    const int64_t k = nb * kQK8_0;
    std::vector<float> x = random_vec(static_cast<size_t>(k), static_cast<uint32_t>(nb));
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    std::vector<BlockQ8_0> q(static_cast<size_t>(nb));
    quantize_row(DType::kQ8_0, x.data(), q.data(), k);
    const MatmulKernel& kernel = matmul_detail::kQ4_0Avx2;
    std::vector<uint8_t> packed(kernel.act_column_bytes(k), 0xee);
    kernel.quantize_activation(x.data(), packed.data(), k);
    ASSERT_EQ(packed.size(), static_cast<size_t>((nb + 1) / 2) * 128);
    for (int64_t b = 0; b < (nb + 1) / 2 * 2; ++b) {
      matmul_detail::Q4_0ActPair pair;
      std::memcpy(&pair, &packed[static_cast<size_t>(b / 2) * sizeof pair], sizeof pair);
      const int h = static_cast<int>(b % 2);
      int sum = 0, off = 0;
      for (int i = 0; i < 16; ++i) {
        const int lo = b < nb ? q[b].qs[i] : 0, hi = b < nb ? q[b].qs[16 + i] : 0;
        ASSERT_EQ(pair.lo[16 * h + i], lo) << "block " << b << " element " << i;
        ASSERT_EQ(pair.hi[16 * h + i], hi) << "block " << b << " element " << 16 + i;
        sum += lo + hi;
      }
      for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(pair.d[4 * h + i], b < nb ? f16_to_f32(q[b].d) : 0.0f) << "block " << b;
        off += pair.off[4 * h + i];
      }
      ASSERT_EQ(off, 8 * sum) << "block " << b;
    }
  }
}

TEST(MatmulTest, EmptyShapesDoNothing) {
  ThreadPool pool(2);
  float y = 7.0f;
  const float x = 1.0f;
  matmul(pool, DType::kF32, &x, 4, 0, 1, &x, 1, 1, &y, 1);
  matmul(pool, DType::kF32, &x, 4, 1, 1, &x, 1, 0, &y, 1);
  EXPECT_EQ(y, 7.0f);
}

}  // namespace
}  // namespace strata
