// How fast this machine streams memory into the cores: the bound on decode speed at batch 1,
// where every weight is read once per token (tokens/s <= bandwidth / model bytes).
//
// Goal: a number to state beside benchmark results, measured the way a matmul reads weights
// (a sequential read split over the pool). Non-goals: latency, write or copy bandwidth, NUMA
// placement control.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace strata {

// Large enough to be several times any last-level cache we expect (32 MiB here), small enough
// to allocate on a laptop.
inline constexpr size_t kMemBwDefaultBytes = size_t{512} << 20;

// Bytes per second of a streaming read of a `bytes` buffer split evenly over the pool's
// threads, best of `repeats` (at least 1) passes. The buffer is written first, by the threads
// that later read each part, so page faults stay out of the timing. `bytes` is rounded down
// to whole cache lines per thread (and up to one line per thread). A buffer that fits in the
// caches measures the caches, not memory. Allocates `bytes`; throws std::bad_alloc like any
// allocation when that is impossible.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = kMemBwDefaultBytes, int repeats = 5);

}  // namespace strata
