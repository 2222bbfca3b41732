// The instruction set the kernels use: chosen once from the CPU at start-up, never inside an
// inner loop. Tests force each one that the CPU supports and compare it with the scalar path.
#pragma once

namespace strata {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kIsaLevels = 3;

Isa isa_best_supported();
Isa isa_active();
// Tests and benchmarks only; must not run while kernels run. Clamped to what the CPU has.
void isa_force(Isa isa);
const char* isa_name(Isa isa);

}  // namespace strata
