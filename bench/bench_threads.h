// What the kernel benchmarks share: their thread count, one pool for all of them, and how much
// memory makes a working set "cold" (well past the last-level cache).
#pragma once

#include <emmintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/quant.h"
#include "core/rows16.h"
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

// Four independent SSE2 sums of the 64-byte lines [b, e) of p (64-byte aligned): bound by
// memory, not by the adds. The plain read that the decode-order benchmarks compare their
// kernels with.
inline uint64_t sum_lines(const uint8_t* p, int64_t b, int64_t e) {
  const auto* v = reinterpret_cast<const __m128i*>(p);
  __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = b; i < e; ++i) {
    s0 = _mm_add_epi64(s0, _mm_load_si128(v + 4 * i));
    s1 = _mm_add_epi64(s1, _mm_load_si128(v + 4 * i + 1));
    s2 = _mm_add_epi64(s2, _mm_load_si128(v + 4 * i + 2));
    s3 = _mm_add_epi64(s3, _mm_load_si128(v + 4 * i + 3));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(s0, s1), _mm_add_epi64(s2, s3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s));
}

// n rows of k quantised to `base` (a GGUF type) into w, packed: rows [0, distinct) drawn from
// dist, the others copies of them, row r of row r % distinct (quantising many MiB of random rows
// would take most of a benchmark's time, and the kernels' cost does not depend on the values).
inline void quantize_rows(DType base, uint8_t* w, int64_t n, int64_t k, int64_t distinct,
                          std::mt19937& rng, std::normal_distribution<float>& dist) {
  const size_t row_bytes = dtype_row_bytes(base, k);
  std::vector<float> src(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    if (r < distinct) {
      for (float& v : src) v = dist(rng);
      quantize_row(base, src.data(), w + r * row_bytes, k);
    } else {
      std::memcpy(w + r * row_bytes, w + (r % distinct) * row_bytes, row_bytes);
    }
  }
}

// w, n rows of k in t's base type, rearranged in place into t when t is a device layout
// (core/rows16.h).
inline void to_layout(DType t, uint8_t* w, int64_t n, int64_t k) {
  if (!dtype_is_layout(t)) return;
  const std::vector<uint8_t> rows(w, w + dtype_row_bytes(t, k) * static_cast<size_t>(n));
  rows16_pack(t, rows.data(), w, n, k);
}

}  // namespace strata
