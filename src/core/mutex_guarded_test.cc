#include "core/mutex_guarded.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(MutexGuardedTest, ValueIsReachedThroughTheLock) {
  MutexGuarded<std::vector<int>> v(3, 7);
  EXPECT_EQ(v.lock()->size(), 3u);
  v.lock()->push_back(9);
  const auto& cv = v;
  auto locked = cv.lock();
  EXPECT_EQ((*locked)[3], 9);
}

TEST(MutexGuardedTest, IncrementsFromManyThreadsAreNotLost) {
  MutexGuarded<int64_t> n(0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) ++*n.lock();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*n.lock(), 80000);
}

TEST(MutexGuardedTest, WaitSleepsUntilTheStateHolds) {
  MutexGuarded<int> stage(0);
  std::thread producer([&] {
    for (int i = 1; i <= 3; ++i) {
      *stage.lock() = i;
      stage.notify_all();
    }
  });
  auto s = stage.lock();
  s.wait([](int v) { return v == 3; });
  EXPECT_EQ(*s, 3);
  producer.join();
}

TEST(MutexGuardedTest, WaitForGivesUpAtItsDeadline) {
  MutexGuarded<bool> flag(false);
  auto f = flag.lock();
  EXPECT_FALSE(f.wait_for(std::chrono::milliseconds(1), [](bool v) { return v; }));
  *f = true;
  EXPECT_TRUE(f.wait_for(std::chrono::milliseconds(1), [](bool v) { return v; }));
}

}  // namespace
}  // namespace strata
