#include "core/ops_act.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernel_test_util.h"

namespace strata {
namespace {

using testing::random_floats;

// Each op against its definition in double, on strided rows. Float evaluation of tanh and a
// few products stays within a few ulps (1e-6 relative), except that GELU's 1 + tanh cancels for
// negative gates: there the error is absolute, about |g| * |up| * 2^-24 (1e-6 covers |g| <= 6).
TEST(OpsAct, MatchDefinitions) {
  const int64_t n = 37, rows = 5, stride = 41;
  const std::vector<float> x = random_floats(stride * rows, 1, 6.0f);
  const std::vector<float> u = random_floats(stride * rows, 2, 2.0f);
  std::vector<float> y(stride * rows, 0.0f);
  ThreadPool pool(2);
  auto check = [&](const char* what, auto def) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(r * stride + i);
        const double want = def(x[k], u[k]);
        EXPECT_NEAR(y[k], want, 1e-6 * std::fabs(want) + 1e-6) << what << " " << r << "," << i;
      }
    }
  };
  scale(pool, x.data(), stride, -2.5f, y.data(), stride, n, rows);
  check("scale", [](double a, double) { return a * -2.5; });
  softcap(pool, x.data(), stride, 3.0f, y.data(), stride, n, rows);
  check("softcap", [](double a, double) { return 3.0 * std::tanh(a / 3.0); });
  geglu(pool, x.data(), stride, u.data(), stride, y.data(), stride, n, rows);
  check("geglu", [](double g, double up) {
    const double c = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * g * (1 + std::tanh(c * (g + 0.044715 * g * g * g))) * up;
  });
}

// gpt-oss's clamped SwiGLU with its constants, on gates and ups past the limit on both sides:
// the definition in double, within the few ulps of one exp and three products. NaN stays NaN.
TEST(OpsAct, SwigluOaiMatchesItsDefinitionAndClamps) {
  const int64_t n = 37, rows = 5, stride = 41;
  const std::vector<float> g = random_floats(stride * rows, 5, 12.0f);
  const std::vector<float> u = random_floats(stride * rows, 6, 12.0f);
  std::vector<float> y(stride * rows, 0.0f);
  ThreadPool pool(2);
  const float alpha = 1.702f, limit = 7.0f;
  swiglu_oai(pool, g.data(), stride, u.data(), stride, alpha, limit, y.data(), stride, n, rows);
  int clamped_gate = 0, clamped_up = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(r * stride + i);
      const double x = std::min<double>(g[k], limit);
      const double up = std::clamp<double>(u[k], -limit, limit);
      clamped_gate += g[k] > limit;
      clamped_up += std::fabs(u[k]) > limit;
      const double want = x / (1 + std::exp(-double(alpha) * x)) * (up + 1);
      EXPECT_NEAR(y[k], want, 1e-6 * std::fabs(want) + 1e-6) << r << "," << i;
    }
  }
  EXPECT_GT(clamped_gate, 0) << "the test needs gates past the limit";
  EXPECT_GT(clamped_up, 0) << "the test needs ups past the limit";
  const float nan = std::nanf("");
  float out = 0;
  swiglu_oai(pool, &nan, 1, &g[0], 1, alpha, limit, &out, 1, 1, 1);
  EXPECT_TRUE(std::isnan(out));
}

// Threads split rows: 1 and 3 threads give the same bits, in place too.
TEST(OpsAct, ThreadCountAndAliasingDoNotChangeBits) {
  const int64_t n = 300, rows = 70;
  const std::vector<float> x = random_floats(n * rows, 3, 10.0f);
  const std::vector<float> u = random_floats(n * rows, 4, 1.0f);
  ThreadPool one(1), three(3);
  std::vector<float> a(n * rows), b = x;
  geglu(one, x.data(), n, u.data(), n, a.data(), n, n, rows);
  geglu(three, b.data(), n, u.data(), n, b.data(), n, n, rows);
  EXPECT_EQ(a, b);
  softcap(one, x.data(), n, 30.0f, a.data(), n, n, rows);
  b = x;
  softcap(three, b.data(), n, 30.0f, b.data(), n, n, rows);
  EXPECT_EQ(a, b);
  swiglu_oai(one, x.data(), n, u.data(), n, 1.702f, 7.0f, a.data(), n, n, rows);
  b = x;
  swiglu_oai(three, b.data(), n, u.data(), n, 1.702f, 7.0f, b.data(), n, n, rows);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace strata
