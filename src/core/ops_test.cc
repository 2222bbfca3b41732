#include "core/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/isa.h"
#include "core/kernel_test_util.h"
#include "core/quant.h"
#include "core/quant_rows.h"

namespace strata {
namespace {

using testing::bitwise_equal;
using testing::isas;
using testing::IsaScope;
using testing::kEps;
using testing::uniform_floats;

bool have_avx2() { return isa_best_supported() >= Isa::kAvx2; }

const int64_t kSizes[] = {1, 7, 8, 33, 100, 4097};

// ---------------------------------------------------------------------------------------------
// rms_norm

TEST(OpsRmsNorm, BothPathsMatchDoubleOracle) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : kSizes) {
      const int64_t rows = 3;
      const size_t stride = n + 5;  // rows are not packed
      std::vector<float> x = uniform_floats(stride * rows, 1 + n, -3.0f, 3.0f);
      std::vector<float> w = uniform_floats(n, 2 + n, 0.5f, 1.5f);
      for (bool with_weight : {false, true}) {
        std::vector<float> y(stride * rows, 0.0f);
        rms_norm(pool, x.data(), stride, with_weight ? w.data() : nullptr, y.data(), stride, n,
                 rows, 1e-5f);
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < n; ++i) ss += double(x[r * stride + i]) * x[r * stride + i];
          const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
          for (int64_t i = 0; i < n; ++i) {
            const double want = x[r * stride + i] * scale * (with_weight ? w[i] : 1.0);
            // Float rounding of the square, the mean, sqrt, the division and two products:
            // under 8 ulp of the result.
            ASSERT_NEAR(y[r * stride + i], want, 8 * kEps * std::abs(want) + 1e-30)
                << isa_name(isa) << " n=" << n << " r=" << r << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(OpsRmsNorm, Avx2AgreesWithReferenceAndAliasingWorks) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  ThreadPool pool(1);
  for (int64_t n : kSizes) {
    std::vector<float> x = uniform_floats(n * 4, 10 + n, -2.0f, 2.0f);
    std::vector<float> w = uniform_floats(n, 11 + n);
    std::vector<float> ref(n * 4), simd(n * 4);
    {
      IsaScope s(Isa::kScalar);
      rms_norm(pool, x.data(), n, w.data(), ref.data(), n, n, 4, 1e-6f);
    }
    IsaScope s(Isa::kAvx2);
    rms_norm(pool, x.data(), n, w.data(), simd.data(), n, n, 4, 1e-6f);
    // Both sum in double; only the order differs, which can move the float mean by one ulp
    // at most, so each output is within two ulp of the reference.
    for (int64_t i = 0; i < n * 4; ++i) {
      ASSERT_NEAR(simd[i], ref[i], 2 * kEps * std::abs(ref[i])) << "n=" << n << " i=" << i;
    }
    std::vector<float> inplace = x;
    rms_norm(pool, inplace.data(), n, w.data(), inplace.data(), n, n, 4, 1e-6f);
    EXPECT_TRUE(bitwise_equal(inplace, simd)) << "n=" << n;
  }
}

// ---------------------------------------------------------------------------------------------
// binary

TEST(OpsBinary, AddAndMulWithBroadcastAndAliasing) {
  ThreadPool pool(3);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : kSizes) {
      const int64_t rows = 5;
      std::vector<float> a = uniform_floats(n * rows, 20 + n);
      std::vector<float> b_full = uniform_floats(n * rows, 21 + n);
      for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kMul}) {
        for (int64_t b_rows : {int64_t{1}, rows}) {
          std::vector<float> y(n * rows);
          binary(pool, op, a.data(), n, b_full.data(), n, b_rows, y.data(), n, n, rows);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < n; ++i) {
              const float av = a[r * n + i];
              const float bv = b_full[(r % b_rows) * n + i];
              // One IEEE operation: exact equality.
              ASSERT_EQ(y[r * n + i], op == BinaryOp::kAdd ? av + bv : av * bv);
            }
          }
          std::vector<float> alias = a;
          binary(pool, op, alias.data(), n, b_full.data(), n, b_rows, alias.data(), n, n, rows);
          EXPECT_TRUE(bitwise_equal(alias, y)) << isa_name(isa) << " n=" << n;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// swiglu

TEST(OpsSwiglu, BothPathsMatchDoubleOracle) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : kSizes) {
      std::vector<float> g = uniform_floats(n * 2, 30 + n, -12.0f, 12.0f);
      std::vector<float> u = uniform_floats(n * 2, 31 + n, -2.0f, 2.0f);
      // Overflow and underflow of exp(-g): silu is 0 (or tiny) and g.
      const float extremes[] = {-100.0f, 100.0f, -88.5f, 88.5f, 0.0f, -0.0f, 1e-20f};
      for (size_t i = 0; i < std::size(extremes) && i < g.size(); ++i) g[i] = extremes[i];
      std::vector<float> y(n * 2);
      swiglu(pool, g.data(), n, u.data(), n, y.data(), n, n, 2);
      for (int64_t i = 0; i < n * 2; ++i) {
        const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
        // exp is within ~1 ulp (libm, or the polynomial of the AVX2 path), then an add, a
        // division and a product: 6 ulp covers it; the absolute part is for results that
        // underflow (g = -100 gives ~1e-42).
        ASSERT_NEAR(y[i], want, 6 * kEps * std::abs(want) + 1e-37)
            << isa_name(isa) << " n=" << n << " g=" << g[i];
      }
      std::vector<float> alias = g;
      swiglu(pool, alias.data(), n, u.data(), n, alias.data(), n, n, 2);
      EXPECT_TRUE(bitwise_equal(alias, y));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// rope

// Angles as ggml computes them (power by repeated float multiplication), rotation in double.
void rope_oracle(std::vector<float>& x, int64_t head_dim, int64_t n_head, int64_t n_tokens,
                 const std::vector<int32_t>& pos, int64_t n_rot, RopeMode mode, float base,
                 float fscale) {
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      float theta = float(pos[t]);
      float* xh = x.data() + (t * n_head + h) * head_dim;
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double th = double(fscale * theta);
        const int64_t i0 = mode == RopeMode::kNeox ? i : 2 * i;
        const int64_t i1 = mode == RopeMode::kNeox ? i + n_rot / 2 : 2 * i + 1;
        const double x0 = xh[i0], x1 = xh[i1];
        xh[i0] = float(x0 * std::cos(th) - x1 * std::sin(th));
        xh[i1] = float(x0 * std::sin(th) + x1 * std::cos(th));
        theta *= theta_scale;
      }
    }
  }
}

TEST(OpsRope, MatchesOracleAndLeavesDimsBeyondNRot) {
  ThreadPool pool(2);
  struct Case {
    int64_t head_dim, n_rot;
    RopeMode mode;
  };
  const Case cases[] = {{128, 128, RopeMode::kNormal}, {128, 128, RopeMode::kNeox},
                        {64, 32, RopeMode::kNormal},   {64, 32, RopeMode::kNeox},
                        {100, 74, RopeMode::kNormal},  {100, 74, RopeMode::kNeox},
                        {6, 2, RopeMode::kNormal},     {6, 2, RopeMode::kNeox}};
  const std::vector<int32_t> pos = {0, 1, 17, 511, 4000, 32767};
  const int64_t n_head = 3, n_tokens = int64_t(pos.size());
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (const Case& c : cases) {
      for (float fscale : {1.0f, 0.25f}) {
        std::vector<float> x = uniform_floats(c.head_dim * n_head * n_tokens, 40 + c.n_rot);
        std::vector<float> want = x;
        rope_oracle(want, c.head_dim, n_head, n_tokens, pos, c.n_rot, c.mode, 10000.0f, fscale);
        std::vector<float> got = x;
        rope(pool, got.data(), c.head_dim, n_head, n_tokens, c.head_dim * n_head, pos.data(),
             c.n_rot, c.mode, 10000.0f, fscale);
        for (size_t i = 0; i < x.size(); ++i) {
          const int64_t d = int64_t(i) % c.head_dim;
          if (d >= c.n_rot) {
            ASSERT_EQ(got[i], x[i]) << "dims beyond n_rot must not change";
          } else {
            // Same float angles; libm's cosf/sinf (<= 1 ulp) and float rounding of two
            // products and a sum: a few ulp of the inputs' magnitude (<= 1).
            ASSERT_NEAR(got[i], want[i], 4e-7) << isa_name(isa) << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(OpsRope, KnownRotationAndLinearScaling) {
  ThreadPool pool(1);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    // One pair at position 1: theta = 1 radian, independent of the base.
    for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
      std::vector<float> x = {0.5f, -2.0f};
      const int32_t pos = 1;
      rope(pool, x.data(), 2, 1, 1, 2, &pos, 2, mode, 10000.0f, 1.0f);
      EXPECT_NEAR(x[0], 0.5 * std::cos(1.0) + 2.0 * std::sin(1.0), 1e-6);
      EXPECT_NEAR(x[1], 0.5 * std::sin(1.0) - 2.0 * std::cos(1.0), 1e-6);
    }
    // Position 0 is the identity, exactly (cos 0 = 1, sin 0 = 0).
    std::vector<float> x = uniform_floats(64, 50);
    std::vector<float> y = x;
    const int32_t zero = 0;
    rope(pool, y.data(), 64, 1, 1, 64, &zero, 64, RopeMode::kNormal, 500000.0f, 1.0f);
    EXPECT_TRUE(bitwise_equal(x, y));
    // Linear scaling: freq_scale 1/2 at position 2p is freq_scale 1 at position p, exactly
    // (scaling by powers of two is exact).
    std::vector<float> a = uniform_floats(128 * 2, 51), b = a;
    const int32_t p2 = 2 * 777, p1 = 777;
    rope(pool, a.data(), 128, 2, 1, 256, &p2, 128, RopeMode::kNeox, 1e6f, 0.5f);
    rope(pool, b.data(), 128, 2, 1, 256, &p1, 128, RopeMode::kNeox, 1e6f, 1.0f);
    EXPECT_TRUE(bitwise_equal(a, b));
  }
}

TEST(OpsRope, Avx2AgreesWithReference) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  ThreadPool pool(1);
  std::vector<int32_t> pos(37);
  std::iota(pos.begin(), pos.end(), 1000);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int64_t n_rot : {2, 6, 16, 22, 64, 128}) {
      std::vector<float> x = uniform_floats(128 * 4 * pos.size(), 60 + n_rot, -4.0f, 4.0f);
      std::vector<float> ref = x, simd = x;
      {
        IsaScope s(Isa::kScalar);
        rope(pool, ref.data(), 128, 4, int64_t(pos.size()), 512, pos.data(), n_rot, mode, 1e4f,
             1.0f);
      }
      IsaScope s(Isa::kAvx2);
      rope(pool, simd.data(), 128, 4, int64_t(pos.size()), 512, pos.data(), n_rot, mode, 1e4f,
           1.0f);
      // Same angles; the AVX2 path fuses one product of each output into an FMA (as llama.cpp
      // does when built with FMA), which changes the result by at most a rounding of a product
      // and of the sum: 2 ulp of the largest input (4).
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(simd[i], ref[i], 2 * kEps * 4.0f) << "n_rot=" << n_rot << " i=" << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// get_rows, set_rows, argmax

TEST(OpsGetRows, F32F16AndQuantised) {
  ThreadPool pool(2);
  const int64_t n = 96, n_table = 9;  // 96: a multiple of the Q8_0 block (32)
  const std::vector<int32_t> ids = {3, 0, 8, 3, 5};
  std::vector<float> src = uniform_floats(n * n_table, 70, -3.0f, 3.0f);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (DType dt : {DType::kF32, DType::kF16, DType::kQ8_0}) {
      const size_t row_bytes = dtype_row_bytes(dt, n);
      std::vector<uint8_t> table(row_bytes * n_table);
      for (int64_t r = 0; r < n_table; ++r) {
        quantize_row(dt, src.data() + r * n, table.data() + r * row_bytes, n);
      }
      std::vector<float> y(n * ids.size());
      get_rows(pool, dt, table.data(), row_bytes, n, ids.data(), int64_t(ids.size()), y.data(), n);
      for (size_t i = 0; i < ids.size(); ++i) {
        std::vector<float> want(n);
        dequantize_row(dt, table.data() + ids[i] * row_bytes, want.data(), n);
        // Conversion to float is exact (F16C and the scalar path agree bit for bit).
        EXPECT_EQ(std::memcmp(y.data() + i * n, want.data(), n * sizeof(float)), 0)
            << isa_name(isa) << " " << dtype_name(dt) << " row " << i;
      }
    }
  }
}

TEST(OpsSetRows, F16RoundsToNearestEvenLikeTheScalarConversion) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{100}}) {
      const std::vector<int32_t> idx = {4, 1, 2};
      std::vector<float> src = uniform_floats(n * idx.size(), 80 + n, -70000.0f, 70000.0f);
      const float specials[] = {
          std::numeric_limits<float>::infinity(), 1e-6f, -6e-8f, 65520.0f, 65519.0f, 0.0f, -0.0f};
      for (size_t i = 0; i < std::size(specials) && i < src.size(); ++i) src[i] = specials[i];
      std::vector<uint16_t> dst(6 * n, 0x1234);
      set_rows(pool, DType::kF16, dst.data(), n * 2, src.data(), n, n, idx.data(),
               int64_t(idx.size()));
      for (size_t r = 0; r < idx.size(); ++r) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(dst[idx[r] * n + i], f32_to_f16(src[r * n + i])) << isa_name(isa);
        }
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dst[i], 0x1234) << "row 0 must be untouched";
      std::vector<float> dst32(6 * n, 0.0f);
      set_rows(pool, DType::kF32, dst32.data(), n * 4, src.data(), n, n, idx.data(),
               int64_t(idx.size()));
      for (size_t r = 0; r < idx.size(); ++r) {
        EXPECT_EQ(std::memcmp(&dst32[idx[r] * n], &src[r * n], n * 4), 0);
      }
    }
  }
}

// A q8_0 cache row is quantize_row_q8_0 of the row, plane by plane (a head-major cache's rows
// of n_head_kv heads); and a q8_0 row read back (get_rows) and written again (set_rows, as a
// context shift copies a shared cell) gives the same bytes: requantising q * d finds d and q.
TEST(OpsSetRows, Q8_0IsTheQuantisedRowAndCopiesExactly) {
  ThreadPool pool(2);
  const int64_t n = 64, planes = 3, cells = 6;
  const size_t row = dtype_row_bytes(DType::kQ8_0, n);
  const size_t plane_bytes = cells * row;
  const std::vector<int32_t> idx = {4, 1, 2};
  std::vector<float> src = uniform_floats(n * planes * idx.size(), 90, -3.0f, 3.0f);
  for (int64_t i = 0; i < 32; ++i) src[i] = 0.0f;  // an all-zero block: scale 0
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    std::vector<uint8_t> cache(planes * plane_bytes, 0x5a);
    set_rows(pool, DType::kQ8_0, cache.data(), row, src.data(), n * planes, n, idx.data(),
             int64_t(idx.size()), planes, plane_bytes);
    std::vector<uint8_t> want(row);
    for (size_t r = 0; r < idx.size(); ++r) {
      for (int64_t p = 0; p < planes; ++p) {
        quantize_row_q8_0(src.data() + (r * planes + p) * n, want.data(), n);
        EXPECT_EQ(std::memcmp(cache.data() + p * plane_bytes + idx[r] * row, want.data(), row), 0)
            << isa_name(isa) << " row " << r << " plane " << p;
      }
    }
    for (int64_t p = 0; p < planes; ++p) {  // cell 0 was not written
      EXPECT_EQ(cache[p * plane_bytes], 0x5a);
    }
    // Copy cells 4, 1, 2 to 0, 3, 5 through floats.
    std::vector<float> rows(n * planes * idx.size());
    get_rows(pool, DType::kQ8_0, cache.data(), row, n, idx.data(), int64_t(idx.size()), rows.data(),
             n * planes, cells, planes, plane_bytes);
    const std::vector<int32_t> to = {0, 3, 5};
    set_rows(pool, DType::kQ8_0, cache.data(), row, rows.data(), n * planes, n, to.data(),
             int64_t(to.size()), planes, plane_bytes);
    for (size_t r = 0; r < idx.size(); ++r) {
      for (int64_t p = 0; p < planes; ++p) {
        EXPECT_EQ(std::memcmp(cache.data() + p * plane_bytes + to[r] * row,
                              cache.data() + p * plane_bytes + idx[r] * row, row),
                  0)
            << isa_name(isa) << " copy " << r << " plane " << p;
      }
    }
  }
}

TEST(OpsArgmax, FirstMaximumNanAndInfRows) {
  ThreadPool pool(2);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : kSizes) {
      std::vector<float> x = uniform_floats(n * 6, 90 + n);
      // Row 1: a tie, the first one wins. Row 2: all -inf. Row 3: NaNs are skipped.
      // Row 4: the maximum in the tail. Row 5: all equal.
      x[n + n / 2] = 5.0f;
      x[n + n - 1] = 5.0f;
      std::fill(x.begin() + 2 * n, x.begin() + 3 * n, -inf);
      x[3 * n] = nan;
      if (n > 3) x[3 * n + 2] = nan;
      x[4 * n + n - 1] = 9.0f;
      std::fill(x.begin() + 5 * n, x.begin() + 6 * n, 0.25f);
      std::vector<int32_t> got(6);
      argmax(pool, x.data(), n, n, 6, got.data());
      for (int64_t r = 0; r < 6; ++r) {
        float best = -inf;
        int32_t want = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (x[r * n + i] > best) best = x[r * n + i], want = int32_t(i);
        }
        EXPECT_EQ(got[r], want) << isa_name(isa) << " n=" << n << " row " << r;
      }
      EXPECT_EQ(got[1], n / 2 == n - 1 ? n - 1 : n / 2);
      EXPECT_EQ(got[4], n - 1);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Determinism across thread counts for the row kernels.

TEST(OpsThreads, RowKernelsBitwiseAcrossThreadCounts) {
  const int64_t n = 100, rows = 1000;  // enough rows to be split between threads
  std::vector<float> x = uniform_floats(n * rows, 100, -5.0f, 5.0f);
  std::vector<float> w = uniform_floats(n * rows, 101);
  std::vector<int32_t> pos(rows);
  std::iota(pos.begin(), pos.end(), 3);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> a(n * rows), b(n * rows), c = x;
      rms_norm(pool, x.data(), n, w.data(), a.data(), n, n, rows, 1e-6f);
      swiglu(pool, x.data(), n, w.data(), n, b.data(), n, n, rows);
      rope(pool, c.data(), 50, 2, rows, n, pos.data(), 50, RopeMode::kNormal, 1e4f, 1.0f);
      a.insert(a.end(), b.begin(), b.end());
      a.insert(a.end(), c.begin(), c.end());
      outs.push_back(std::move(a));
    }
    EXPECT_TRUE(bitwise_equal(outs[0], outs[1])) << isa_name(isa);
    EXPECT_TRUE(bitwise_equal(outs[0], outs[2])) << isa_name(isa);
  }
}

}  // namespace
}  // namespace strata
