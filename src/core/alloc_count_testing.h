// The test binary's count of heap allocations (core/alloc_count_test.cc replaces operator new):
// a test takes the count before and after what it runs, on every thread.
#pragma once

#include <cstdint>

namespace strata::testing {

// Allocations through operator new so far, of every thread; 0 always when not counted.
uint64_t heap_allocations();
// Whether this build counts them: not in the sanitizer builds, whose runtimes replace operator
// new themselves. Tests of a count skip without it.
bool heap_allocations_counted();

}  // namespace strata::testing
