// The mixture-of-experts kernels against plain loops written here, on every instruction set:
// top-k's order (ties, NaN, infinities, signed zeros), each gating mode with normalisation and
// scale, the weighted sum's fused multiply-adds, and that a token's results do not depend on the
// other tokens of its batch or on the thread count.
#include "core/ops_moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernel_test_util.h"
#include "core/rng.h"

namespace strata {
namespace {

using testing::bitwise_equal;
using testing::isas;
using testing::IsaScope;
using testing::random_floats;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The k best of one row by repeated selection: the first unselected index whose value beats
// every other unselected one, numbers before NaNs, lower index on ties.
std::vector<int32_t> select_loop(const std::vector<float>& x, int64_t k) {
  std::vector<bool> used(x.size(), false);
  std::vector<int32_t> out;
  for (int64_t s = 0; s < k; ++s) {
    int64_t best = -1;
    for (size_t i = 0; i < x.size(); ++i) {
      if (used[i]) continue;
      if (best < 0) {
        best = static_cast<int64_t>(i);
        continue;
      }
      const float b = x[static_cast<size_t>(best)];
      const bool better = std::isnan(b) ? !std::isnan(x[i]) : (!std::isnan(x[i]) && x[i] > b);
      if (better) best = static_cast<int64_t>(i);
    }
    used[static_cast<size_t>(best)] = true;
    out.push_back(static_cast<int32_t>(best));
  }
  return out;
}

std::vector<int32_t> top_k(ThreadPool& pool, const std::vector<float>& logits, int64_t n_expert,
                           int64_t k) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / n_expert;
  std::vector<int32_t> ids(static_cast<size_t>(k * rows), -1);
  moe_top_k(pool, logits.data(), static_cast<size_t>(n_expert), n_expert, rows, k, ids.data(),
            static_cast<size_t>(k));
  return ids;
}

TEST(MoeTopK, MatchesSelectionOnRandomRowsWithTies) {
  ThreadPool pool(2);
  Rng rng(5);
  for (int64_t n_expert : {int64_t{1}, int64_t{8}, int64_t{60}, int64_t{128}, kMaxExperts}) {
    for (int64_t k : {int64_t{1}, std::min<int64_t>(n_expert, 8), n_expert}) {
      const int64_t rows = 7;
      std::vector<float> x(static_cast<size_t>(n_expert * rows));
      // Few distinct values: most rows have ties among their best.
      for (float& v : x) v = static_cast<float>(rng.next() % 9) - 4.0f;
      const std::vector<int32_t> ids = top_k(pool, x, n_expert, k);
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> row(x.begin() + r * n_expert, x.begin() + (r + 1) * n_expert);
        const std::vector<int32_t> want = select_loop(row, k);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), ids.begin() + r * k))
            << "n_expert " << n_expert << " k " << k << " row " << r;
      }
    }
  }
}

TEST(MoeTopK, TiesGoToTheLowerIndexAndNaNRanksLast) {
  ThreadPool pool(1);
  // 0: NaN, 1: 2, 2: -inf, 3: 2, 4: NaN, 5: -0, 6: +0, 7: inf
  const std::vector<float> x = {kNaN, 2.0f, -kInf, 2.0f, kNaN, -0.0f, 0.0f, kInf};
  EXPECT_EQ(top_k(pool, x, 8, 8), (std::vector<int32_t>{7, 1, 3, 5, 6, 2, 0, 4}));
  EXPECT_EQ(top_k(pool, x, 8, 3), (std::vector<int32_t>{7, 1, 3}));
  // All equal: the first k indices.
  EXPECT_EQ(top_k(pool, std::vector<float>(6, 0.5f), 6, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  // All NaN: by index too.
  EXPECT_EQ(top_k(pool, std::vector<float>(5, kNaN), 5, 2), (std::vector<int32_t>{0, 1}));
}

TEST(MoeTopK, ARowsExpertsDoNotDependOnTheBatchOrThreads) {
  const int64_t n_expert = 64, k = 8, rows = 37;
  std::vector<float> x = random_floats(static_cast<size_t>(n_expert * rows), 11, 3.0f);
  for (size_t i = 0; i < x.size(); i += 13) x[i] = x[i + 1];  // ties
  ThreadPool one(1), three(3);
  const std::vector<int32_t> all = top_k(three, x, n_expert, k);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row(x.begin() + r * n_expert, x.begin() + (r + 1) * n_expert);
    const std::vector<int32_t> alone = top_k(one, row, n_expert, k);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r * k)) << r;
  }
}

// The gating of one row as the header states it, written out for each mode.
std::vector<float> gate_loop(const std::vector<float>& x, const std::vector<int32_t>& id,
                             MoeGating gating, bool normalise, float scale) {
  const size_t k = id.size();
  std::vector<float> w(k);
  if (gating == MoeGating::kSoftmax) {
    float max = -kInf;
    for (float v : x) max = v > max ? v : max;
    float sum = 0.0f;
    for (float v : x) sum += std::exp(v - max);
    for (size_t s = 0; s < k; ++s) w[s] = std::exp(x[static_cast<size_t>(id[s])] - max) / sum;
  } else if (gating == MoeGating::kSigmoid) {
    for (size_t s = 0; s < k; ++s) w[s] = 1.0f / (1.0f + std::exp(-x[static_cast<size_t>(id[s])]));
  } else {
    float max = -kInf;
    for (int32_t i : id) max = x[static_cast<size_t>(i)] > max ? x[static_cast<size_t>(i)] : max;
    float sum = 0.0f;
    for (size_t s = 0; s < k; ++s) sum += std::exp(x[static_cast<size_t>(id[s])] - max);
    for (size_t s = 0; s < k; ++s) w[s] = std::exp(x[static_cast<size_t>(id[s])] - max) / sum;
  }
  if (normalise) {
    float sum = 0.0f;
    for (float v : w) sum += v;
    for (float& v : w) v /= sum;
  }
  for (float& v : w) v *= scale;
  return w;
}

TEST(MoeGate, EveryModeMatchesItsDefinition) {
  ThreadPool pool(2);
  const int64_t n_expert = 40, k = 6, rows = 9;
  const std::vector<float> x = random_floats(static_cast<size_t>(n_expert * rows), 3, 4.0f);
  std::vector<int32_t> ids = top_k(pool, x, n_expert, k);
  std::reverse(ids.begin(), ids.begin() + k);  // any slot order: sums run in slot order
  for (MoeGating g : {MoeGating::kSoftmax, MoeGating::kSigmoid, MoeGating::kSoftmaxSelected}) {
    for (bool normalise : {false, true}) {
      for (float scale : {1.0f, 2.5f}) {
        std::vector<float> w(static_cast<size_t>(k * rows));
        moe_gate(pool, x.data(), n_expert, n_expert, ids.data(), k, k, rows, g, normalise, scale,
                 w.data(), k);
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> row(x.begin() + r * n_expert, x.begin() + (r + 1) * n_expert);
          const std::vector<int32_t> id(ids.begin() + r * k, ids.begin() + (r + 1) * k);
          const std::vector<float> want = gate_loop(row, id, g, normalise, scale);
          const std::vector<float> got(w.begin() + r * k, w.begin() + (r + 1) * k);
          EXPECT_TRUE(bitwise_equal(got, want))
              << "gating " << static_cast<int>(g) << " normalise " << normalise << " row " << r;
          float sum = 0.0f;
          for (float v : got) {
            EXPECT_GT(v, 0.0f);
            sum += v;
          }
          // Normalised (or a softmax over the selected): the weights add up to the scale, to a
          // few roundings of k terms.
          if (normalise || g == MoeGating::kSoftmaxSelected) {
            EXPECT_NEAR(sum, scale, 8 * k * testing::kEps * scale);
          } else if (g == MoeGating::kSoftmax) {
            EXPECT_LT(sum, scale);  // the unselected experts hold the rest
          }
        }
      }
    }
  }
}

TEST(MoeGate, SoftmaxWeightsKeepTheSelectionOrder) {
  ThreadPool pool(1);
  const std::vector<float> x = {0.5f, 3.0f, -1.0f, 2.0f, 2.0f};
  const std::vector<int32_t> ids = top_k(pool, x, 5, 3);
  ASSERT_EQ(ids, (std::vector<int32_t>{1, 3, 4}));
  std::vector<float> w(3);
  moe_gate(pool, x.data(), 5, 5, ids.data(), 3, 3, 1, MoeGating::kSoftmax, false, 1.0f, w.data(),
           3);
  EXPECT_GT(w[0], w[1]);
  EXPECT_EQ(w[1], w[2]);  // tied logits, the same weight
  const float sum = std::exp(0.5f - 3) + std::exp(0.0f) + std::exp(-4.0f) + 2 * std::exp(-1.0f);
  EXPECT_NEAR(w[0], 1.0f / sum, 4 * testing::kEps);
}

std::vector<float> sum_loop(const std::vector<float>& y, const std::vector<float>& w, int64_t n,
                            int64_t n_used, int64_t rows) {
  std::vector<float> out(static_cast<size_t>(n * rows));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int64_t s = 0; s < n_used; ++s) {
        acc = std::fma(w[static_cast<size_t>(t * n_used + s)],
                       y[static_cast<size_t>((t * n_used + s) * n + i)], acc);
      }
      out[static_cast<size_t>(t * n + i)] = acc;
    }
  }
  return out;
}

// Each (token, slot) row gets the bias row of its expert, on strided rows, in place or not,
// whatever the thread count: one add per element, so exactly the loop's floats.
TEST(MoeAddId, AddsTheBiasOfEachSlotsExpert) {
  const int64_t n = 19, n_used = 3, rows = 7, n_expert = 5;
  const size_t slot = 23, tok = 3 * 23 + 4, b_stride = 21;
  const std::vector<float> x = random_floats(tok * rows, 11, 4.0f);
  const std::vector<float> b = random_floats(b_stride * n_expert, 12, 4.0f);
  std::vector<int32_t> ids(static_cast<size_t>(n_used * rows));
  Rng rng(13);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.next() % n_expert);
  std::vector<float> want = x;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t s = 0; s < n_used; ++s) {
      const size_t e = static_cast<size_t>(ids[static_cast<size_t>(t * n_used + s)]);
      for (int64_t i = 0; i < n; ++i) want[t * tok + s * slot + i] += b[e * b_stride + i];
    }
  }
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    std::vector<float> out = x;  // the gaps between rows must stay as they are
    moe_add_id(pool, x.data(), slot, tok, b.data(), b_stride, ids.data(), n_used, out.data(), slot,
               tok, n, n_used, rows);
    EXPECT_TRUE(bitwise_equal(out, want)) << "threads " << threads;
    std::vector<float> in_place = x;
    moe_add_id(pool, in_place.data(), slot, tok, b.data(), b_stride, ids.data(), n_used,
               in_place.data(), slot, tok, n, n_used, rows);
    EXPECT_TRUE(bitwise_equal(in_place, want)) << "in place, threads " << threads;
  }
}

TEST(MoeSum, EveryIsaMatchesTheFusedLoopBitwise) {
  for (int64_t n : {1, 7, 8, 20, 1024}) {
    for (int64_t n_used : {1, 2, 8}) {
      const int64_t rows = 5;
      const std::vector<float> y = random_floats(static_cast<size_t>(n * n_used * rows), 7, 10.0f);
      const std::vector<float> w = random_floats(static_cast<size_t>(n_used * rows), 8);
      const std::vector<float> want = sum_loop(y, w, n, n_used, rows);
      for (Isa isa : isas()) {
        IsaScope scope(isa);
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          std::vector<float> out(static_cast<size_t>(n * rows), kNaN);
          moe_sum(pool, y.data(), n, n * n_used, w.data(), n_used, out.data(), n, n, n_used, rows);
          EXPECT_TRUE(bitwise_equal(out, want))
              << isa_name(isa) << " n " << n << " n_used " << n_used << " threads " << threads;
        }
      }
    }
  }
}

// The steps are fused: a * b - round(a * b) is the rounding error of the product, which a product
// rounded before the sum would lose (0).
TEST(MoeSum, EachStepIsOneFusedMultiplyAdd) {
  const float a = 1.0f + 0x1p-12f;  // a * a = 1 + 2^-11 + 2^-24: not a float
  const float rounded = a * a;
  // 9 elements: eight in a SIMD step, one in the tail.
  std::vector<float> y(9, -rounded);
  y.resize(18, a);
  const std::vector<float> w = {1.0f, a};
  for (Isa isa : isas()) {
    IsaScope scope(isa);
    ThreadPool pool(1);
    std::vector<float> out(9, kNaN);
    moe_sum(pool, y.data(), 9, 18, w.data(), 2, out.data(), 9, 9, 2, 1);
    for (float v : out) {
      EXPECT_EQ(v, std::fma(a, a, -rounded)) << isa_name(isa);
      EXPECT_NE(v, 0.0f) << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace strata
