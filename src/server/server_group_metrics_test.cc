// The per-group series of /metrics, through a running `strata serve` with two pipeline groups:
// decode steps, busy slots per decode and queue depth per group, consistent with the totals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

TEST(GroupMetrics, RenderHasOneLabelledSamplePerGroup) {
  std::string out;
  render_group_metrics(out, {{0, 10, 15, 2, 1, 2}, {1, 0, 0, 0, 0, 2}});
  EXPECT_NE(out.find("# TYPE strata_group_decode_steps_total counter\n"), std::string::npos);
  EXPECT_NE(out.find("strata_group_decode_steps_total{group=\"0\"} 10\n"), std::string::npos);
  EXPECT_NE(out.find("strata_group_busy_slots_per_decode{group=\"0\"} 1.5\n"), std::string::npos);
  EXPECT_NE(out.find("strata_group_busy_slots_per_decode{group=\"1\"} 0\n"), std::string::npos)
      << "no steps yet: 0, not a division by zero";
  EXPECT_NE(out.find("strata_group_requests_queued{group=\"0\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("strata_group_slots_busy{group=\"0\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("strata_group_slots{group=\"1\"} 2\n"), std::string::npos);
}

TEST(GroupMetrics, TwoGroupsThroughARunningServer) {
  const fs::path dir =
      fs::temp_directory_path() / ("strata_group_metrics_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string model = (dir / "synth.gguf").string();
  ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model}), 0);
  {
    ServerProcess s({"-m", model, "-t", "1", "-c", "2048", "-np", "4", "--pipeline-groups", "2"});
    // Eight requests at once on four slots: both groups decode, some wait in a queue.
    std::vector<std::string> prompts;
    for (int i = 0; i < 8; ++i) prompts.push_back("request " + std::to_string(i));
    for (const std::string& t : concurrent_texts(s, prompts, 12)) EXPECT_FALSE(t.empty());
    ASSERT_TRUE(wait_all_idle(s));
    std::string error;
    auto m = parse_prometheus(get(s, "/metrics").raw, &error);
    ASSERT_TRUE(error.empty()) << error;
    double steps = 0;
    for (const char* g : {"0", "1"}) {
      const std::string label = std::string("{group=\"") + g + "\"}";
      ASSERT_EQ(m.count("strata_group_decode_steps_total" + label), 1u) << g;
      const double group_steps = m["strata_group_decode_steps_total" + label];
      const double per_decode = m["strata_group_busy_slots_per_decode" + label];
      steps += group_steps;
      if (group_steps > 0) {
        EXPECT_GE(per_decode, 1.0) << "a step carries at least one busy slot";
      }
      EXPECT_LE(per_decode, 2.0) << "a group of 2 slots carries at most 2";
      EXPECT_EQ(m["strata_group_requests_queued" + label], 0) << "all done";
      EXPECT_EQ(m["strata_group_slots_busy" + label], 0);
      EXPECT_EQ(m["strata_group_slots" + label], 2);
    }
    EXPECT_GT(steps, 0);
    EXPECT_EQ(steps, m["strata_decode_steps_total"]) << "the groups' steps add up to the total";
    EXPECT_GE(m["llamacpp:n_busy_slots_per_decode"], 1.0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::server::itest
