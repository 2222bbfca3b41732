#include "core/membw.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata {
namespace {

// No timing assertion: only that the probe runs, checks its own sums and reports a sane value.
TEST(MemBwTest, SmallBufferGivesFinitePositiveRate) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const double rate = measure_read_bandwidth(pool, size_t{1} << 20, 2);
    EXPECT_TRUE(std::isfinite(rate)) << threads << " threads";
    EXPECT_GT(rate, 0.0) << threads << " threads";
  }
}

TEST(MemBwTest, OddAndTinySizesAreRounded) {
  ThreadPool pool(2);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{12345}}) {
    const double rate = measure_read_bandwidth(pool, bytes, 1);
    EXPECT_TRUE(std::isfinite(rate)) << bytes;
    EXPECT_GT(rate, 0.0) << bytes;
  }
}

}  // namespace
}  // namespace strata
