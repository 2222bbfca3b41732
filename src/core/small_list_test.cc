#include "core/small_list.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "core/alloc_count_testing.h"

namespace strata {
namespace {

// Items keep their values and order across the move from the place to the heap.
TEST(SmallList, PushPastThePlaceKeepsEveryItem) {
  SmallList<int64_t, 4> list;
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 11; ++i) {
    list.push_back(i * i - 3);
    want.push_back(i * i - 3);
    ASSERT_EQ(list.size(), want.size());
    const std::span<const int64_t> got = list;
    EXPECT_EQ(std::vector<int64_t>(got.begin(), got.end()), want) << "after " << i + 1;
  }
  list.clear();
  EXPECT_TRUE(list.empty());
  list.push_back(7);
  EXPECT_EQ(list[0], 7);
}

TEST(SmallList, ResizeFillsInPlaceOrOnTheHeap) {
  for (size_t n : {0u, 3u, 8u, 9u, 40u}) {
    SmallList<int32_t, 8> list(n, -5);
    ASSERT_EQ(list.size(), n);
    EXPECT_EQ(std::accumulate(list.begin(), list.end(), int64_t{0}), -5 * int64_t(n)) << n;
    if (n > 0) {
      list[n - 1] = 2;
      EXPECT_EQ(list.data()[n - 1], 2);
    }
  }
}

// What it is for: up to N items, no allocation.
TEST(SmallList, UpToItsPlaceItAllocatesNothing) {
  if (!testing::heap_allocations_counted()) GTEST_SKIP() << "a sanitizer build counts none";
  const uint64_t before = testing::heap_allocations();
  SmallList<double, 16> list(10, 1.5);
  for (int i = 0; i < 6; ++i) list.push_back(i);
  EXPECT_EQ(testing::heap_allocations() - before, 0u);
  list.push_back(6);
  EXPECT_GT(testing::heap_allocations() - before, 0u) << "the 17th item is on the heap";
  EXPECT_EQ(list.size(), 17u);
  EXPECT_EQ(list[16], 6.0);
  EXPECT_EQ(list[9], 1.5);
}

}  // namespace
}  // namespace strata
