#include "core/rope_rates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/kernel_test_util.h"

namespace strata {
namespace {

using testing::random_floats;

// With rates base^(-2i/n_rot) * scale and mscale 1, the table rope is the plain rope up to the
// angle's rounding: the plain kernel multiplies the frequency up pair by pair, the table holds
// it rounded once, so angles differ by a few ulps of pos * rate.
TEST(RopeRates, MatchesPlainRopeForUnscaledRates) {
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int64_t n_rot : {64, 32}) {  // 32 of 64: partial rotary, the rest untouched
      const int64_t hd = 64, n_head = 3, T = 5;
      std::vector<float> a = random_floats(static_cast<size_t>(hd * n_head * T), 7);
      std::vector<float> b = a;
      const int32_t pos[T] = {0, 1, 17, 300, 2047};
      std::vector<float> rates(static_cast<size_t>(n_rot / 2));
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        rates[static_cast<size_t>(i)] = static_cast<float>(
            0.5 * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)));
      }
      ref::rope(a.data(), hd, n_head, T, static_cast<size_t>(hd * n_head), pos, n_rot, mode,
                10000.0f, 0.5f);
      ref::rope_rates(b.data(), hd, n_head, T, static_cast<size_t>(hd * n_head), pos, n_rot, mode,
                      rates.data(), 1.0f);
      for (size_t i = 0; i < a.size(); ++i) {
        const int64_t d = static_cast<int64_t>(i) % hd;
        if (d >= n_rot) {
          EXPECT_EQ(a[i], b[i]) << "dim " << d << " is past n_rot and must be untouched";
        } else {
          EXPECT_NEAR(a[i], b[i], 2e-3f) << "element " << i;
        }
      }
    }
  }
}

TEST(RopeRates, MscaleScalesTheRotatedDimsOnly) {
  const int64_t hd = 8, n_rot = 4;
  std::vector<float> a = random_floats(hd, 3), b = a;
  const int32_t pos[1] = {5};
  const float rates[2] = {1.0f, 0.1f};
  ref::rope_rates(a.data(), hd, 1, 1, hd, pos, n_rot, RopeMode::kNeox, rates, 1.0f);
  ref::rope_rates(b.data(), hd, 1, 1, hd, pos, n_rot, RopeMode::kNeox, rates, 1.5f);
  for (int64_t d = 0; d < hd; ++d) {
    EXPECT_FLOAT_EQ(b[d], d < n_rot ? 1.5f * a[d] : a[d]) << d;
  }
}

// Threads split tokens: the result is bitwise the same with 1 and 2 threads.
TEST(RopeRates, ThreadCountDoesNotChangeBits) {
  const int64_t hd = 128, n_head = 8, T = 33, n_rot = 96;
  std::vector<float> a = random_floats(static_cast<size_t>(hd * n_head * T), 11), b = a;
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(3 * t + 1);
  std::vector<float> rates = random_floats(n_rot / 2, 5);
  ThreadPool one(1), two(2);
  rope_rates(one, a.data(), hd, n_head, T, hd * n_head, pos.data(), n_rot, RopeMode::kNormal,
             rates.data(), 1.1f);
  rope_rates(two, b.data(), hd, n_head, T, hd * n_head, pos.data(), n_rot, RopeMode::kNormal,
             rates.data(), 1.1f);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace strata
