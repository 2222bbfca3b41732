#include "server/metrics.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

TEST(ServerMetrics, HistogramBucketsAreCumulative) {
  Histogram h({1, 10});
  h.observe(0.5);
  h.observe(1);  // on the bound: belongs to le="1"
  h.observe(5);
  h.observe(100);
  std::string out;
  h.render(out, "x", "help");
  EXPECT_NE(out.find("x_bucket{le=\"1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{le=\"10\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum 106.5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("# TYPE x histogram\n"), std::string::npos) << out;
}

TEST(ServerMetrics, RenderHasCountersGaugesAndHooks) {
  Metrics m;
  m.prompt_tokens += 7;
  m.add_hook([](std::string& out) { out += "extra_metric 3\n"; });
  Gauges g;
  g.kv_used = 5;
  g.kv_total = 10;
  const std::string out = m.render(g);
  EXPECT_NE(out.find("strata_prompt_tokens_total 7\n"), std::string::npos);
  EXPECT_NE(out.find("strata_kv_cache_usage_ratio 0.5\n"), std::string::npos);
  EXPECT_NE(out.find("extra_metric 3\n"), std::string::npos);
}

}  // namespace
}  // namespace strata::server
