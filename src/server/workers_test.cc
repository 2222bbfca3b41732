#include "server/workers.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

TEST(ServerWorkers, RpcMetricsHaveOneFamilyHeaderAndLabelledSamples) {
  WorkerStats a{"127.0.0.1:5000", true, {}};
  a.stats.commands[static_cast<int>(rpc::Command::kGraphRecompute)] = {7, 700, 0};
  a.stats.round_trips = 3;
  WorkerStats b{"h\"x:1", false, {}};
  b.reconnect_attempts = 4;
  b.reconnects = 1;
  b.down_seconds = 2.5;
  std::string out;
  render_rpc_metrics(out, {a, b});
  EXPECT_NE(out.find("strata_rpc_messages_total{endpoint=\"127.0.0.1:5000\",command=\""
                     "GRAPH_RECOMPUTE\"} 7\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("strata_rpc_bytes_total{endpoint=\"127.0.0.1:5000\",command=\""
                     "GRAPH_RECOMPUTE\",direction=\"sent\"} 700\n"),
            std::string::npos);
  EXPECT_NE(out.find("strata_rpc_round_trips_total{endpoint=\"127.0.0.1:5000\"} 3\n"),
            std::string::npos);
  // A quote in a label value is escaped.
  EXPECT_NE(out.find("strata_rpc_worker_up{endpoint=\"h\\\"x:1\"} 0\n"), std::string::npos);
  // Reconnections: attempts, recoveries and the time down, per endpoint.
  EXPECT_NE(out.find("strata_rpc_reconnect_attempts_total{endpoint=\"h\\\"x:1\"} 4\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("strata_rpc_reconnects_total{endpoint=\"h\\\"x:1\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("strata_rpc_worker_down_seconds_total{endpoint=\"h\\\"x:1\"} 2.500\n"),
            std::string::npos);
  EXPECT_NE(out.find("strata_rpc_reconnects_total{endpoint=\"127.0.0.1:5000\"} 0\n"),
            std::string::npos);
  EXPECT_NE(out.find("# TYPE strata_rpc_worker_down_seconds_total counter\n"), std::string::npos);
  // Two endpoints, one # TYPE per family.
  size_t types = 0;
  for (size_t at = out.find("# TYPE strata_rpc_bytes_total"); at != std::string::npos;
       at = out.find("# TYPE strata_rpc_bytes_total", at + 1)) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
  std::string none;
  render_rpc_metrics(none, {});
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace strata::server
