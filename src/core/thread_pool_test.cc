#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, grain, [&](int, int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << i;
      }
    }
  }
}

TEST(ThreadPool, ManyRoundsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 20000; ++round) {
    pool.parallel_for(4, 1, [&](int, int64_t b, int64_t e) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), 80000);
}

TEST(ThreadPool, CountsCallsAndTheBarriersAmongThem) {
  ThreadPool pool(2);
  const auto noop = [](int, int64_t, int64_t) {};
  pool.parallel_for(8, 1, noop);  // both threads: a barrier
  pool.parallel_for(8, 8, noop);  // n <= grain: the caller alone
  pool.parallel_for(9, 8, noop);  // a barrier
  pool.parallel_for(0, 1, noop);  // nothing to run: not a call
  ThreadPool::Counts c = pool.counts();
  EXPECT_EQ(c.calls, 3u);
  EXPECT_EQ(c.barriers, 2u);

  ThreadPool one(1);
  one.parallel_for(100, 1, noop);
  c = one.counts();
  EXPECT_EQ(c.calls, 1u);
  EXPECT_EQ(c.barriers, 0u) << "a pool of one thread never waits for another";
}

// What the kernel says of a thread of this process: its allowed CPUs and its nice value.
std::string cpus_allowed(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      const size_t v = line.find_first_not_of(" \t", 18);
      return v == std::string::npos ? "" : line.substr(v);
    }
  }
  return "?";
}

int nice_of(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3, nice field 19.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 19 && rest >> field; ++i) {
  }
  return std::stoi(field);
}

std::string thread_name(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ThreadPoolOptions, StrictPlacementPinsEachThreadToTheNextCpu) {
  if (cpu_count() < 2) GTEST_SKIP() << "needs 2 CPUs";
  ThreadPoolOptions o;
  o.n_threads = 3;
  o.cpus = {0, 1};
  o.strict = true;
  o.name = "tpt";
  auto pool = ThreadPool::create(o);
  ASSERT_TRUE(pool.is_ok()) << pool.status().message();
  const std::vector<int> tids = (*pool)->thread_ids();
  ASSERT_EQ(tids.size(), 2u);
  EXPECT_EQ(cpus_allowed(tids[0]), "1") << "thread 1 on the mask's second CPU";
  EXPECT_EQ(cpus_allowed(tids[1]), "0") << "thread 2 wraps to the first";
  EXPECT_EQ(thread_name(tids[0]), "tpt.1");
  // The caller is thread 0: its first parallel_for puts it on the mask's first CPU. (A thread
  // of the test's own, so that the test's thread keeps its CPUs.)
  std::string caller_cpus;
  std::thread caller([&] {
    (*pool)->parallel_for(64, 1, [](int, int64_t, int64_t) {});
    caller_cpus = cpus_allowed(static_cast<int>(::syscall(SYS_gettid)));
  });
  caller.join();
  EXPECT_EQ(caller_cpus, "0");
}

TEST(ThreadPoolOptions, MaskWithoutStrictAllowsEveryCpuOfIt) {
  ThreadPoolOptions o;
  o.n_threads = 3;
  o.cpus = {cpu_count() - 1};
  auto pool = ThreadPool::create(o);
  ASSERT_TRUE(pool.is_ok()) << pool.status().message();
  for (int tid : (*pool)->thread_ids()) {
    EXPECT_EQ(cpus_allowed(tid), std::to_string(cpu_count() - 1));
  }
}

TEST(ThreadPoolOptions, LowPriorityIsNiceFiveAndHigherOnesFailSoft) {
  ThreadPoolOptions low;
  low.n_threads = 2;
  low.priority = -1;
  auto pool = ThreadPool::create(low);
  ASSERT_TRUE(pool.is_ok()) << pool.status().message();
  ASSERT_EQ((*pool)->thread_ids().size(), 1u);
  EXPECT_EQ(nice_of((*pool)->thread_ids()[0]), 5);
  EXPECT_EQ((*pool)->setup_note(), "");

  // High: SCHED_FIFO where the system permits it; else the pool still runs, and says why.
  ThreadPoolOptions high;
  high.n_threads = 2;
  high.priority = 2;
  high.poll = 0;  // a real-time thread must not spin on a shared machine
  auto hp = ThreadPool::create(high);
  ASSERT_TRUE(hp.is_ok()) << hp.status().message();
  const int policy = sched_getscheduler((*hp)->thread_ids()[0]);
  if (policy == SCHED_FIFO) {
    sched_param param{};
    ASSERT_EQ(sched_getparam((*hp)->thread_ids()[0], &param), 0);
    EXPECT_EQ(param.sched_priority, 80);
  } else {
    EXPECT_NE((*hp)->setup_note().find("SCHED_FIFO 80 refused"), std::string::npos)
        << (*hp)->setup_note();
  }
  std::atomic<int64_t> sum{0};
  (*hp)->parallel_for(100, 1, [&](int, int64_t b, int64_t e) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 100);
}

TEST(ThreadPoolOptions, RefusesCpusThatDoNotExistAndBadLevels) {
  ThreadPoolOptions o;
  o.n_threads = 2;
  o.cpus = {0, cpu_count()};
  auto pool = ThreadPool::create(o);
  ASSERT_FALSE(pool.is_ok());
  EXPECT_NE(pool.status().message().find("CPU " + std::to_string(cpu_count()) + " does not exist"),
            std::string::npos)
      << pool.status().message();
  o.cpus = {};
  o.priority = 4;
  EXPECT_FALSE(ThreadPool::create(o).is_ok());
  o.priority = 0;
  o.poll = 101;
  EXPECT_FALSE(ThreadPool::create(o).is_ok());
}

TEST(ThreadPoolOptions, MasksAndRanges) {
  EXPECT_EQ(*cpu_list_from_mask("0x5"), (std::vector<int>{0, 2}));
  EXPECT_EQ(*cpu_list_from_mask("f0"), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(*cpu_list_from_mask("100"), (std::vector<int>{8}));
  EXPECT_FALSE(cpu_list_from_mask("0xg").is_ok());
  EXPECT_FALSE(cpu_list_from_mask("").is_ok());
  EXPECT_EQ(*cpu_list_from_range("0-3,6"), (std::vector<int>{0, 1, 2, 3, 6}));
  EXPECT_EQ(*cpu_list_from_range("1"), (std::vector<int>{1}));
  EXPECT_FALSE(cpu_list_from_range("3-1").is_ok());
  EXPECT_FALSE(cpu_list_from_range("a-b").is_ok());
  EXPECT_FALSE(cpu_list_from_range("1,").is_ok());
}

// A pool of 3 threads polling at `poll`, called `rounds` times; each call must cover every index
// once. `pause_us` (if given) sets a pause after each call.
void cover_every_index(int poll, int rounds, const std::function<int()>& pause_us = nullptr) {
  ThreadPoolOptions o;
  o.n_threads = 3;
  o.poll = poll;
  auto pool = ThreadPool::create(o);
  ASSERT_TRUE(pool.is_ok());
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::atomic<int>> hits(37);
    (*pool)->parallel_for(37, 2, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
    if (pause_us) std::this_thread::sleep_for(std::chrono::microseconds(pause_us()));
  }
}

TEST(ThreadPoolOptions, NoPollingStillCoversEveryIndex) { cover_every_index(0, 200); }

// A call must reach workers in every state: polling, past polling on their way to sleep, and
// asleep. A short poll and pauses of varying length between calls put them in each; a lost
// wake-up hangs the test.
TEST(ThreadPoolOptions, CallsReachWorkersPollingSleepingOrBetween) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pause_us(0, 400);
  cover_every_index(1, 2000, [&] { return pause_us(rng); });
}

TEST(ThreadPool, EachThreadHasItsOwnAlignedScratch) {
  ThreadPool pool(3);
  std::vector<uint8_t*> seen(3, nullptr);
  pool.parallel_for(3, 1, [&](int thread, int64_t, int64_t) {
    uint8_t* s = pool.scratch(thread, 1000);
    for (int i = 0; i < 1000; ++i) s[i] = static_cast<uint8_t>(thread);
    seen[static_cast<size_t>(thread)] = s;
  });
  std::set<uint8_t*> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), 3u);
  for (int t = 0; t < 3; ++t) {
    ASSERT_NE(seen[t], nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(seen[t]) % 64, 0u);
    EXPECT_EQ(seen[t][999], t) << "no other thread wrote into thread " << t << "'s scratch";
  }
  // The same thread gets its memory back; more when it asks for more.
  EXPECT_EQ(pool.scratch(1, 1000), seen[1]);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.scratch(1, 1 << 20)) % 64, 0u);
}

}  // namespace
}  // namespace strata
