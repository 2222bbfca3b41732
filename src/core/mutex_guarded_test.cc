#include "core/mutex_guarded.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
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

TEST(MutexGuardedTest, WaitUntilWithoutPredicateWakesOnNotify) {
  MutexGuarded<int> v(0);
  auto l = v.lock();
  std::thread t([&] {
    *v.lock() = 1;  // takes the lock: the waiter must have released it
    v.notify_all();
  });
  // The loop, not the wait, checks the value: a wake-up without notify only goes round again.
  while (*l != 1) l.wait_until(std::chrono::steady_clock::now() + std::chrono::hours(1));
  EXPECT_EQ(*l, 1);
  t.join();
}

TEST(MutexGuardedTest, UnlockedReleasesTheLockForItsCallOnly) {
  MutexGuarded<std::vector<int>> v;
  std::thread late;
  {
    auto l = v.lock();
    l->push_back(1);
    const size_t n = l.unlocked([&] {
      // Another thread takes the lock while the call runs (it would wait forever otherwise).
      std::thread t([&] { v.lock()->push_back(2); });
      t.join();
      return size_t{7};
    });
    EXPECT_EQ(n, 7u);
    EXPECT_EQ(*l, (std::vector<int>{1, 2})) << "the other thread's change is seen after the call";
    // Held again: a thread that wants the lock now comes after this section.
    late = std::thread([&] { v.lock()->push_back(4); });
    l->push_back(3);
  }
  late.join();
  EXPECT_EQ(*v.lock(), (std::vector<int>{1, 2, 3, 4}));
}

TEST(MutexGuardedTest, UnlockedTakesTheLockAgainWhenItsCallThrows) {
  MutexGuarded<std::vector<int>> v;
  std::thread late;
  {
    auto l = v.lock();
    EXPECT_THROW(l.unlocked([]() -> int { throw std::runtime_error("x"); }), std::runtime_error);
    late = std::thread([&] { v.lock()->push_back(2); });
    l->push_back(1);
  }
  late.join();
  EXPECT_EQ(*v.lock(), (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace strata
