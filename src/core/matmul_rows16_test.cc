// Rows in lanes (core/rows16.h): the layout rearranges each full group's bytes (q6_K's quants bit
// by bit), and every matmul over it gives the base type's bits at every level, batch size and
// thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype_traits.h"
#include "core/kernel_test_util.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "core/quant.h"
#include "core/rows16.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

using testing::bitwise_equal;
using testing::isas;
using testing::IsaScope;
using testing::random_floats;

// n rows of k in the base type (every 32 elements scaled by another power of two, so that the
// scales and mins span their range), and the same matrix in the layout.
struct Packed {
  Packed(DType layout, int64_t n, int64_t k, uint64_t seed)
      : layout(layout), base(dtype_info(layout).base), n(n), k(k) {
    row_bytes = dtype_row_bytes(base, k);
    rows.resize(row_bytes * static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> x = random_floats(static_cast<size_t>(k), seed + static_cast<uint64_t>(r));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] *= std::ldexp(1.0f, static_cast<int>(i / 32 % 7) - 3);
      quantize_row(base, x.data(), rows.data() + r * row_bytes, k);
    }
    packed.resize(rows.size());
    rows16_pack(layout, rows.data(), packed.data(), n, k);
  }
  DType layout, base;
  int64_t n, k;
  size_t row_bytes;
  std::vector<uint8_t> rows, packed;
};

constexpr DType kLayouts[] = {DType::kQ2_K_R16, DType::kQ3_K_R16, DType::kQ4_K_R16,
                              DType::kQ5_K_R16, DType::kQ6_K_R16, DType::kIQ4_XS_R16,
                              DType::kQ8_0_R16, DType::kQ4_0_R16, DType::kMXFP4_R16};

TEST(Rows16, PackingRearrangesEachFullGroupAndUnpackingRestoresIt) {
  for (DType layout : kLayouts) {
    SCOPED_TRACE(dtype_name(layout));
    const Packed w(layout, 37, 512, 1);
    EXPECT_EQ(dtype_row_bytes(w.layout, w.k), w.row_bytes);
    EXPECT_EQ(dtype_name(w.layout), std::string(dtype_name(w.base)) + "_r16");
    const size_t group_bytes = kLaneRows * w.row_bytes;
    std::vector<uint8_t> rows(group_bytes);
    for (int64_t g = 0; g < 2; ++g) {
      const uint8_t* in = w.rows.data() + g * group_bytes;
      const uint8_t* out = w.packed.data() + g * group_bytes;
      EXPECT_NE(std::memcmp(in, out, group_bytes), 0) << "group " << g << " was not rearranged";
      std::vector<uint8_t> a(in, in + group_bytes), b(out, out + group_bytes);
      if (layout == DType::kQ8_0_R16) {  // its quants are stored + 128
        for (size_t at = 0; at < b.size(); at += sizeof(Q8_0Rows16)) {
          for (size_t i = offsetof(Q8_0Rows16, qs); i < sizeof(Q8_0Rows16); ++i) b[at + i] ^= 0x80;
        }
      }
      const auto bits = [](const std::vector<uint8_t>& v) {
        int64_t n = 0;
        for (uint8_t byte : v) n += std::popcount(byte);
        return n;
      };
      EXPECT_EQ(bits(a), bits(b)) << "group " << g << " is not a rearrangement of its rows' bits";
      if (layout == DType::kQ4_K_R16 || layout == DType::kQ8_0_R16 || layout == DType::kQ4_0_R16 ||
          layout == DType::kMXFP4_R16) {  // q6_K's bit by bit
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << "group " << g << " is not a permutation of its rows' bytes";
      }
      rows16_unpack_group(w.layout, w.packed.data(), g, w.k, rows.data());
      EXPECT_EQ(std::memcmp(rows.data(), in, group_bytes), 0) << "group " << g;
    }
    // The tail (rows 32..36) keeps the base layout.
    EXPECT_EQ(std::memcmp(w.packed.data() + 2 * group_bytes, w.rows.data() + 2 * group_bytes,
                          5 * w.row_bytes),
              0);
  }
}

// Rows cut at a group boundary pack as the whole does (the loader packs large tensors in pieces
// on several threads).
TEST(Rows16, PiecesCutAtGroupsPackAsTheWhole) {
  for (DType layout : kLayouts) {
    const Packed w(layout, 53, 256, 5);
    std::vector<uint8_t> pieces(w.rows.size());
    for (int64_t r0 : {0, 32}) {
      const int64_t r1 = r0 == 0 ? 32 : w.n;
      const size_t at = static_cast<size_t>(r0) * w.row_bytes;
      rows16_pack(layout, w.rows.data() + at, pieces.data() + at, r1 - r0, w.k);
    }
    EXPECT_EQ(pieces, w.packed) << dtype_name(layout);
  }
}

// get_rows (a tied embedding in a layout) reads every row back, groups and tail: the base
// type's floats.
TEST(Rows16, GetRowsReadsEveryRowBack) {
  ThreadPool pool(2);
  for (DType layout : kLayouts) {
    const Packed w(layout, 37, 512, 3);
    std::vector<int32_t> ids(static_cast<size_t>(w.n));
    for (int32_t i = 0; i < static_cast<int32_t>(w.n); ++i)
      ids[static_cast<size_t>(i)] = (i * 7) % 37;
    const auto rows = [&](bool packed) {
      std::vector<float> y(static_cast<size_t>(w.k * w.n));
      get_rows(pool, packed ? w.layout : w.base, (packed ? w.packed : w.rows).data(), w.row_bytes,
               w.k, ids.data(), w.n, y.data(), static_cast<size_t>(w.k), w.n);
      return y;
    };
    EXPECT_TRUE(bitwise_equal(rows(true), rows(false))) << dtype_name(layout);
  }
}

// A layout whose arrangement changes takes a new id, and its old id stays unknown: a peer built
// before the change offers the old id, and must be sent the base type instead.
TEST(Rows16, TheRetiredQ6KLayoutIdIsNoType) {
  EXPECT_EQ(dtype_info(65u), nullptr);
  EXPECT_NE(static_cast<uint32_t>(DType::kQ6_K_R16), 65u);
}

// Each id's arrangement, pinned: a group of fixed bytes, packed, hashed. A change of the
// arrangement fails here; it needs a new id (TheRetiredQ6KLayoutIdIsNoType), not a new hash.
TEST(Rows16, EachLayoutsArrangementIsPinnedToItsId) {
  const auto packed_hash = [](DType layout) {
    const int64_t k = 512;
    std::vector<uint8_t> rows(kLaneRows * dtype_row_bytes(layout, k)), out(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(i * 37 + 11);
    rows16_pack(layout, rows.data(), out.data(), kLaneRows, k);
    uint64_t h = 14695981039346656037ull;  // FNV-1a
    for (uint8_t b : out) h = (h ^ b) * 1099511628211ull;
    return h;
  };
  EXPECT_EQ(packed_hash(DType::kQ4_K_R16), 10283594826497276133ull)
      << "id " << int(DType::kQ4_K_R16);
  EXPECT_EQ(packed_hash(DType::kQ6_K_R16), 1967015771401370229ull)
      << "id " << int(DType::kQ6_K_R16);
  EXPECT_EQ(packed_hash(DType::kIQ4_XS_R16), 13220647364588002725ull)
      << "id " << int(DType::kIQ4_XS_R16);
  EXPECT_EQ(packed_hash(DType::kQ5_K_R16), 3102493628285152357ull)
      << "id " << int(DType::kQ5_K_R16);
  EXPECT_EQ(packed_hash(DType::kQ3_K_R16), 5620703163793791593ull)
      << "id " << int(DType::kQ3_K_R16);
  EXPECT_EQ(packed_hash(DType::kQ2_K_R16), 3498256280229659453ull)
      << "id " << int(DType::kQ2_K_R16);
  EXPECT_EQ(packed_hash(DType::kQ8_0_R16), 14897692301774940773ull)
      << "id " << int(DType::kQ8_0_R16);
  EXPECT_EQ(packed_hash(DType::kQ4_0_R16), 17605895946961733093ull)
      << "id " << int(DType::kQ4_0_R16);
  EXPECT_EQ(packed_hash(DType::kMXFP4_R16), 18010545021450986821ull)
      << "id " << int(DType::kMXFP4_R16);
}

TEST(Rows16, LayoutsAreNeverFileTypesOrRowConversions) {
  for (DType layout : kLayouts) {
    const DType base = dtype_info(layout).base;
    EXPECT_TRUE(dtype_is_layout(layout));
    EXPECT_FALSE(dtype_is_layout(base));
    EXPECT_EQ(rows16_layout(base), layout);
    EXPECT_EQ(dtype_from_name(dtype_name(layout)), std::nullopt);
    EXPECT_FALSE(dtype_can_convert(layout));
    // Offered by a device only where the layout has kernels of its own: Q4_K, Q5_K, Q6_K, Q8_0
    // and IQ4_XS's from AVX2, the others' from AVX-512.
    const bool avx2 = layout == DType::kQ4_K_R16 || layout == DType::kQ5_K_R16 ||
                      layout == DType::kQ6_K_R16 || layout == DType::kQ8_0_R16 ||
                      layout == DType::kIQ4_XS_R16;
    EXPECT_FALSE(dtype_layout_pays(layout, Isa::kScalar));
    EXPECT_EQ(dtype_layout_pays(layout, Isa::kAvx2), avx2);
    EXPECT_EQ(dtype_layout_pays(layout, Isa::kAvxVnni), avx2);
    EXPECT_TRUE(dtype_layout_pays(layout, Isa::kAvx512));
  }
  EXPECT_EQ(dtype_info(DType::kQ4_K_R16).base, DType::kQ4_K);
  EXPECT_EQ(dtype_info(DType::kQ6_K_R16).base, DType::kQ6_K);
  EXPECT_EQ(dtype_info(DType::kIQ4_XS_R16).base, DType::kIQ4_XS);
  EXPECT_EQ(dtype_info(DType::kQ5_K_R16).base, DType::kQ5_K);
  EXPECT_EQ(dtype_info(DType::kQ3_K_R16).base, DType::kQ3_K);
  EXPECT_EQ(dtype_info(DType::kQ2_K_R16).base, DType::kQ2_K);
  EXPECT_EQ(dtype_info(DType::kQ8_0_R16).base, DType::kQ8_0);
  EXPECT_EQ(dtype_info(DType::kQ4_0_R16).base, DType::kQ4_0);
  EXPECT_EQ(dtype_info(DType::kMXFP4_R16).base, DType::kMXFP4);
  EXPECT_EQ(rows16_layout(DType::kQ4_1), std::nullopt);
  EXPECT_EQ(dtype_names_with_kernels().find("r16"), std::string::npos);
}

// y = W x through matmul, for the base rows or the packed ones; strides wider than the shapes.
std::vector<float> product(ThreadPool& pool, const Packed& w, bool packed,
                           const std::vector<float>& x, int64_t m) {
  const size_t y_stride = static_cast<size_t>(w.n) + 1;
  std::vector<float> y(y_stride * static_cast<size_t>(m), -1234.5f);
  matmul(pool, packed ? w.layout : w.base, packed ? w.packed.data() : w.rows.data(), w.row_bytes,
         w.n, w.k, x.data(), static_cast<size_t>(w.k) + 3, m, y.data(), y_stride);
  return y;
}

TEST(Rows16, MatmulHasTheBaseTypesBitsAtEveryLevelBatchAndThreadCount) {
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  // n: one group, groups and a tail, a tail alone, enough groups to split over threads; k: for
  // the layouts of pairs of blocks also gpt-oss's width (45 pairs) and a single pair.
  struct Shape {
    int64_t n, k;
  };
  for (DType layout : kLayouts) {
    std::vector<Shape> shapes = {{16, 256}, {37, 2048}, {5, 512}, {200, 1024}};
    if (dtype_block_size(layout) < kQKK) shapes.insert(shapes.end(), {{37, 2880}, {18, 64}});
    for (const Shape s : shapes) {
      const Packed w(layout, s.n, s.k, static_cast<uint64_t>(s.n * s.k));
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 17}) {
        const std::vector<float> x =
            random_floats(static_cast<size_t>((s.k + 3) * m), static_cast<uint64_t>(m));
        for (Isa isa : isas()) {
          IsaScope scope(isa);
          const std::vector<float> want = product(pools[0], w, false, x, m);
          for (ThreadPool& pool : pools) {
            EXPECT_TRUE(bitwise_equal(product(pool, w, true, x, m), want))
                << dtype_name(layout) << " n " << s.n << " k " << s.k << " m " << m << " "
                << isa_name(isa) << " threads " << pool.size();
          }
        }
      }
    }
  }
}

// w's rows, edited after its construction, packed again and multiplied at every level, with
// and without the layout (one column to a count that prepares the layout's pairs): the same
// bits.
void expect_repacked_rows_give_the_base_bits(Packed& w, uint64_t seed) {
  ThreadPool pool(2);
  rows16_pack(w.layout, w.rows.data(), w.packed.data(), w.n, w.k);
  for (int64_t m : {1, 4, 6, 17}) {
    const std::vector<float> x = random_floats(static_cast<size_t>((w.k + 3) * m), seed);
    for (Isa isa : isas()) {
      IsaScope scope(isa);
      EXPECT_TRUE(bitwise_equal(product(pool, w, true, x, m), product(pool, w, false, x, m)))
          << dtype_name(w.layout) << " m " << m << " " << isa_name(isa);
    }
  }
}

// A file's Q8_0 quants span -128..127 (the quantiser makes -127..127 only): stored + 128, -128
// is the layout's byte 0, and the rows still give q8_0's bits.
TEST(Rows16, Q8_0WithTheQuantsOnlyAFileHoldsHasTheBaseTypesBits) {
  Packed w(DType::kQ8_0_R16, 35, 1024, 31);
  std::mt19937 rng(32);
  auto* blocks = reinterpret_cast<BlockQ8_0*>(w.rows.data());
  for (size_t i = 0; i < w.rows.size() / sizeof(BlockQ8_0); ++i) {
    for (int8_t& q : blocks[i].qs) q = static_cast<int8_t>(i % 3 == 0 ? -128 : rng());
  }
  expect_repacked_rows_give_the_base_bits(w, 33);
}

// Every byte string is an MXFP4 block: random codes and exponents (up to 2^72, so that no sum
// overflows; rows of the subnormal scales of e < 2) in the layout give mxfp4's bits.
TEST(Rows16, MXFP4OfAnyBytesHasTheBaseTypesBits) {
  Packed w(DType::kMXFP4_R16, 35, 1024, 34);
  std::mt19937 rng(35);
  auto* blocks = reinterpret_cast<BlockMXFP4*>(w.rows.data());
  for (size_t i = 0; i < w.rows.size() / sizeof(BlockMXFP4); ++i) {
    // Every fourth row all of the smallest scales, so that theirs are what the row sums.
    const bool tiny = i / static_cast<size_t>(w.k / kQK_MXFP4) % 4 == 0;
    blocks[i].e = static_cast<uint8_t>(tiny ? i % 3 : rng() % 201);
    for (uint8_t& q : blocks[i].qs) q = static_cast<uint8_t>(rng());
  }
  expect_repacked_rows_give_the_base_bits(w, 36);
}

TEST(Rows16, MatmulMultiAndTheExpertMatmulHaveTheBaseTypesBits) {
  const int64_t k = 512, n_expert = 3, n = 48;
  // Parts of both layouts in one pass (a layer's q4_K q and q6_K v); experts of either.
  const Packed a(DType::kQ4_K_R16, 40, k, 7), b(DType::kQ6_K_R16, 32, k, 8);
  for (DType layout : kLayouts) {
    SCOPED_TRACE(dtype_name(layout));
    // Experts: n_expert matrices of n rows, each packed on its own.
    const Packed experts(layout, n * n_expert, k, 9);
    std::vector<uint8_t> expert_packed(experts.rows.size());
    const size_t expert_bytes = experts.row_bytes * static_cast<size_t>(n);
    for (int64_t e = 0; e < n_expert; ++e) {
      rows16_pack(experts.layout, experts.rows.data() + e * expert_bytes,
                  expert_packed.data() + e * expert_bytes, n, k);
    }
    const int64_t n_used = 2;
    // 33 tokens: about 22 to each expert, enough to prepare a pair layout's group once.
    for (int64_t tokens : {1, 4, 9, 33}) {
      const std::vector<float> x = random_floats(static_cast<size_t>(k * tokens), 11);
      std::vector<int32_t> ids(static_cast<size_t>(n_used * tokens));
      for (size_t i = 0; i < ids.size(); ++i)
        ids[i] = static_cast<int32_t>((i * 5 + i / 3) % n_expert);
      for (Isa isa : isas()) {
        IsaScope scope(isa);
        for (int threads : {1, 2}) {
          ThreadPool pool(threads);
          const auto multi = [&](bool packed) {
            std::vector<float> ya(static_cast<size_t>(a.n * tokens)),
                yb(static_cast<size_t>(b.n * tokens));
            const MatmulPart parts[] = {
                {packed ? a.layout : a.base, (packed ? a.packed : a.rows).data(), a.row_bytes, a.n,
                 ya.data(), static_cast<size_t>(a.n)},
                {packed ? b.layout : b.base, (packed ? b.packed : b.rows).data(), b.row_bytes, b.n,
                 yb.data(), static_cast<size_t>(b.n)}};
            matmul_multi(pool, parts, k, x.data(), static_cast<size_t>(k), tokens);
            ya.insert(ya.end(), yb.begin(), yb.end());
            return ya;
          };
          EXPECT_TRUE(bitwise_equal(multi(true), multi(false)))
              << "matmul_multi, tokens " << tokens << " " << isa_name(isa) << " threads "
              << threads;
          const auto by_expert = [&](bool packed) {
            std::vector<float> y(static_cast<size_t>(n * n_used * tokens));
            MatmulIdArgs args{packed ? experts.layout : experts.base,
                              (packed ? expert_packed : experts.rows).data(),
                              experts.row_bytes,
                              expert_bytes,
                              k,
                              n,
                              n_expert,
                              x.data(),
                              0,
                              static_cast<size_t>(k),
                              1,
                              ids.data(),
                              n_used,
                              tokens,
                              y.data(),
                              static_cast<size_t>(n),
                              static_cast<size_t>(n * n_used)};
            matmul_id(pool, args);
            return y;
          };
          EXPECT_TRUE(bitwise_equal(by_expert(true), by_expert(false)))
              << "matmul_id, tokens " << tokens << " " << isa_name(isa) << " threads " << threads;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
