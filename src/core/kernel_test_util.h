// What the kernel tests share: the instruction sets to run, one forced for a scope, and random
// inputs that are the same on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/isa.h"
#include "core/rng.h"

namespace strata::testing {

// Selects an instruction set for the scope of a test and restores the previous one.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : saved_(isa_active()) { isa_force(isa); }
  ~IsaScope() { isa_force(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa saved_;
};

// Both paths: the scalar one always, AVX2 when the CPU has it.
inline std::vector<Isa> isas() {
  std::vector<Isa> out = {Isa::kScalar};
  if (isa_best_supported() >= Isa::kAvx2) out.push_back(Isa::kAvx2);
  return out;
}

// n floats uniform in [-range, range) from `seed` (Rng: the same numbers everywhere).
inline std::vector<float> random_floats(size_t n, uint64_t seed, float range = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = (2 * rng.uniform() - 1) * range;
  return v;
}

}  // namespace strata::testing
