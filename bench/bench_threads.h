#pragma once

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace strata {

// The kernel benchmarks' thread count: STRATA_BENCH_THREADS, else every hardware thread.
inline int bench_threads() {
  if (const char* env = std::getenv("STRATA_BENCH_THREADS")) return std::max(1, std::atoi(env));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace strata
