#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"

namespace strata {

namespace {

// One step of a wait: pause while the wait is young, then yield. When the machine has more
// runnable threads than cores, the thread we wait for may need this core to finish.
void backoff(int spin) {
  if (spin < 2000) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

}  // namespace

// Workers spin briefly on a generation counter before sleeping: a decode step runs hundreds
// of small kernels back to back, and a futex wake per kernel would cost more than the kernel.
struct ThreadPool::Impl {
  explicit Impl(int n) : n_threads(n) {
    for (int i = 1; i < n; ++i) threads.emplace_back([this, i] { worker(i); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
  }

  void run_share(int thread) {
    const int64_t per = (n + n_threads - 1) / n_threads;
    const int64_t chunk = std::max(grain, ((per + grain - 1) / grain) * grain);
    const int64_t begin = std::min(n, chunk * thread);
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(thread, begin, end);
  }

  void worker(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = generation.load(std::memory_order_acquire);
      for (int spin = 0; gen == seen && spin < 20000; ++spin) {
        backoff(spin);
        gen = generation.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return generation.load(std::memory_order_acquire) != seen; });
        gen = generation.load(std::memory_order_acquire);
      }
      seen = gen;
      if (stop) return;
      run_share(index);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  const int n_threads;
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  bool stop = false;  // written under mutex before the last generation bump

  // The job of the current generation; written before the bump, read after it.
  const std::function<void(int, int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t grain = 1;
};

ThreadPool::ThreadPool(int n_threads) {
  STRATA_CHECK(n_threads >= 1 && n_threads <= 1024, "thread count out of range");
  impl_ = std::make_unique<Impl>(n_threads);
}

ThreadPool::~ThreadPool() = default;

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& p = *impl_;
  if (p.n_threads == 1 || n <= grain) {
    fn(0, 0, n);
    return;
  }
  p.fn = &fn;
  p.n = n;
  p.grain = grain;
  p.pending.store(p.n_threads - 1, std::memory_order_relaxed);
  {
    // The lock orders the bump against a worker that is about to sleep.
    std::lock_guard<std::mutex> lock(p.mutex);
    p.generation.fetch_add(1, std::memory_order_release);
  }
  p.wake.notify_all();
  p.run_share(0);
  for (int spin = 0; p.pending.load(std::memory_order_acquire) != 0; ++spin) backoff(spin);
}

}  // namespace strata
