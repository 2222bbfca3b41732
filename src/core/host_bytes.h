// Byte buffers for large host copies of device data (saved sequence states): from 2 MiB up
// they sit on 2 MiB boundaries with transparent huge pages asked for, as the CPU device's
// buffers do. Touching fresh 4 KiB pages costs a fault each, which in a virtual machine can
// make filling a 64 MiB state take 30 times as long as the copy itself.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

namespace strata {

constexpr size_t kHostHugePage = size_t{2} << 20;

// The bytes an allocation of n bytes takes (rounded up to whole huge pages from one up).
inline size_t host_alloc_bytes(size_t n) {
  return n >= kHostHugePage ? (n + kHostHugePage - 1) / kHostHugePage * kHostHugePage : n;
}

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHostHugePage) {
      if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return static_cast<T*>(p);
      throw std::bad_alloc();
    }
    void* p = std::aligned_alloc(kHostHugePage, host_alloc_bytes(bytes));
    if (p == nullptr) throw std::bad_alloc();
    ::madvise(p, host_alloc_bytes(bytes), MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

using HostBytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;

}  // namespace strata
