#include "core/membw.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "core/check.h"

namespace strata {
namespace {

constexpr size_t kWordsPerLine = 64 / sizeof(uint64_t);

// Eight independent accumulators so the adds never wait on each other; the compiler turns the
// inner loop into vector adds. The sum is checked by the caller, so the reads cannot be
// elided.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t acc[kWordsPerLine] = {};
  for (size_t i = 0; i < n; i += kWordsPerLine) {
    for (size_t j = 0; j < kWordsPerLine; ++j) acc[j] += p[i + j];
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n_threads = static_cast<size_t>(pool.size());
  // Each thread gets the same whole number of cache lines.
  const size_t lines_per_thread = std::max<size_t>(bytes / 64 / n_threads, 1);
  const size_t words_per_thread = lines_per_thread * kWordsPerLine;
  const size_t n_words = words_per_thread * n_threads;
  // Uninitialised on purpose: the first write happens on the thread that reads that part.
  // 2 MiB pages as the weights get (CPU buffers ask for them): with 4 KiB pages the hardware
  // prefetcher stops at every page and the probe would understate what the memory delivers.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t alloc_bytes = (n_words * sizeof(uint64_t) + kHugePage - 1) / kHugePage * kHugePage;
  std::unique_ptr<uint64_t[], decltype(&std::free)> buffer(
      static_cast<uint64_t*>(std::aligned_alloc(kHugePage, alloc_bytes)), &std::free);
  if (!buffer) throw std::bad_alloc();
  madvise(buffer.get(), alloc_bytes, MADV_HUGEPAGE);
  uint64_t* data = buffer.get();

  const auto for_each_part = [&](const auto& fn) {
    pool.parallel_for(static_cast<int64_t>(n_threads), 1, [&](int, int64_t begin, int64_t end) {
      for (int64_t part = begin; part < end; ++part) fn(static_cast<size_t>(part));
    });
  };
  for_each_part([&](size_t part) {
    uint64_t* p = data + part * words_per_thread;
    for (size_t i = 0; i < words_per_thread; ++i) p[i] = part * words_per_thread + i;
  });
  // Sum of 0 .. n_words - 1, modulo 2^64 like the reads' sums.
  const uint64_t expected =
      n_words % 2 == 0 ? (n_words / 2) * (n_words - 1) : n_words * ((n_words - 1) / 2);

  std::vector<uint64_t> partial(n_threads);
  double best_seconds = 0.0;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const auto start = std::chrono::steady_clock::now();
    for_each_part([&](size_t part) {
      partial[part] = sum_words(data + part * words_per_thread, words_per_thread);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    uint64_t total = 0;
    for (uint64_t s : partial) total += s;
    STRATA_CHECK(total == expected, "read-bandwidth probe summed the wrong values");
    if (r == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  // A clock too coarse for a tiny buffer: report the cost of one tick rather than infinity.
  best_seconds = std::max(best_seconds, 1e-9);
  return static_cast<double>(n_words * sizeof(uint64_t)) / best_seconds;
}

}  // namespace strata
