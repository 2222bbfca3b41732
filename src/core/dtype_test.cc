#include "core/dtype.h"

#include <gtest/gtest.h>

#include "core/fp16.h"

namespace strata {
namespace {

TEST(DType, TableMatchesGgmlLayouts) {
  EXPECT_EQ(dtype_row_bytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(dtype_info(5u), nullptr);
  EXPECT_EQ(dtype_info(1000u), nullptr);
  EXPECT_EQ(dtype_from_name("Q4_k"), DType::kQ4_K);
  EXPECT_FALSE(dtype_from_name("q9_9").has_value());
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (f != f) continue;  // NaN payloads need not survive
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway: down to even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // halfway: up to even
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                // overflow to inf
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

}  // namespace
}  // namespace strata
