// F16 rows with F16C: exact on the way up, round to nearest even on the way down, as the
// scalar rows of quant_float.cc (tested bit for bit).
#include <immintrin.h>

#include "core/fp16.h"
#include "core/quant_rows.h"

namespace strata {

void dequantize_row_f16_avx2(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(x[i]);
}

void quantize_row_f16_avx2(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = f32_to_f16(src[i]);
}

}  // namespace strata
