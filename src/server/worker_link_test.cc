// The reconnection state machine of one worker, driven by a fake clock: the backoff between
// attempts, the states and the counters that /health and /metrics report.
#include "server/worker_link.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

using std::chrono::milliseconds;
using Clock = WorkerLink::Clock;

TEST(ReconnectPolicy, WaitsDoubleUpToTheBound) {
  ReconnectPolicy p;
  p.first = milliseconds(250);
  p.max = milliseconds(3000);
  EXPECT_EQ(p.delay(0), milliseconds(250));
  EXPECT_EQ(p.delay(1), milliseconds(500));
  EXPECT_EQ(p.delay(2), milliseconds(1000));
  EXPECT_EQ(p.delay(3), milliseconds(2000));
  EXPECT_EQ(p.delay(4), milliseconds(3000));
  EXPECT_EQ(p.delay(5), milliseconds(3000));
  EXPECT_EQ(p.delay(4000000000u), milliseconds(3000)) << "no overflow after many failures";
}

TEST(ReconnectPolicy, ReadsTheBoundFromItsVariable) {
  auto d = ReconnectPolicy::from_text(nullptr);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->enabled());
  EXPECT_EQ(d->max, milliseconds(8000));
  auto off = ReconnectPolicy::from_text("0");
  ASSERT_TRUE(off.is_ok());
  EXPECT_FALSE(off->enabled());
  auto small = ReconnectPolicy::from_text("100");
  ASSERT_TRUE(small.is_ok());
  EXPECT_EQ(small->max, milliseconds(100));
  EXPECT_EQ(small->delay(0), milliseconds(100)) << "the first wait is within the bound too";
  for (const char* bad : {"-1", "soon", "3600001", "12ms"}) {
    auto r = ReconnectPolicy::from_text(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("STRATA_RPC_RECONNECT_MS"), std::string::npos);
    EXPECT_NE(r.status().message().find(bad), std::string::npos);
  }
}

TEST(WorkerLink, BacksOffUntilAnAttemptConnectsThenRestores) {
  ReconnectPolicy p;
  p.first = milliseconds(100);
  p.max = milliseconds(1000);
  WorkerLink link(p);
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(link.state(), LinkState::kUp);
  EXPECT_FALSE(link.due(t0));
  EXPECT_EQ(link.down_for(t0), Clock::duration{0});

  link.lost(t0, "connection closed");
  EXPECT_EQ(link.state(), LinkState::kDown);
  EXPECT_EQ(link.reason(), "connection closed");
  EXPECT_FALSE(link.due(t0 + milliseconds(99)));
  EXPECT_TRUE(link.due(t0 + milliseconds(100)));

  // Attempts fail: each waits twice as long as the one before, up to the bound.
  Clock::time_point t = t0 + milliseconds(100);
  for (int64_t want : {200, 400, 800, 1000, 1000}) {
    ASSERT_TRUE(link.due(t));
    link.failed(t, "connection refused");
    EXPECT_EQ(link.next_attempt() - t, milliseconds(want));
    EXPECT_FALSE(link.due(t + milliseconds(want) - milliseconds(1)));
    t += milliseconds(want);
  }
  EXPECT_EQ(link.failures(), 5u);
  EXPECT_EQ(link.attempts(), 5u);
  EXPECT_EQ(link.last_error(), "connection refused");

  // One connects, but placing the weights fails: down again, the wait keeps growing.
  link.connected();
  EXPECT_EQ(link.state(), LinkState::kRestoring);
  EXPECT_FALSE(link.due(t + milliseconds(5000))) << "no attempt while restoring";
  link.failed(t, "out of memory");
  EXPECT_EQ(link.state(), LinkState::kDown);
  EXPECT_EQ(link.attempts(), 6u) << "the restore belonged to the attempt that connected";
  EXPECT_EQ(link.next_attempt() - t, milliseconds(1000));
  t += milliseconds(1000);
  link.connected();
  EXPECT_EQ(link.reconnects(), 0u);
  link.restored(t + milliseconds(50));
  EXPECT_EQ(link.state(), LinkState::kUp);
  EXPECT_EQ(link.attempts(), 7u);
  EXPECT_EQ(link.reconnects(), 1u);
  EXPECT_TRUE(link.reason().empty());
  EXPECT_EQ(link.failures(), 0u);
  const Clock::duration first_outage = t + milliseconds(50) - t0;
  EXPECT_EQ(link.down_total(t + std::chrono::hours(1)), first_outage) << "up time is not down";

  // A second outage starts from the first wait again, and its time adds up.
  const Clock::time_point t1 = t + std::chrono::hours(2);
  link.lost(t1, "stalled");
  EXPECT_EQ(link.next_attempt() - t1, milliseconds(100));
  EXPECT_EQ(link.down_for(t1 + milliseconds(300)), milliseconds(300));
  EXPECT_EQ(link.down_total(t1 + milliseconds(300)), first_outage + milliseconds(300));
  link.connected();
  link.restored(t1 + milliseconds(400));
  EXPECT_EQ(link.reconnects(), 2u);
  EXPECT_EQ(link.attempts(), 8u);
  EXPECT_EQ(link.down_total(t1 + std::chrono::hours(5)), first_outage + milliseconds(400));
}

TEST(WorkerLink, NamesItsStates) {
  EXPECT_STREQ(link_state_name(LinkState::kUp), "up");
  EXPECT_STREQ(link_state_name(LinkState::kDown), "down");
  EXPECT_STREQ(link_state_name(LinkState::kRestoring), "restoring");
}

}  // namespace
}  // namespace strata::server
