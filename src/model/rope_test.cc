#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace strata {
namespace {

// The angle of pair i at position pos as llama.cpp's CPU rope computes it, in float: the
// frequency by repeated multiplication, divided by the factor, then YaRN's mix of the
// interpolated and extrapolated angles. Written from the published algorithm, independently of
// rope.cc's table.
struct Angle {
  float theta;
  float mscale;
};
Angle ggml_style_angle(int32_t pos, int64_t i, int64_t n_rot, float base, float freq_scale,
                       const std::vector<float>& ff, const RopeScalingParams& s) {
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
  float theta_base = static_cast<float>(pos);
  for (int64_t j = 0; j < i; ++j) theta_base *= theta_scale;
  const float extrap = theta_base / (ff.empty() ? 1.0f : ff[static_cast<size_t>(i)]);
  const float interp = freq_scale * extrap;
  float mscale = s.attn_factor;
  if (s.type != RopeScaling::kYarn || s.yarn_ext_factor == 0.0f) return {interp, mscale};
  auto corr = [&](float rot) {
    return n_rot * std::log(s.n_ctx_orig / (rot * 2 * 3.14159265f)) / (2 * std::log(base));
  };
  const float low = std::max(0.0f, std::floor(corr(s.yarn_beta_fast)));
  const float high = std::min(static_cast<float>(n_rot - 1), std::ceil(corr(s.yarn_beta_slow)));
  const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
  const float mix = (1 - std::min(1.0f, std::max(0.0f, y))) * s.yarn_ext_factor;
  mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  return {interp * (1 - mix) + extrap * mix, mscale};
}

void expect_table_matches(int64_t n_rot, float base, float freq_scale, const std::vector<float>& ff,
                          const RopeScalingParams& s) {
  const RopeTable t = rope_table(n_rot, base, freq_scale, ff, s);
  ASSERT_EQ(t.rate.size(), static_cast<size_t>(n_rot / 2));
  for (int32_t pos : {0, 1, 7, 100, 1000, 4095}) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const Angle want = ggml_style_angle(pos, i, n_rot, base, freq_scale, ff, s);
      const float got = static_cast<float>(pos) * t.rate[static_cast<size_t>(i)];
      // Both are float computations of the same angle; ggml's repeated multiplication drifts
      // by about i ulps, so compare with a relative bound and an absolute floor.
      EXPECT_NEAR(got, want.theta, 2e-5f * std::fabs(want.theta) + 1e-6f)
          << "pos " << pos << " pair " << i;
    }
    EXPECT_FLOAT_EQ(t.mscale, ggml_style_angle(pos, 0, n_rot, base, freq_scale, ff, s).mscale);
  }
}

TEST(RopeTable, PlainAndLinear) {
  RopeScalingParams s;
  expect_table_matches(64, 10000.0f, 1.0f, {}, s);
  s.type = RopeScaling::kLinear;
  expect_table_matches(128, 500000.0f, 0.25f, {}, s);
}

TEST(RopeTable, Llama31FrequencyDivisors) {
  // Llama 3.1's factors: 1 for high frequencies, 8 for low ones, a smooth blend between.
  std::vector<float> ff(32);
  for (size_t i = 0; i < ff.size(); ++i)
    ff[i] = i < 12 ? 1.0f : i > 20 ? 8.0f : 1.0f + 0.8f * (i - 11);
  RopeScalingParams s;
  expect_table_matches(64, 500000.0f, 1.0f, ff, s);
}

TEST(RopeTable, YarnRampsBetweenExtrapolationAndInterpolation) {
  RopeScalingParams s;
  s.type = RopeScaling::kYarn;
  s.n_ctx_orig = 32768;
  expect_table_matches(128, 1000000.0f, 0.25f, {}, s);
  const RopeTable t = rope_table(128, 1000000.0f, 0.25f, {}, s);
  const RopeTable plain = rope_table(128, 1000000.0f, 1.0f, {}, RopeScalingParams{});
  // The fastest pairs keep their frequency; the slowest are scaled by freq_scale.
  EXPECT_FLOAT_EQ(t.rate.front(), plain.rate.front());
  EXPECT_NEAR(t.rate.back(), 0.25f * plain.rate.back(), 1e-6f * plain.rate.back());
  EXPECT_NEAR(t.mscale, 1.0f + 0.1f * std::log(4.0f), 1e-6f);
  s.yarn_ext_factor = 0.0f;  // no extrapolation: plain linear interpolation
  expect_table_matches(128, 1000000.0f, 0.25f, {}, s);
}

TEST(RopeTable, LongRopeFactorsAndAttentionFactor) {
  std::vector<float> ff(48);
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.05f * static_cast<float>(i);
  RopeScalingParams s;
  s.type = RopeScaling::kLongrope;
  s.attn_factor = 1.19f;
  expect_table_matches(96, 10000.0f, 1.0f, ff, s);
}

}  // namespace
}  // namespace strata
