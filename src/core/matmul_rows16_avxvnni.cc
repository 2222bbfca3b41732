// The AVX2 kernels of the rows-in-lanes layouts (matmul_rows16_avx2.cc), compiled for AVX-VNNI:
// each scaled integer sum is one vpdpwssd instead of madd + add, with the same integers and so
// the same bits (matmul_avx2.h). Entered only where the CPU has AVX-VNNI (isa.h).
#define STRATA_AVX_VNNI 1
#include "core/matmul_rows16_avx2.cc"  // NOLINT(bugprone-suspicious-include)
