// The AVX2 kernels of the 32-element block formats (matmul_legacy_avx2.cc), compiled for
// AVX-VNNI: their integer dot products are vpdpbusd, one instruction for maddubs + madd, with
// the same integers and so the same bits (matmul_avx2.h). The activation quantisers are the
// AVX2 build's. Entered only where the CPU has AVX-VNNI (isa.h).
#define STRATA_AVX_VNNI 1
#include "core/matmul_legacy_avx2.cc"  // NOLINT(bugprone-suspicious-include)
