// A persistent pool of threads for kernels. The calling thread takes part as worker 0.
//
// Kernels split their *outputs* over the pool, never a reduction, so that every output element
// is computed by the same sequence of operations whatever the thread count.
//
// Each pool owns its threads and their scratch memory: two pools (two pipeline groups) never
// share a thread, and a kernel's scratch belongs to the pool's thread that runs it, not to
// whatever thread happens to call (no thread_local state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/function_ref.h"
#include "core/status.h"

namespace strata {

// How a pool's threads run; llama.cpp's --cpu-mask/--cpu-range, --cpu-strict, --prio, --poll.
struct ThreadPoolOptions {
  int n_threads = 1;  // counting the caller
  // The CPUs the threads may run on (ids below the machine's CPU count); empty: wherever the
  // process may.
  std::vector<int> cpus;
  // Thread i runs on cpus[i % cpus.size()] alone (the caller is thread 0); false: every thread
  // may run on all of `cpus`.
  bool strict = false;
  // llama.cpp's levels: -1 low, 0 normal (inherited), 1 medium, 2 high, 3 realtime.
  int priority = 0;
  // 0..100: how long a waiting thread polls for work before it sleeps, in proportion (50, the
  // default, polls about 20000 rounds; 0 sleeps at once).
  int poll = 50;
  // Threads are named NAME.i (at most 15 characters, as Linux keeps), for ps and /proc; empty:
  // unnamed.
  std::string name;
};

// "0-3,6" -> {0,1,2,3,6} (llama's --cpu-range takes "lo-hi"); an error names a bad part.
Result<std::vector<int>> cpu_list_from_range(const std::string& text);
// A hex mask, least significant bit CPU 0, optional 0x ("f0" -> {4,5,6,7}).
Result<std::vector<int>> cpu_list_from_mask(const std::string& text);
// CPUs this machine has (configured, online or not): ids at or past it do not exist.
int cpu_count();

// What parallel_for calls, fn(thread, begin, end): a reference to the caller's callable, valid
// while the call runs (no copy, no allocation per pass; core/function_ref.h).
using PoolTask = FunctionRef<void(int thread, int64_t begin, int64_t end)>;

class ThreadPool {
 public:
  // n_threads >= 1 counts the caller; n_threads - 1 threads are started and live until the
  // pool is destroyed. Threads as the process's, polling at the default level.
  explicit ThreadPool(int n_threads);
  // A pool whose threads (and, from its first parallel_for, its caller) run as `options` say.
  // CPUs that do not exist, or are all outside the process's allowed set, are an error; a
  // priority the system does not permit is not: the threads keep the inherited one, and
  // setup_note() says so.
  static Result<std::unique_ptr<ThreadPool>> create(const ThreadPoolOptions& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  const ThreadPoolOptions& options() const;

  // Calls fn(thread_index, begin, end) over disjoint ranges that cover [0, n) and blocks
  // until all are done. Ranges are contiguous and at least `grain` long (but the last).
  // Not reentrant, one caller at a time: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, PoolTask fn);

  // parallel_for calls since the pool started, and how many of them were barriers: ran on the
  // pool's threads and waited for them (the others ran on the caller alone: one thread, or
  // n <= grain). What a decode step costs in synchronisations; safe to read from any thread.
  struct Counts {
    uint64_t calls = 0;
    uint64_t barriers = 0;
  };
  Counts counts() const;

  // Scratch memory of pool thread `thread` (0: the caller), at least `bytes` long, 64-byte
  // aligned; valid (its bytes too) until a call for the same thread asks for more. Only that thread
  // (inside fn, or the caller around parallel_for) may use it, except that the caller may lend
  // its own to fn for one parallel_for: the threads read it, or write disjoint parts of it.
  uint8_t* scratch(int thread, size_t bytes);

  // Linux thread ids of the pool's own threads (1..n_threads-1), for inspection.
  std::vector<int> thread_ids() const;
  // What could not be applied (a priority without the permission), or empty.
  const std::string& setup_note() const;

 private:
  struct Impl;
  explicit ThreadPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
