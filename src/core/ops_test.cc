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

namespace strata {
namespace {

using testing::isas;
using testing::IsaScope;

constexpr float kEps = std::numeric_limits<float>::epsilon();  // 2^-23

bool have_avx2() { return isa_best_supported() >= Isa::kAvx2; }

std::vector<float> uniform_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

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

// ---------------------------------------------------------------------------------------------
// attention

struct KvCache {
  DType dtype;
  int64_t head_dim, n_head_kv, n_cells, max_len;
  size_t row_bytes;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> cells;  // [max_len, n_lists], unused entries -1

  float get(const std::vector<uint8_t>& base, int32_t cell, int64_t kvh, int64_t d) const {
    const uint8_t* p = base.data() + size_t(cell) * row_bytes;
    const int64_t i = kvh * head_dim + d;
    if (dtype == DType::kF16) {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return f16_to_f32(h);
    }
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  }
};

// Rows hold n_head_kv heads plus 3 unused elements (rows are not packed). Each list is a
// random set of distinct cells in random order. Values are uniform in [-range, range], rounded
// to integers when `integers` is set.
KvCache make_cache(DType dt, int64_t head_dim, int64_t n_head_kv, int64_t n_cells,
                   const std::vector<int64_t>& list_lens, uint32_t seed, float range = 1.0f,
                   bool integers = false) {
  KvCache c{dt, head_dim, n_head_kv, n_cells, 0, 0, {}, {}, {}};
  c.max_len = *std::max_element(list_lens.begin(), list_lens.end());
  const int64_t elems = n_head_kv * head_dim + 3;
  const size_t es = dt == DType::kF16 ? 2 : 4;
  c.row_bytes = elems * es;
  std::vector<float> kf = uniform_floats(elems * n_cells, seed, -range, range);
  std::vector<float> vf = uniform_floats(elems * n_cells, seed + 1, -1.0f, 1.0f);
  if (integers) {
    for (float& x : kf) x = std::round(x);
  }
  c.k.resize(c.row_bytes * n_cells);
  c.v.resize(c.row_bytes * n_cells);
  for (int64_t i = 0; i < elems * n_cells; ++i) {
    if (dt == DType::kF16) {
      const uint16_t hk = f32_to_f16(kf[i]), hv = f32_to_f16(vf[i]);
      std::memcpy(&c.k[i * 2], &hk, 2);
      std::memcpy(&c.v[i * 2], &hv, 2);
    } else {
      std::memcpy(&c.k[i * 4], &kf[i], 4);
      std::memcpy(&c.v[i * 4], &vf[i], 4);
    }
  }
  std::mt19937 rng(seed + 2);
  c.cells.assign(c.max_len * list_lens.size(), -1);
  for (size_t l = 0; l < list_lens.size(); ++l) {
    std::vector<int32_t> all(n_cells);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), list_lens[l], c.cells.begin() + l * c.max_len);
  }
  return c;
}

// Softmax attention in double, written directly from the definition.
std::vector<double> attention_oracle(const KvCache& c, const float* qh, int64_t h, int64_t n_head,
                                     int32_t list, int64_t len, float scale,
                                     const AttentionExtra& extra = {}) {
  const int64_t kvh = h / (n_head / c.n_head_kv);
  const int32_t* cells = c.cells.data() + list * c.max_len;
  if (extra.window > 0 && len > extra.window) {  // the last `window` cells of the prefix
    cells += len - extra.window;
    len = extra.window;
  }
  std::vector<double> s(len);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < c.head_dim; ++d) dot += double(qh[d]) * c.get(c.k, cells[j], kvh, d);
    s[j] = dot * scale;
    if (extra.softcap > 0) s[j] = std::tanh(s[j] / extra.softcap) * extra.softcap;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> out(c.head_dim, 0.0);
  for (int64_t j = 0; j < len; ++j) {
    for (int64_t d = 0; d < c.head_dim; ++d) out[d] += s[j] / sum * c.get(c.v, cells[j], kvh, d);
  }
  return out;
}

struct AttnRun {
  int64_t n_head;
  std::vector<int32_t> tok;  // [2, n_tokens]
  std::vector<float> q;      // token stride n_head * head_dim + 5
  float scale;
  AttentionExtra extra = {};

  int64_t n_tokens() const { return int64_t(tok.size() / 2); }
  size_t q_stride(const KvCache& c) const { return n_head * c.head_dim + 5; }

  std::vector<float> run(ThreadPool& pool, const KvCache& c, int64_t first = 0,
                         int64_t count = -1) const {
    if (count < 0) count = n_tokens();
    const size_t qs = q_stride(c), os = n_head * c.head_dim + 2;
    std::vector<float> out(os * count, -7.0f);
    attention(pool, q.data() + first * qs, qs, c.head_dim, n_head, count, c.dtype, c.k.data(),
              c.v.data(), c.row_bytes, c.n_head_kv, c.cells.data(), c.max_len,
              tok.data() + 2 * first, scale, out.data(), os, extra);
    // Keep only the head values (the padding of each output row must be left alone).
    std::vector<float> packed;
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t i = 0; i < n_head * c.head_dim; ++i) packed.push_back(out[t * os + i]);
      for (size_t i = n_head * c.head_dim; i < os; ++i) EXPECT_EQ(out[t * os + i], -7.0f);
    }
    return packed;
  }
};

AttnRun make_run(const KvCache& c, int64_t n_head, std::vector<int32_t> tok, uint32_t seed,
                 float q_range = 1.0f, bool integers = false) {
  AttnRun r{n_head, std::move(tok), {}, 1.0f / std::sqrt(float(c.head_dim))};
  r.q = uniform_floats(r.q_stride(c) * r.n_tokens(), seed, -q_range, q_range);
  if (integers) {
    for (float& x : r.q) x = std::round(x);
  }
  return r;
}

void expect_matches_oracle(const KvCache& c, const AttnRun& r, const std::vector<float>& got,
                           const char* what) {
  for (int64_t t = 0; t < r.n_tokens(); ++t) {
    const int64_t len = r.tok[2 * t + 1];
    // Float rounding errors of the q.k dots and of the weighted sum over the cells behave like
    // random walks (~eps * sqrt(terms) for values of magnitude <= 1); 10x margin.
    const double tol = 10 * kEps * (std::sqrt(double(c.head_dim)) + std::sqrt(double(len)) + 1);
    for (int64_t h = 0; h < r.n_head; ++h) {
      const std::vector<double> want =
          attention_oracle(c, r.q.data() + t * r.q_stride(c) + h * c.head_dim, h, r.n_head,
                           r.tok[2 * t], len, r.scale, r.extra);
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const float g = got[(t * r.n_head + h) * c.head_dim + d];
        ASSERT_TRUE(std::isfinite(g));
        ASSERT_NEAR(g, want[d], tol) << what << " " << dtype_name(c.dtype) << " hd=" << c.head_dim
                                     << " t=" << t << " h=" << h << " d=" << d << " len=" << len;
      }
    }
  }
}

TEST(OpsAttention, MatchesDoubleOracle) {
  struct Case {
    int64_t head_dim, n_head, n_head_kv;
  };
  // Plain MHA, GQA 4:1, MQA with a group of 6 (runs of 4 + 2 heads), odd head sizes.
  const Case cases[] = {{128, 4, 4}, {64, 8, 2}, {100, 6, 1}, {256, 2, 1}, {7, 3, 3}, {16, 4, 2}};
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    for (const Case& cs : cases) {
      const KvCache c = make_cache(dt, cs.head_dim, cs.n_head_kv, 300, {257, 1, 40, 300},
                                   uint32_t(cs.head_dim + cs.n_head));
      // (list, len): full lists, prefixes, one-cell lists, an empty prefix.
      const AttnRun r = make_run(c, cs.n_head, {0, 257, 1, 1, 2, 17, 0, 1, 3, 300, 2, 40, 3, 0},
                                 uint32_t(cs.n_head_kv));
      for (Isa isa : isas()) {
        IsaScope scope(isa);
        expect_matches_oracle(c, r, r.run(pool, c), isa_name(isa));
      }
    }
  }
}

TEST(OpsAttention, LongListMatchesOracle) {
  ThreadPool pool(2);
  const KvCache c = make_cache(DType::kF16, 64, 1, 20000, {20000, 5}, 7);
  const AttnRun r = make_run(c, 6, {0, 20000, 1, 5, 0, 12345}, 8, 3.0f);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    expect_matches_oracle(c, r, r.run(pool, c), isa_name(isa));
  }
}

// Sliding windows (shorter and longer than the lists) and soft-capped scores, on every ISA,
// against the oracle that applies both by definition.
TEST(OpsAttention, WindowAndSoftcapMatchOracle) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 64, 2, 300, {257, 40}, 31, 2.0f);
    for (const AttentionExtra extra : {AttentionExtra{16, 0.0f}, AttentionExtra{0, 0.7f},
                                       AttentionExtra{100, 2.0f}, AttentionExtra{1, 0.0f}}) {
      AttnRun r = make_run(c, 4, {0, 257, 1, 40, 0, 17, 1, 1, 0, 100}, 32, 2.0f);
      r.extra = extra;
      for (Isa isa : isas()) {
        IsaScope scope(isa);
        expect_matches_oracle(c, r, r.run(pool, c), isa_name(isa));
      }
    }
  }
}

// A window of 0 and a cap of 0 are plain attention, bit for bit.
TEST(OpsAttention, NoWindowNoCapIsPlainAttention) {
  ThreadPool pool(2);
  const KvCache c = make_cache(DType::kF16, 32, 1, 50, {50}, 41);
  AttnRun r = make_run(c, 2, {0, 50, 0, 7}, 42);
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    const std::vector<float> plain = r.run(pool, c);
    r.extra = AttentionExtra{0, 0.0f};
    EXPECT_TRUE(bitwise_equal(plain, r.run(pool, c))) << isa_name(isa);
    r.extra = AttentionExtra{50, 0.0f};  // a window as long as the list changes nothing
    EXPECT_TRUE(bitwise_equal(plain, r.run(pool, c))) << isa_name(isa);
    r.extra = {};
  }
}

// Integer q and k make the scores exact in float (|score| ~ 1e4): exp(score) alone would be
// inf, so a finite result that matches the oracle shows the maximum is subtracted.
TEST(OpsAttention, LargeScoresAreStable) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 16, 2, 64, {64, 9}, 11, 30.0f, true);
    AttnRun r = make_run(c, 4, {0, 64, 1, 9, 1, 1}, 12, 30.0f, true);
    r.scale = 1.0f;
    for (Isa isa : isas()) {
      IsaScope scope(isa);
      const std::vector<float> got = r.run(pool, c);
      float max_score = 0;
      for (int64_t d = 0; d < 16; ++d) max_score += std::abs(r.q[d]) * 30.0f;
      EXPECT_GT(max_score, 1000.0f) << "the test needs large scores";
      expect_matches_oracle(c, r, got, isa_name(isa));
    }
  }
}

// A token's output must be bitwise the same whatever the thread count and whatever else is in
// the batch (other sequences, other lengths): computed alone it must equal its batch row.
TEST(OpsAttention, BitwiseAcrossThreadsAndBatches) {
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 128, 2, 800, {700, 33, 1}, 21);
    const AttnRun r = make_run(c, 8, {0, 700, 1, 33, 2, 1, 0, 450, 1, 5, 0, 1, 0, 699}, 22, 2.0f);
    const int64_t per_token = r.n_head * c.head_dim;
    for (Isa isa : isas()) {
      IsaScope scope(isa);
      std::vector<float> batch;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> got = r.run(pool, c);
        if (batch.empty()) {
          batch = got;
        } else {
          EXPECT_TRUE(bitwise_equal(batch, got)) << isa_name(isa) << " threads=" << threads;
        }
        for (int64_t t = 0; t < r.n_tokens(); ++t) {
          std::vector<float> alone = r.run(pool, c, t, 1);
          std::vector<float> row(batch.begin() + t * per_token,
                                 batch.begin() + (t + 1) * per_token);
          EXPECT_TRUE(bitwise_equal(alone, row))
              << isa_name(isa) << " token " << t << " threads=" << threads;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
