#include "core/rows16.h"

#include <algorithm>
#include <cstring>
#include <iterator>
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
// group: kToGroup from the block to the group, else back. Every byte (for Q6_K's quants, every
// bit) of both is moved once, so packing and unpacking are each other's inverse.
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
void move_q5_k(std::conditional_t<kToGroup, const BlockQ5_K, BlockQ5_K>& block,
               std::conditional_t<kToGroup, Q5KRows16, const Q5KRows16>& group, int64_t lane) {
  move<kToGroup>(&block.d, &group.d[lane], 2);
  move<kToGroup>(&block.dmin, &group.dmin[lane], 2);
  for (int i = 0; i < 3; ++i) move<kToGroup>(block.scales + 4 * i, &group.scales[i][lane], 4);
  for (int g = 0; g < 8; ++g) {
    move<kToGroup>(block.qh + 4 * g, group.qh[g][lane], 4);
    for (int j = 0; j < 4; ++j) move<kToGroup>(block.qs + 32 * j + 4 * g, group.qs[g][j][lane], 4);
  }
}

// v in every byte of a 32-bit word: the masks of four elements at a time.
constexpr uint32_t each_byte(uint32_t v) { return v * 0x01010101u; }

// The two low bits of a Q2_K or Q3_K block's quants between the file's qs (element 128h + 32j +
// l's in bit pair j of byte 32h + l; 16 words) and the layout's low plane (core/rows16.h) of
// row `lane`, 32-bit words at a time: word [p][h] gathers bit pair p % 4 of the 16 bytes at
// 32 (p / 4) + 16h. Unpacking ORs into `qs`, which starts at zero.
template <bool kToGroup>
void move_low_pairs(uint32_t* qs,
                    std::conditional_t<kToGroup, uint8_t, const uint8_t> (*low)[2][kLaneRows][4],
                    int64_t lane) {
  const uint32_t pairs = each_byte(0x03);
  for (int p = 0; p < 8; ++p) {
    const int j = p % 4;
    for (int h = 0; h < 2; ++h) {
      uint32_t* file = qs + 8 * (p / 4) + 4 * h;  // bytes 32 (p / 4) + 16h + 4i .. + 3
      if constexpr (kToGroup) {
        uint32_t w = 0;
        for (int i = 0; i < 4; ++i) w |= (file[i] >> (2 * j) & pairs) << (2 * i);
        std::memcpy(low[p][h][lane], &w, 4);
      } else {
        uint32_t w;
        std::memcpy(&w, low[p][h][lane], 4);
        for (int i = 0; i < 4; ++i) file[i] |= (w >> (2 * i) & pairs) << (2 * j);
      }
    }
  }
}

// A Q3_K block: the low bits as above, and the third bits between the file's hmask (element
// 128h + 32j + l's in bit 4h + j of byte l) and the layout's high plane: word [p] gathers bit p
// of the hmask's 32 bytes.
template <bool kToGroup>
void move_q3_k(std::conditional_t<kToGroup, const BlockQ3_K, BlockQ3_K>& block,
               std::conditional_t<kToGroup, Q3KRows16, const Q3KRows16>& group, int64_t lane) {
  move<kToGroup>(&block.d, &group.d[lane], 2);
  for (int i = 0; i < 3; ++i) move<kToGroup>(block.scales + 4 * i, &group.scales[i][lane], 4);
  const uint32_t bits = each_byte(0x01);
  uint32_t qs[16] = {}, hm[8] = {};  // the file's words
  if constexpr (kToGroup) {
    std::memcpy(qs, block.qs, sizeof qs);
    std::memcpy(hm, block.hmask, sizeof hm);
  }
  move_low_pairs<kToGroup>(qs, group.low, lane);
  for (int p = 0; p < 8; ++p) {
    if constexpr (kToGroup) {
      uint32_t w = 0;
      for (int m = 0; m < 8; ++m) w |= (hm[m] >> p & bits) << m;
      std::memcpy(group.high[p][lane], &w, 4);
    } else {
      uint32_t w;
      std::memcpy(&w, group.high[p][lane], 4);
      for (int m = 0; m < 8; ++m) hm[m] |= (w >> m & bits) << p;
    }
  }
  if constexpr (!kToGroup) {
    std::memcpy(block.qs, qs, sizeof qs);
    std::memcpy(block.hmask, hm, sizeof hm);
  }
}

template <bool kToGroup>
void move_q2_k(std::conditional_t<kToGroup, const BlockQ2_K, BlockQ2_K>& block,
               std::conditional_t<kToGroup, Q2KRows16, const Q2KRows16>& group, int64_t lane) {
  move<kToGroup>(&block.d, &group.d[lane], 2);
  move<kToGroup>(&block.dmin, &group.dmin[lane], 2);
  for (int i = 0; i < 4; ++i) move<kToGroup>(block.scales + 4 * i, group.scales[i][lane], 4);
  uint32_t qs[16] = {};
  if constexpr (kToGroup) std::memcpy(qs, block.qs, sizeof qs);
  move_low_pairs<kToGroup>(qs, group.low, lane);
  if constexpr (!kToGroup) std::memcpy(block.qs, qs, sizeof qs);
}

// A Q6_K half's quants (ql at 64 bytes, qh at 32) at byte t (a multiple of 4) as the layout's
// three words: elements t..t+3 of the half's groups 0..2 as 6-bit values, over two bits each of
// group 3's (core/rows16.h). Shifts within a 32-bit word: every bit they move into another byte
// is masked off.
void q6_k_pack4(const uint8_t* ql, const uint8_t* qh, int t, uint32_t out[3]) {
  uint32_t a, b, h;
  std::memcpy(&a, ql + t, 4);
  std::memcpy(&b, ql + t + 32, 4);
  std::memcpy(&h, qh + t, 4);
  const uint32_t m4 = each_byte(0x0f), m2 = each_byte(0x03);
  const uint32_t q[4] = {(a & m4) | (h & m2) << 4, (b & m4) | (h >> 2 & m2) << 4,
                         (a >> 4 & m4) | (h >> 4 & m2) << 4, (b >> 4 & m4) | (h >> 6 & m2) << 4};
  for (int i = 0; i < 3; ++i) out[i] = q[i] | (q[3] >> (2 * i) & m2) << 6;
}

// The inverse of q6_k_pack4.
void q6_k_unpack4(const uint32_t in[3], uint8_t* ql, uint8_t* qh, int t) {
  const uint32_t m6 = each_byte(0x3f), m4 = each_byte(0x0f), m2 = each_byte(0x03);
  uint32_t q[4] = {in[0] & m6, in[1] & m6, in[2] & m6, 0};
  for (int i = 0; i < 3; ++i) q[3] |= (in[i] >> 6 & m2) << (2 * i);
  const uint32_t a = (q[0] & m4) | (q[2] & m4) << 4, b = (q[1] & m4) | (q[3] & m4) << 4;
  uint32_t h = 0;
  for (int i = 0; i < 4; ++i) h |= (q[i] >> 4 & m2) << (2 * i);
  std::memcpy(ql + t, &a, 4);
  std::memcpy(ql + t + 32, &b, 4);
  std::memcpy(qh + t, &h, 4);
}

template <bool kToGroup>
void move_q6_k(std::conditional_t<kToGroup, const BlockQ6_K, BlockQ6_K>& block,
               std::conditional_t<kToGroup, Q6KRows16, const Q6KRows16>& group, int64_t lane) {
  for (int s = 0; s < 16; ++s) move<kToGroup>(&block.scales[s], &group.scales[s][lane], 1);
  move<kToGroup>(&block.d, &group.d[lane], 2);
  for (int l = 0; l < 8; ++l) {
    for (int h = 0; h < 2; ++h) {
      uint32_t words[3];
      if constexpr (kToGroup) {
        q6_k_pack4(block.ql + 64 * h, block.qh + 32 * h, 4 * l, words);
        for (int i = 0; i < 3; ++i) std::memcpy(group.q[l][h][i][lane], &words[i], 4);
      } else {
        for (int i = 0; i < 3; ++i) std::memcpy(&words[i], group.q[l][h][i][lane], 4);
        q6_k_unpack4(words, block.ql + 64 * h, block.qh + 32 * h, 4 * l);
      }
    }
  }
}

template <bool kToGroup>
void move_iq4_xs(std::conditional_t<kToGroup, const BlockIQ4_XS, BlockIQ4_XS>& block,
                 std::conditional_t<kToGroup, IQ4XSRows16, const IQ4XSRows16>& group,
                 int64_t lane) {
  move<kToGroup>(&block.d, &group.d[lane], 2);
  move<kToGroup>(&block.scales_h, &group.scales_h[lane], 2);
  move<kToGroup>(block.scales_l, &group.scales_l[lane], 4);
  for (int s = 0; s < 8; ++s) {
    for (int g = 0; g < 4; ++g) move<kToGroup>(block.qs + 16 * s + 4 * g, group.qs[s][g][lane], 4);
  }
}

// Q8_0: a pair of blocks at a time (Q8_0Rows16), each quant byte XOR 0x80 both ways.
template <bool kToGroup>
void move_q8_0(std::conditional_t<kToGroup, const BlockQ8_0x2, BlockQ8_0x2>& blocks,
               std::conditional_t<kToGroup, Q8_0Rows16, const Q8_0Rows16>& group, int64_t lane) {
  for (int h = 0; h < 2; ++h) {
    auto& block = blocks.b[h];
    move<kToGroup>(&block.d, &group.d[h][lane], 2);
    for (int t = 0; t < 8; ++t) {
      auto* file =
          reinterpret_cast<std::conditional_t<kToGroup, const uint8_t, uint8_t>*>(block.qs + 4 * t);
      auto* lanes = group.qs[8 * h + t][lane];
      for (int j = 0; j < 4; ++j) {
        if constexpr (kToGroup) {
          lanes[j] = file[j] ^ 0x80;
        } else {
          file[j] = lanes[j] ^ 0x80;
        }
      }
    }
  }
}

// Q4_0 and MXFP4: a pair of blocks at a time (Q4_0Rows16, MXFP4Rows16), the scale (d or e) and
// the nibbles.
template <bool kToGroup, typename Blocks, typename Group>
void move_nibbles(std::conditional_t<kToGroup, const Blocks, Blocks>& blocks,
                  std::conditional_t<kToGroup, Group, const Group>& group, int64_t lane) {
  for (int h = 0; h < 2; ++h) {
    if constexpr (std::is_same_v<Group, MXFP4Rows16>) {
      move<kToGroup>(&blocks.b[h].e, &group.e[h][lane], 1);
    } else {
      move<kToGroup>(&blocks.b[h].d, &group.d[h][lane], 2);
    }
    for (int j = 0; j < 4; ++j)
      move<kToGroup>(blocks.b[h].qs + 4 * j, group.qs[4 * h + j][lane], 4);
  }
}
// Moves row `lane`'s super-block from `from` to `to`: from its block in the base layout to its
// place in a group's super-block (packing), or back (unpacking).
using MoveBlock = void (*)(const void* from, void* to, int64_t lane);

template <typename Block, typename Group, bool kToGroup,
          void (*kMove)(std::conditional_t<kToGroup, const Block, Block>&,
                        std::conditional_t<kToGroup, Group, const Group>&, int64_t)>
void move_block(const void* from, void* to, int64_t lane) {
  if constexpr (kToGroup) {
    kMove(*static_cast<const Block*>(from), *static_cast<Group*>(to), lane);
  } else {
    kMove(*static_cast<Block*>(to), *static_cast<const Group*>(from), lane);
  }
}

// One row per rows-in-lanes layout: everything its packing needs. Adding a layout is a row here
// (with its block moves above), one in the dtype and kernel tables, and its kernels.
struct Rows16Layout {
  DType layout;
  DType base;
  size_t block_bytes;  // of a unit (the layout's block) of the base type: a group's super-block
                       // is 16 of them
  MoveBlock pack;      // block -> group
  MoveBlock unpack;    // group -> block
};

constexpr Rows16Layout kRows16Layouts[] = {
    {DType::kQ4_K_R16, DType::kQ4_K, sizeof(BlockQ4_K),
     move_block<BlockQ4_K, Q4KRows16, true, move_q4_k<true>>,
     move_block<BlockQ4_K, Q4KRows16, false, move_q4_k<false>>},
    {DType::kQ6_K_R16, DType::kQ6_K, sizeof(BlockQ6_K),
     move_block<BlockQ6_K, Q6KRows16, true, move_q6_k<true>>,
     move_block<BlockQ6_K, Q6KRows16, false, move_q6_k<false>>},
    {DType::kQ2_K_R16, DType::kQ2_K, sizeof(BlockQ2_K),
     move_block<BlockQ2_K, Q2KRows16, true, move_q2_k<true>>,
     move_block<BlockQ2_K, Q2KRows16, false, move_q2_k<false>>},
    {DType::kQ3_K_R16, DType::kQ3_K, sizeof(BlockQ3_K),
     move_block<BlockQ3_K, Q3KRows16, true, move_q3_k<true>>,
     move_block<BlockQ3_K, Q3KRows16, false, move_q3_k<false>>},
    {DType::kQ5_K_R16, DType::kQ5_K, sizeof(BlockQ5_K),
     move_block<BlockQ5_K, Q5KRows16, true, move_q5_k<true>>,
     move_block<BlockQ5_K, Q5KRows16, false, move_q5_k<false>>},
    {DType::kIQ4_XS_R16, DType::kIQ4_XS, sizeof(BlockIQ4_XS),
     move_block<BlockIQ4_XS, IQ4XSRows16, true, move_iq4_xs<true>>,
     move_block<BlockIQ4_XS, IQ4XSRows16, false, move_iq4_xs<false>>},
    {DType::kQ8_0_R16, DType::kQ8_0, sizeof(BlockQ8_0x2),
     move_block<BlockQ8_0x2, Q8_0Rows16, true, move_q8_0<true>>,
     move_block<BlockQ8_0x2, Q8_0Rows16, false, move_q8_0<false>>},
    {DType::kQ4_0_R16, DType::kQ4_0, sizeof(BlockQ4_0x2),
     move_block<BlockQ4_0x2, Q4_0Rows16, true, move_nibbles<true, BlockQ4_0x2, Q4_0Rows16>>,
     move_block<BlockQ4_0x2, Q4_0Rows16, false, move_nibbles<false, BlockQ4_0x2, Q4_0Rows16>>},
    {DType::kMXFP4_R16, DType::kMXFP4, sizeof(BlockMXFP4x2),
     move_block<BlockMXFP4x2, MXFP4Rows16, true, move_nibbles<true, BlockMXFP4x2, MXFP4Rows16>>,
     move_block<BlockMXFP4x2, MXFP4Rows16, false, move_nibbles<false, BlockMXFP4x2, MXFP4Rows16>>},
};

const Rows16Layout& layout_row(DType layout) {
  for (const Rows16Layout& l : kRows16Layouts) {
    if (l.layout == layout) return l;
  }
  STRATA_CHECK(false, "rows16: not a rows-in-lanes layout");
  return kRows16Layouts[0];
}

// Row r (of k elements) from its base layout at `row` into its group at `group` (pack), or from
// the group back to `row` (unpack); `group` is the group's first super-block.
void pack_row(const Rows16Layout& l, const uint8_t* row, uint8_t* group, int64_t r, int64_t k) {
  for (int64_t b = 0; b < k / dtype_block_size(l.layout); ++b) {
    l.pack(row + b * l.block_bytes, group + b * kLaneRows * l.block_bytes, r % kLaneRows);
  }
}
void unpack_row(const Rows16Layout& l, const uint8_t* group, uint8_t* row, int64_t r, int64_t k) {
  for (int64_t b = 0; b < k / dtype_block_size(l.layout); ++b) {
    l.unpack(group + b * kLaneRows * l.block_bytes, row + b * l.block_bytes, r % kLaneRows);
  }
}

}  // namespace

std::optional<DType> rows16_layout(DType base) {
  for (const Rows16Layout& l : kRows16Layouts) {
    if (l.base == base) return l.layout;
  }
  return std::nullopt;
}

void rows16_pack(DType layout, const void* src, void* dst, int64_t n, int64_t k) {
  STRATA_CHECK(n >= 0 && k >= 0 && k % dtype_block_size(layout) == 0, "rows16_pack: bad shape");
  const Rows16Layout& l = layout_row(layout);
  const size_t row_bytes = dtype_row_bytes(layout, k);
  const int64_t full = n / kLaneRows * kLaneRows;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < full; ++r) {
    pack_row(l, in + r * row_bytes, out + r / kLaneRows * kLaneRows * row_bytes, r, k);
  }
  std::memcpy(out + full * row_bytes, in + full * row_bytes,
              static_cast<size_t>(n - full) * row_bytes);
}

void rows16_unpack_group(DType layout, const void* matrix, int64_t g, int64_t k, void* dst) {
  for (int64_t lane = 0; lane < kLaneRows; ++lane) {
    rows16_unpack_row(layout, matrix, (g + 1) * kLaneRows, g * kLaneRows + lane, k,
                      static_cast<uint8_t*>(dst) + lane * dtype_row_bytes(layout, k));
  }
}

void rows16_unpack_row(DType layout, const void* matrix, int64_t n, int64_t r, int64_t k,
                       void* dst) {
  STRATA_CHECK(r >= 0 && r < n && k % dtype_block_size(layout) == 0, "rows16_unpack_row: bad row");
  const size_t row_bytes = dtype_row_bytes(layout, k);
  const auto* in = static_cast<const uint8_t*>(matrix);
  if (r >= n / kLaneRows * kLaneRows) {
    std::memcpy(dst, in + r * row_bytes, row_bytes);  // the tail keeps the base layout
    return;
  }
  unpack_row(layout_row(layout), in + r / kLaneRows * kLaneRows * row_bytes,
             static_cast<uint8_t*>(dst), r, k);
}

}  // namespace strata
