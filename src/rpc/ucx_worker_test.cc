// The round of progress that every wait of the ucx: transport is made of.
#include "rpc/ucx_worker.h"

#include <gtest/gtest.h>

#include <chrono>

namespace strata::rpc {
namespace {

using Clock = std::chrono::steady_clock;

// UCX may report work forever (a peer that never stops sending): the round still ends, at its
// end, so that the waiting thread looks at its deadline again.
TEST(UcxProgressRound, EndsWhenProgressNeverRunsOutOfWork) {
  long calls = 0;
  const bool moved = ucx_progress_round(
      [&] {
        ++calls;
        return 1u;
      },
      Clock::now() + std::chrono::milliseconds(20));
  EXPECT_TRUE(moved);
  EXPECT_GE(calls, 1);
}

// Otherwise it runs until UCX has nothing more to do, and says whether anything moved.
TEST(UcxProgressRound, RunsUntilIdleAndSaysWhetherAnythingMoved) {
  int left = 5;
  int calls = 0;
  EXPECT_TRUE(ucx_progress_round(
      [&] {
        ++calls;
        return left > 0 ? static_cast<unsigned>(left--) : 0u;
      },
      Clock::time_point::max()));
  EXPECT_EQ(calls, 6);
  calls = 0;
  EXPECT_FALSE(ucx_progress_round(
      [&] {
        ++calls;
        return 0u;
      },
      Clock::time_point::max()));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace strata::rpc
