// What the kernel tests share: the instruction sets to run, one forced for a scope, and random
// inputs that are the same on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
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

// Every level the CPU runs: the scalar one always, AVX2, AVX-VNNI and AVX-512 when the CPU has
// them. A level it lacks is named once on stderr, so that a run says which paths it did not
// test.
inline std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (int level = 0; level < kIsaLevels; ++level) {
    const Isa isa = static_cast<Isa>(level);
    if (isa_supported(isa)) {
      out.push_back(isa);
    } else {
      static bool said[kIsaLevels] = {};
      if (!said[level])
        std::fprintf(stderr, "this CPU has no %s: its kernels are not tested\n", isa_name(isa));
      said[level] = true;
    }
  }
  return out;
}

// Machine epsilon of float, 2^-23: the unit of the kernels' tolerances.
inline constexpr float kEps = std::numeric_limits<float>::epsilon();

// n floats uniform in [lo, hi) from std::mt19937(seed).
inline std::vector<float> uniform_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                         float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n floats uniform in [-range, range) from `seed` (Rng: the same numbers everywhere).
inline std::vector<float> random_floats(size_t n, uint64_t seed, float range = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = (2 * rng.uniform() - 1) * range;
  return v;
}

}  // namespace strata::testing
