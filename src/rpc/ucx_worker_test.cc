// The round of progress that every wait of the ucx: transport is made of.
#include "rpc/ucx_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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

#if STRATA_HAVE_UCX

// Waits until pred() or 10 s: what it returns last.
template <typename Pred>
bool eventually(Pred pred) {
  const Clock::time_point end = Clock::now() + std::chrono::seconds(10);
  while (!pred() && Clock::now() < end) std::this_thread::yield();
  return pred();
}

// The socket lock (ucx_worker.h): established connections progress side by side under shared
// holds, so two threads are inside at once.
TEST(UcxSocketLock, SharedHoldsRunSideBySide) {
  std::atomic<int> inside{0};
  std::atomic<bool> both{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      UcxSocketShare share;
      inside.fetch_add(1);
      if (eventually([&] { return inside.load() == 2; })) both.store(true);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(both.load());
}

// An exclusive hold keeps shared ones out until it ends, and waits for those inside.
TEST(UcxSocketLock, ExclusiveExcludesShared) {
  std::atomic<bool> reader_inside{false}, release_reader{false}, writer_inside{false};
  std::thread reader([&] {
    UcxSocketShare share;
    reader_inside.store(true);
    eventually([&] { return release_reader.load(); });
  });
  ASSERT_TRUE(eventually([&] { return reader_inside.load(); }));
  std::thread writer([&] {
    UcxSocketHold hold;
    writer_inside.store(true);
  });
  // The writer waits for the reader inside.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(writer_inside.load());
  release_reader.store(true);
  reader.join();
  writer.join();
  EXPECT_TRUE(writer_inside.load());

  std::atomic<bool> late_reader_inside{false};
  std::thread late;
  {
    UcxSocketHold hold;
    late = std::thread([&] {
      UcxSocketShare share;
      late_reader_inside.store(true);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(late_reader_inside.load());
  }
  late.join();
  EXPECT_TRUE(late_reader_inside.load());
}

// Readers that take shared holds back to back, on two threads, do not keep a writer out.
TEST(UcxSocketLock, AStreamOfReadersDoesNotHoldOffAWriter) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      while (!stop.load()) UcxSocketShare share;
    });
  }
  std::atomic<bool> written{false};
  std::thread writer([&] {
    UcxSocketHold hold;
    written.store(true);
  });
  EXPECT_TRUE(eventually([&] { return written.load(); }));
  stop.store(true);
  writer.join();
  for (std::thread& t : readers) t.join();
}

// The exclusive hold is recursive and may take a shared one inside (a destructor that closes a
// listener and destroys its worker; a forced close and its progress).
TEST(UcxSocketLock, ExclusiveIsRecursiveAndTakesSharedInside) {
  std::atomic<bool> other_in{false};
  std::thread other;
  {
    UcxSocketHold outer;
    {
      UcxSocketHold inner;
      UcxSocketShare share;
    }
    other = std::thread([&] {
      UcxSocketShare share;
      other_in.store(true);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(other_in.load());  // the outer hold still keeps other threads out
  }
  other.join();
  EXPECT_TRUE(other_in.load());
}

#endif

}  // namespace
}  // namespace strata::rpc
