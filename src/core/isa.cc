#include "core/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace strata {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !has_f16c()) {
    return Isa::kScalar;
  }
  // The AVX-512 kernels also use AVX2 code (the activation quantisers, the final sums).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni")) {
    return Isa::kAvx512;
  }
  return Isa::kAvx2;
#endif
  return Isa::kScalar;
}

Isa initial() {
  Isa best = detect();
  // STRATA_ISA=scalar|avx2|avx512 lowers the choice (for A/B runs); it never raises it.
  if (const char* env = std::getenv("STRATA_ISA")) {
    bool known = false;
    for (int level = 0; level < kIsaLevels; ++level) {
      if (std::strcmp(env, isa_name(static_cast<Isa>(level))) == 0) {
        known = true;
        if (static_cast<Isa>(level) < best) best = static_cast<Isa>(level);
      }
    }
    if (!known) {
      std::fprintf(stderr, "STRATA_ISA=%s is not one of scalar, avx2, avx512: ignored\n", env);
    }
  }
  return best;
}

std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{initial()};
  return isa;
}

}  // namespace

Isa isa_best_supported() {
  static const Isa best = detect();
  return best;
}

Isa isa_active() { return active().load(std::memory_order_relaxed); }

void isa_force(Isa isa) {
  if (isa > isa_best_supported()) isa = isa_best_supported();
  active().store(isa, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace strata
