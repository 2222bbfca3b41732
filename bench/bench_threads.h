// What the kernel benchmarks share: their thread count, one pool for all of them, and how much
// memory makes a working set "cold" (well past the last-level cache).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <thread>

#include "core/thread_pool.h"

namespace strata {

// The kernel benchmarks' thread count: STRATA_BENCH_THREADS, else every hardware thread.
inline int bench_threads() {
  if (const char* env = std::getenv("STRATA_BENCH_THREADS")) return std::max(1, std::atoi(env));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// One pool of bench_threads() threads for every benchmark that uses it.
inline ThreadPool& bench_pool() {
  static ThreadPool p(bench_threads());
  return p;
}

// Benchmarks that read weights from memory cycle through copies adding up to this much.
inline constexpr size_t kBenchColdBytes = size_t{128} << 20;

}  // namespace strata
