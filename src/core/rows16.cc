#include "core/rows16.h"

#include <cstring>
#include <type_traits>

#include "core/check.h"

namespace strata {
namespace {

// Copies `bytes` from a row's block to its place in a group (kToGroup), or back.
template <bool kToGroup, typename B, typename G>
void move(B* in_block, G* in_group, size_t bytes) {
  if constexpr (kToGroup) {
    std::memcpy(in_group, in_block, bytes);
  } else {
    std::memcpy(in_block, in_group, bytes);
  }
}

// Moves row `lane`'s block between its base layout and its place in a super-block of the
// group: kToGroup from the block to the group, else back. Every byte of both is moved once, so
// packing and unpacking are each other's inverse.
template <bool kToGroup>
void move_q4_k(std::conditional_t<kToGroup, const BlockQ4_K, BlockQ4_K>& block,
               std::conditional_t<kToGroup, Q4KRows16, const Q4KRows16>& group, int64_t lane) {
  move<kToGroup>(&block.d, &group.d[lane], 2);
  move<kToGroup>(&block.dmin, &group.dmin[lane], 2);
  for (int i = 0; i < 3; ++i) move<kToGroup>(block.scales + 4 * i, &group.scales[i][lane], 4);
  for (int g = 0; g < 8; ++g) {
    for (int j = 0; j < 4; ++j) move<kToGroup>(block.qs + 32 * j + 4 * g, group.qs[g][j][lane], 4);
  }
}

template <bool kToGroup>
void move_q6_k(std::conditional_t<kToGroup, const BlockQ6_K, BlockQ6_K>& block,
               std::conditional_t<kToGroup, Q6KRows16, const Q6KRows16>& group, int64_t lane) {
  for (int s = 0; s < 16; ++s) move<kToGroup>(&block.scales[s], &group.scales[s][lane], 1);
  move<kToGroup>(&block.d, &group.d[lane], 2);
  for (int l = 0; l < 8; ++l) {
    for (int h = 0; h < 2; ++h) {
      move<kToGroup>(block.ql + 64 * h + 4 * l, group.q[l][h].ql0[lane], 4);
      move<kToGroup>(block.ql + 64 * h + 32 + 4 * l, group.q[l][h].ql1[lane], 4);
      move<kToGroup>(block.qh + 32 * h + 4 * l, group.q[l][h].qh[lane], 4);
    }
  }
}

// Moves every row of the full groups between rows (the base layout) and groups: kToGroup from
// rows to groups, else back. Block is the base type's block, Group its super-block of 16 rows.
template <typename Block, typename Group, bool kToGroup, typename Move>
void move_groups(const uint8_t* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t k, Move&& move) {
  const int64_t nb = k / kQKK;
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(Block);
  for (int64_t r = g0 * kLaneRows; r < g1 * kLaneRows; ++r) {
    const size_t group = static_cast<size_t>(r / kLaneRows) * kLaneRows * row_bytes;
    const size_t row = static_cast<size_t>(r) * row_bytes;
    if constexpr (kToGroup) {
      const auto* blocks = reinterpret_cast<const Block*>(src + row);
      auto* groups = reinterpret_cast<Group*>(dst + group);
      for (int64_t b = 0; b < nb; ++b) move(blocks[b], groups[b], r % kLaneRows);
    } else {
      const auto* groups = reinterpret_cast<const Group*>(src + group);
      auto* blocks = reinterpret_cast<Block*>(dst + row);
      for (int64_t b = 0; b < nb; ++b) move(blocks[b], groups[b], r % kLaneRows);
    }
  }
}

// Groups [g0, g1) of a matrix of rows of k, from rows at src to groups at dst (kToGroup) or back.
template <bool kToGroup>
void move_layout(DType layout, const void* src, void* dst, int64_t g0, int64_t g1, int64_t k) {
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  switch (layout) {
    case DType::kQ4_K_R16:
      move_groups<BlockQ4_K, Q4KRows16, kToGroup>(
          in, out, g0, g1, k, [](auto& b, auto& g, int64_t r) { move_q4_k<kToGroup>(b, g, r); });
      return;
    case DType::kQ6_K_R16:
      move_groups<BlockQ6_K, Q6KRows16, kToGroup>(
          in, out, g0, g1, k, [](auto& b, auto& g, int64_t r) { move_q6_k<kToGroup>(b, g, r); });
      return;
    default:
      STRATA_CHECK(false, "rows16: not a rows-in-lanes layout");
  }
}

}  // namespace

std::optional<DType> rows16_layout(DType base) {
  if (base == DType::kQ4_K) return DType::kQ4_K_R16;
  if (base == DType::kQ6_K) return DType::kQ6_K_R16;
  return std::nullopt;
}

void rows16_pack(DType layout, const void* src, void* dst, int64_t n, int64_t k) {
  STRATA_CHECK(n >= 0 && k >= 0 && k % kQKK == 0, "rows16_pack: bad shape");
  const size_t row_bytes = dtype_row_bytes(layout, k);
  const int64_t full = n / kLaneRows * kLaneRows;
  move_layout<true>(layout, src, dst, 0, full / kLaneRows, k);
  std::memcpy(static_cast<uint8_t*>(dst) + full * row_bytes,
              static_cast<const uint8_t*>(src) + full * row_bytes,
              static_cast<size_t>(n - full) * row_bytes);
}

void rows16_unpack_group(DType layout, const void* matrix, int64_t g, int64_t k, void* dst) {
  const size_t group_bytes = kLaneRows * dtype_row_bytes(layout, k);
  // move_layout addresses group g's rows from row 16 g: shift both so that they start there.
  move_layout<false>(layout, static_cast<const uint8_t*>(matrix) + g * group_bytes, dst, 0, 1, k);
}

void rows16_unpack_row(DType layout, const void* matrix, int64_t n, int64_t r, int64_t k,
                       void* dst) {
  STRATA_CHECK(r >= 0 && r < n && k % kQKK == 0, "rows16_unpack_row: bad row");
  const size_t row_bytes = dtype_row_bytes(layout, k);
  const auto* in = static_cast<const uint8_t*>(matrix);
  if (r >= n / kLaneRows * kLaneRows) {
    std::memcpy(dst, in + r * row_bytes, row_bytes);  // the tail keeps the base layout
    return;
  }
  const uint8_t* group = in + (r / kLaneRows) * kLaneRows * row_bytes;
  const int64_t nb = k / kQKK, lane = r % kLaneRows;
  switch (layout) {
    case DType::kQ4_K_R16:
      for (int64_t b = 0; b < nb; ++b) {
        move_q4_k<false>(static_cast<BlockQ4_K*>(dst)[b],
                         reinterpret_cast<const Q4KRows16*>(group)[b], lane);
      }
      return;
    case DType::kQ6_K_R16:
      for (int64_t b = 0; b < nb; ++b) {
        move_q6_k<false>(static_cast<BlockQ6_K*>(dst)[b],
                         reinterpret_cast<const Q6KRows16*>(group)[b], lane);
      }
      return;
    default:
      STRATA_CHECK(false, "rows16: not a rows-in-lanes layout");
  }
}

}  // namespace strata
