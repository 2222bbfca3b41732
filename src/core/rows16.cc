#include "core/rows16.h"

#include <cstring>
#include <type_traits>

#include "core/check.h"

namespace strata {
namespace {

// Moves row `lane`'s block between its base layout and its place in a super-block of the
// group: kToGroup from the block to the group, else back. Every byte of both is moved once, so
// packing and unpacking are each other's inverse.
template <bool kToGroup>
void move_q4_k(std::conditional_t<kToGroup, const BlockQ4_K, BlockQ4_K>& block,
               std::conditional_t<kToGroup, Q4KRows16, const Q4KRows16>& group, int64_t lane) {
  const auto move = [](auto* in_block, auto* in_group, size_t bytes) {
    if constexpr (kToGroup) {
      std::memcpy(in_group, in_block, bytes);
    } else {
      std::memcpy(in_block, in_group, bytes);
    }
  };
  move(&block.d, &group.d[lane], 2);
  move(&block.dmin, &group.dmin[lane], 2);
  for (int i = 0; i < 3; ++i) move(block.scales + 4 * i, &group.scales[i][lane], 4);
  for (int g = 0; g < 8; ++g) {
    for (int j = 0; j < 4; ++j) move(block.qs + 32 * j + 4 * g, group.qs[g][j][lane], 4);
  }
}

void check_layout(DType layout) {
  STRATA_CHECK(layout == DType::kQ4_K_R16, "rows16: not a rows-in-lanes layout");
}

}  // namespace

std::optional<DType> rows16_layout(DType base) {
  if (base == DType::kQ4_K) return DType::kQ4_K_R16;
  return std::nullopt;
}

void rows16_pack(DType layout, const void* src, void* dst, int64_t n, int64_t k) {
  check_layout(layout);
  STRATA_CHECK(n >= 0 && k >= 0 && k % kQKK == 0, "rows16_pack: bad shape");
  const int64_t nb = k / kQKK;
  const size_t row_bytes = dtype_row_bytes(layout, k);
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t full = n / kLaneRows * kLaneRows;
  for (int64_t r = 0; r < full; ++r) {
    auto* group = reinterpret_cast<Q4KRows16*>(out + (r / kLaneRows) * kLaneRows * row_bytes);
    const auto* row = reinterpret_cast<const BlockQ4_K*>(in + r * row_bytes);
    for (int64_t b = 0; b < nb; ++b) move_q4_k<true>(row[b], group[b], r % kLaneRows);
  }
  std::memcpy(out + full * row_bytes, in + full * row_bytes,
              static_cast<size_t>(n - full) * row_bytes);
}

void rows16_unpack_group(DType layout, const void* matrix, int64_t g, int64_t k, void* dst) {
  check_layout(layout);
  const int64_t nb = k / kQKK;
  const size_t row_bytes = dtype_row_bytes(layout, k);
  const auto* group = reinterpret_cast<const Q4KRows16*>(static_cast<const uint8_t*>(matrix) +
                                                         g * kLaneRows * row_bytes);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t lane = 0; lane < kLaneRows; ++lane) {
    auto* row = reinterpret_cast<BlockQ4_K*>(out + lane * row_bytes);
    for (int64_t b = 0; b < nb; ++b) move_q4_k<false>(row[b], group[b], lane);
  }
}

}  // namespace strata
