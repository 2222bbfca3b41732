#include "core/rope_shift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/kernel_test_util.h"
#include "core/quant_rows.h"
#include "core/rope_rates.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

using testing::random_floats;

constexpr int64_t kHd = 32, kHeads = 3, kRow = kHd * kHeads, kCells = 9;

RopeShiftArgs args(DType dtype, void* cache, int64_t n_rot, RopeMode mode, const float* rates) {
  RopeShiftArgs a;
  a.dtype = dtype;
  a.cache = cache;
  a.row_bytes = dtype_row_bytes(dtype, kRow);
  a.head_dim = kHd;
  a.n_head = kHeads;
  a.n_rot = n_rot;
  a.mode = mode;
  a.rates = rates;
  a.freq_base = 10000.0f;
  a.freq_scale = 0.5f;
  return a;
}

// On an f32 cache a shift by d is exactly the rope kernels' rotation at position d (same
// angles, same operations): bitwise, for plain rope and rate tables, both pairings, partial
// rotary; rows that are not listed stay as they were.
TEST(RopeShift, IsTheRopeRotationForTheDelta) {
  const std::vector<float> rates = random_floats(16, 3);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int64_t n_rot : {kHd, kHd / 2}) {
      for (const float* r : {static_cast<const float*>(nullptr), rates.data()}) {
        if (r != nullptr && n_rot != kHd) continue;  // the table has kHd / 2 rates
        const std::vector<float> start = random_floats(kRow * kCells, 9);
        std::vector<float> cache = start;
        const int32_t cells[3] = {4, 0, 7};
        const int32_t delta[3] = {-5, -1000, 3};
        ref::rope_shift(args(DType::kF32, cache.data(), n_rot, mode, r), cells, delta, 3);
        for (int i = 0; i < 3; ++i) {
          std::vector<float> want(start.begin() + cells[i] * kRow,
                                  start.begin() + (cells[i] + 1) * kRow);
          if (r == nullptr) {
            ref::rope(want.data(), kHd, kHeads, 1, kRow, &delta[i], n_rot, mode, 10000.0f, 0.5f);
          } else {
            ref::rope_rates(want.data(), kHd, kHeads, 1, kRow, &delta[i], n_rot, mode, r, 1.0f);
          }
          EXPECT_EQ(0, std::memcmp(want.data(), cache.data() + cells[i] * kRow, 4 * kRow))
              << "cell " << cells[i];
        }
        for (int c : {1, 2, 3, 5, 6, 8}) {
          EXPECT_EQ(0, std::memcmp(start.data() + c * kRow, cache.data() + c * kRow, 4 * kRow));
        }
      }
    }
  }
}

// rope(p) then a shift by -d is rope(p - d) up to float rounding of the angles (each within a
// few ulps of p * rate, so |error| <= p * rate * 2^-22 per value of magnitude <= 1) and of the
// rotation itself.
TEST(RopeShift, RopeThenShiftIsRopeAtTheNewPosition) {
  const std::vector<float> x = random_floats(kRow, 5);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    const int32_t p = 2000, d = 1500, moved = p - d;
    std::vector<float> shifted = x, direct = x;
    ref::rope(shifted.data(), kHd, kHeads, 1, kRow, &p, kHd, mode, 10000.0f, 1.0f);
    const int32_t cell = 0, delta = -d;
    RopeShiftArgs a = args(DType::kF32, shifted.data(), kHd, mode, nullptr);
    a.freq_scale = 1.0f;
    ref::rope_shift(a, &cell, &delta, 1);
    ref::rope(direct.data(), kHd, kHeads, 1, kRow, &moved, kHd, mode, 10000.0f, 1.0f);
    for (int64_t i = 0; i < kRow; ++i) EXPECT_NEAR(shifted[i], direct[i], 2e-3f) << i;
  }
}

// On an f16 cache: the f32 rotation of the row as f16 converts it, rounded back to f16.
TEST(RopeShift, F16RowsRoundOnceAfterTheRotation) {
  const std::vector<float> values = random_floats(kRow * kCells, 13);
  std::vector<uint16_t> cache(values.size());
  for (size_t i = 0; i < values.size(); ++i) cache[i] = f32_to_f16(values[i]);
  const std::vector<uint16_t> start = cache;
  const int32_t cells[2] = {8, 2};
  const int32_t delta[2] = {-17, -300};
  ref::rope_shift(args(DType::kF16, cache.data(), kHd, RopeMode::kNeox, nullptr), cells, delta, 2);
  for (int i = 0; i < 2; ++i) {
    std::vector<float> row(kRow);
    for (int64_t j = 0; j < kRow; ++j) row[j] = f16_to_f32(start[cells[i] * kRow + j]);
    ref::rope(row.data(), kHd, kHeads, 1, kRow, &delta[i], kHd, RopeMode::kNeox, 10000.0f, 0.5f);
    for (int64_t j = 0; j < kRow; ++j) {
      ASSERT_EQ(cache[cells[i] * kRow + j], f32_to_f16(row[j])) << "cell " << cells[i] << " " << j;
    }
  }
}

// A q8_0 row (a q8_0 KV cache) is dequantised, rotated and quantised again: the rotation of its
// values, rounded to q8_0 once.
TEST(RopeShift, Q8_0RowsAreRequantisedAfterTheRotation) {
  const std::vector<float> values = random_floats(kRow * kCells, 15);
  const size_t row_bytes = dtype_row_bytes(DType::kQ8_0, kRow);
  std::vector<uint8_t> cache(row_bytes * kCells);
  for (int64_t c = 0; c < kCells; ++c) {
    quantize_row_q8_0(values.data() + c * kRow, cache.data() + c * row_bytes, kRow);
  }
  const std::vector<uint8_t> start = cache;
  const int32_t cells[2] = {3, 7};
  const int32_t delta[2] = {5, -41};
  ThreadPool pool(2);
  rope_shift(pool, args(DType::kQ8_0, cache.data(), kHd, RopeMode::kNormal, nullptr), cells, delta,
             2);
  for (int i = 0; i < 2; ++i) {
    std::vector<float> row(kRow);
    dequantize_row_q8_0(start.data() + cells[i] * row_bytes, row.data(), kRow);
    ref::rope(row.data(), kHd, kHeads, 1, kRow, &delta[i], kHd, RopeMode::kNormal, 10000.0f, 0.5f);
    std::vector<uint8_t> want(row_bytes);
    quantize_row_q8_0(row.data(), want.data(), kRow);
    EXPECT_EQ(std::memcmp(cache.data() + cells[i] * row_bytes, want.data(), row_bytes), 0)
        << "cell " << cells[i];
    EXPECT_NE(std::memcmp(cache.data() + cells[i] * row_bytes, start.data() + cells[i] * row_bytes,
                          row_bytes),
              0);
  }
  EXPECT_EQ(std::memcmp(cache.data(), start.data(), row_bytes), 0) << "cell 0 is not listed";
}

// A row's result depends on the row and its delta only: not on the thread count nor on the
// other rows of the call.
TEST(RopeShift, RowsAreIndependentOfThreadsAndCompany) {
  const int64_t cells_n = 64;
  const std::vector<float> values = random_floats(kRow * cells_n, 21);
  std::vector<uint16_t> a(values.size());
  for (size_t i = 0; i < values.size(); ++i) a[i] = f32_to_f16(values[i]);
  std::vector<uint16_t> b = a, alone = a;
  std::vector<int32_t> cells, delta;
  for (int32_t c = 0; c < cells_n; c += 2) {
    cells.push_back(c);
    delta.push_back(-(c * 7 + 1));
  }
  const std::vector<float> rates = random_floats(kHd / 2, 4);
  ThreadPool one(1), two(2);
  rope_shift(one, args(DType::kF16, a.data(), kHd, RopeMode::kNormal, rates.data()), cells.data(),
             delta.data(), static_cast<int64_t>(cells.size()));
  rope_shift(two, args(DType::kF16, b.data(), kHd, RopeMode::kNormal, rates.data()), cells.data(),
             delta.data(), static_cast<int64_t>(cells.size()));
  EXPECT_EQ(a, b);
  ref::rope_shift(args(DType::kF16, alone.data(), kHd, RopeMode::kNormal, rates.data()), &cells[5],
                  &delta[5], 1);
  EXPECT_EQ(0, std::memcmp(alone.data() + cells[5] * kRow, a.data() + cells[5] * kRow, 2 * kRow));
}

}  // namespace
}  // namespace strata
