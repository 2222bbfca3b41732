// The instruction set the kernels use: chosen once from the CPU at start-up, never inside an
// inner loop. Tests force each one that the CPU supports and compare it with the scalar path.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace strata {

// The levels, each a superset of the ones below it *on the CPUs that have it*, except AVX-VNNI:
// its 256-bit (VEX) dot products exist on some CPUs without AVX-512 (Alder Lake and later
// client cores, Sierra Forest) and are missing from some with it (Skylake-X to Ice Lake, Zen 4).
// A CPU supports a level when it has its instructions:
//  - kAvx2: AVX2, FMA, F16C.
//  - kAvxVnni: kAvx2 and AVX-VNNI (vpdpbusd / vpdpwssd on ymm registers, VEX-encoded).
//  - kAvx512: kAvx2, AVX-512 F/BW/VL/DQ/VNNI and BMI2 (which every AVX-512 CPU has).
// Kernel tables hold one entry per level; a lookup walks down from the active level and takes
// the first entry of a level the CPU supports (isa_supported), so an AVX-512 CPU without
// AVX-VNNI never reaches the AVX-VNNI kernels.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3 };
inline constexpr int kIsaLevels = 4;

// The highest level the CPU supports.
Isa isa_best_supported();
bool isa_supported(Isa isa);
Isa isa_active();
// Tests and benchmarks only; must not run while kernels run. Clamped to what the CPU has: a
// level above the best is the best, one the CPU lacks below it is the next supported below.
void isa_force(Isa isa);
const char* isa_name(Isa isa);

// How far ahead, in bytes, the AVX-512 kernels of the K-quant layouts in rows in lanes
// (core/rows16.h) prefetch the group they stream; 0: not at all, the hardware prefetchers alone.
// Chosen once from the CPU's vendor and family, as measured on each (docs/engine.md): a Zen 5
// reads those layouts at 0.6 of its memory speed without, and Zen 4 was slower with.
// STRATA_ROWS16_PREFETCH=BYTES (0..65536) sets it, for A/B runs on other CPUs. Only speed
// depends on it, never a result.
size_t rows16_prefetch_bytes();
// STRATA_ROWS16_PREFETCH's value: a decimal count of bytes in 0..65536, else nothing.
std::optional<size_t> parse_rows16_prefetch(std::string_view text);

}  // namespace strata
