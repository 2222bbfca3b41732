// A persistent pool of threads for kernels. The calling thread takes part as worker 0.
//
// Kernels split their *outputs* over the pool, never a reduction, so that every output element
// is computed by the same sequence of operations whatever the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace strata {

class ThreadPool {
 public:
  // n_threads >= 1 counts the caller; n_threads - 1 threads are started and live until the
  // pool is destroyed.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Calls fn(thread_index, begin, end) over disjoint ranges that cover [0, n) and blocks
  // until all are done. Ranges are contiguous and at least `grain` long (but the last).
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int thread, int64_t begin, int64_t end)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
