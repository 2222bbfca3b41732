// What the CPU executor's tests share: a buffer table of one host byte vector.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu_backend.h"

namespace strata::testing {

// The bytes of one buffer, named by handle kHandle, as a buffer table. Each test graph is placed
// where it runs (cpu_graph_compute), so the generation never changes.
template <uint64_t kHandle>
class OneHostBuffer : public CpuBufferTable {
 public:
  uint8_t* resolve(uint64_t handle, uint64_t* size) const override {
    if (handle != kHandle) return nullptr;
    *size = bytes.size();
    return const_cast<uint8_t*>(bytes.data());
  }
  uint64_t generation() const override { return 0; }

  std::vector<uint8_t> bytes;
};

}  // namespace strata::testing
