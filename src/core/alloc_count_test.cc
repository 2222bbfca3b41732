// The test binary's operator new, counting (core/alloc_count_testing.h), and a test that it does.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "core/alloc_count_testing.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STRATA_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STRATA_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef STRATA_COUNT_ALLOCATIONS
#define STRATA_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

#if STRATA_COUNT_ALLOCATIONS
// libstdc++'s other forms reach these (arrays, nothrow) or free (sized and aligned deletes).
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto align = static_cast<std::size_t>(a);
  // aligned_alloc wants a multiple of the alignment, and at least one.
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align + (n == 0 ? align : 0))) {
    return p;
  }
  throw std::bad_alloc();
}
// g++ takes free() after an inlined operator new for a mismatch; both here are malloc's.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace strata::testing {

uint64_t heap_allocations() { return g_allocations.load(std::memory_order_relaxed); }
bool heap_allocations_counted() { return STRATA_COUNT_ALLOCATIONS != 0; }

namespace {

TEST(HeapAllocations, EachNewIsCounted) {
  if (!heap_allocations_counted()) GTEST_SKIP() << "a sanitizer build counts no allocations";
  const uint64_t before = heap_allocations();
  auto one = std::make_unique<int>(1);
  std::vector<int> two(100);
  struct alignas(64) Line {
    char c[64];
  };
  auto three = std::make_unique<Line>();
  EXPECT_EQ(heap_allocations() - before, 3u);
  EXPECT_EQ(*one + two.size(), 101u);
  three->c[0] = 0;
}

}  // namespace
}  // namespace strata::testing
