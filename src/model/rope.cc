#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The pair index at which a frequency makes n_rotations full turns over n_ctx_orig positions
// (YaRN's "correction dimension").
double yarn_corr_dim(int64_t n_rot, int64_t n_ctx_orig, double n_rotations, double base) {
  return static_cast<double>(n_rot) *
         std::log(static_cast<double>(n_ctx_orig) / (n_rotations * 2 * kPi)) / (2 * std::log(base));
}

}  // namespace

RopeTable rope_table(int64_t n_rot, float freq_base, float freq_scale,
                     std::span<const float> freq_factors, const RopeScalingParams& s) {
  STRATA_CHECK(n_rot >= 2 && n_rot % 2 == 0, "rope_table: n_rot must be even and positive");
  STRATA_CHECK(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == n_rot / 2,
               "rope_table: one factor per pair");
  const int64_t half = n_rot / 2;
  RopeTable t;
  t.rate.resize(static_cast<size_t>(half));
  t.mscale = s.attn_factor;

  // YaRN: pairs below `low` rotate fast enough to keep their trained frequency (extrapolate),
  // pairs above `high` are interpolated by freq_scale, and a linear ramp mixes in between.
  const bool yarn = s.type == RopeScaling::kYarn && s.yarn_ext_factor != 0.0f;
  double low = 0, high = 0;
  if (yarn) {
    const int64_t n_ctx_orig = std::max<int64_t>(s.n_ctx_orig, 1);
    low = std::max(0.0, std::floor(yarn_corr_dim(n_rot, n_ctx_orig, s.yarn_beta_fast, freq_base)));
    high = std::min(static_cast<double>(n_rot - 1),
                    std::ceil(yarn_corr_dim(n_rot, n_ctx_orig, s.yarn_beta_slow, freq_base)));
    // The magnitude correction for interpolation, 1 + 0.1 ln(factor).
    t.mscale = static_cast<float>(s.attn_factor * (1.0 + 0.1 * std::log(1.0 / freq_scale)));
  }
  for (int64_t i = 0; i < half; ++i) {
    double rate = std::pow(static_cast<double>(freq_base),
                           -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    if (!freq_factors.empty()) rate /= static_cast<double>(freq_factors[static_cast<size_t>(i)]);
    double scale = freq_scale;
    if (yarn) {
      const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
      const double mix = (1.0 - std::clamp(y, 0.0, 1.0)) * s.yarn_ext_factor;
      scale = freq_scale * (1.0 - mix) + mix;
    }
    t.rate[static_cast<size_t>(i)] = static_cast<float>(rate * scale);
  }
  return t;
}

}  // namespace strata
