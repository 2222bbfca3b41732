// KvCells: where sequences' cells go, and that the bookkeeping stays whole under any mix of
// appends, truncations, copies, removals and copies on write.
#include "engine/kv_cells.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace strata {
namespace kv_cells_test {

// Stretches of consecutive cells in a sequence's list.
int runs(const std::vector<int32_t>& cells) {
  int n = 0;
  for (size_t i = 0; i < cells.size(); ++i) n += i == 0 || cells[i] != cells[i - 1] + 1;
  return n;
}

// Every count agrees with the sequences' lists.
void expect_consistent(const KvCells& kv) {
  std::map<int32_t, int32_t> held;
  for (int32_t s = 0; s < kv.n_seq(); ++s) {
    ASSERT_EQ(kv.cells(s).size(), kv.tokens(s).size());
    for (int32_t c : kv.cells(s)) {
      ASSERT_GE(c, 0);
      ASSERT_LT(c, kv.n_cells());
      ++held[c];
    }
  }
  int64_t used = 0;
  for (int64_t c = 0; c < kv.n_cells(); ++c) {
    const auto it = held.find(static_cast<int32_t>(c));
    const int32_t want = it == held.end() ? 0 : it->second;
    ASSERT_EQ(kv.refs(static_cast<int32_t>(c)), want) << "cell " << c;
    used += want > 0;
  }
  EXPECT_EQ(kv.n_used(), used);
  EXPECT_EQ(kv.n_free(), kv.n_cells() - used);
}

TEST(KvCells, OneSequenceTakesTheCellsInOrder) {
  KvCells kv(100, 1);
  for (int32_t p = 0; p < 100; ++p) ASSERT_EQ(*kv.append(0, p, p), p);
  const Result<int32_t> full = kv.append(0, 100, 0);
  ASSERT_FALSE(full.is_ok());
  EXPECT_NE(full.status().message().find("the KV cache is full (100 cells)"), std::string::npos)
      << full.status().message();
  kv.seq_truncate(0, 40);
  EXPECT_EQ(kv.n_free(), 60);
  for (int32_t p = 40; p < 100; ++p) ASSERT_EQ(*kv.append(0, p, p), p);
  expect_consistent(kv);
}

// Sequences decoding in turn each keep their cells side by side, where cells taken in turn
// from one free list would interleave them cell by cell.
TEST(KvCells, SequencesDecodingInTurnKeepTheirCellsTogether) {
  constexpr int32_t kSeqs = 8, kCells = 4096;
  KvCells kv(kCells, kSeqs);
  // Prompts of different lengths, one after the other, then decoding in turn until full.
  for (int32_t s = 0; s < kSeqs; ++s) {
    for (int32_t p = 0; p < 16 * (s + 1); ++p) ASSERT_TRUE(kv.append(s, p, p).is_ok());
  }
  while (kv.n_free() > 0) {
    for (int32_t s = 0; s < kSeqs && kv.n_free() > 0; ++s) {
      ASSERT_TRUE(kv.append(s, kv.seq_len(s), 0).is_ok());
    }
  }
  expect_consistent(kv);
  int total = 0;
  for (int32_t s = 0; s < kSeqs; ++s) total += runs(kv.cells(s));
  // Each sequence starts in the middle of the largest free run and splits it again when it
  // meets the next sequence's cells: a handful of stretches each, where interleaving would
  // give about kCells / kSeqs.
  EXPECT_LE(total, 4 * kSeqs) << "stretches over all sequences";
}

TEST(KvCells, ASequenceThatCannotGrowLeavesTheOthersRoom) {
  KvCells kv(64, 2);
  for (int32_t p = 0; p < 4; ++p) ASSERT_EQ(*kv.append(0, p, 0), p);
  // Sequence 1 starts in the middle of the run after sequence 0's last cell.
  EXPECT_EQ(*kv.append(1, 0, 0), 4 + 60 / 2);
  // Sequence 0 grows in place.
  EXPECT_EQ(*kv.append(0, 4, 0), 4);
  // A copy shares the cells; the copy's next cell goes after them, where it is free.
  kv.seq_copy(0, 1, 5);
  EXPECT_EQ(kv.refs(4), 2);
  EXPECT_EQ(*kv.append(1, 5, 0), 5);
  // Sequence 0 cannot grow in place now: the largest run, after no sequence's last cell.
  EXPECT_EQ(*kv.append(0, 5, 0), 6 + (64 - 6) / 2);
  expect_consistent(kv);
}

TEST(KvCells, UnshareGivesTheSequenceAFreeCellOfItsOwn) {
  KvCells kv(16, 2);
  for (int32_t p = 0; p < 4; ++p) ASSERT_TRUE(kv.append(0, p, p).is_ok());
  kv.seq_copy(0, 1, 4);
  const Result<std::pair<int32_t, int32_t>> moved = kv.seq_unshare(1, 2);
  ASSERT_TRUE(moved.is_ok());
  EXPECT_EQ(moved->first, 2);
  EXPECT_EQ(kv.refs(2), 1);
  EXPECT_EQ(kv.refs(moved->second), 1);
  EXPECT_EQ(kv.cells(1)[2], moved->second);
  EXPECT_EQ(kv.cells(0)[2], 2);
  expect_consistent(kv);
}

// Random operations against the invariants, and every free cell still reachable.
TEST(KvCells, RandomOperationsKeepTheBookkeepingWhole) {
  constexpr int32_t kSeqs = 5;
  for (int64_t n_cells : {1, 63, 64, 65, 300}) {
    KvCells kv(n_cells, kSeqs);
    std::mt19937 rng(static_cast<uint32_t>(n_cells));
    for (int step = 0; step < 3000; ++step) {
      const int32_t s = static_cast<int32_t>(rng() % kSeqs);
      const int32_t len = kv.seq_len(s);
      switch (rng() % 8) {
        case 0:
          kv.seq_truncate(s, len == 0 ? 0 : static_cast<int32_t>(rng() % len));
          break;
        case 1:
          kv.seq_copy(s, static_cast<int32_t>(rng() % kSeqs), len == 0 ? 0 : 1 + rng() % len);
          break;
        case 2:
          if (len > 0) {
            const auto p0 = static_cast<int32_t>(rng() % len);
            kv.seq_remove(s, p0, p0 + static_cast<int32_t>(rng() % (len - p0 + 1)));
          }
          break;
        case 3:
          if (len > 0 && kv.n_free() > 0) {
            ASSERT_TRUE(kv.seq_unshare(s, static_cast<int32_t>(rng() % len)).is_ok());
          }
          break;
        default: {
          const bool room = kv.n_free() > 0;
          const Result<int32_t> cell = kv.append(s, len, step);
          ASSERT_EQ(cell.is_ok(), room) << "step " << step;
          if (room) {
            EXPECT_EQ(kv.refs(*cell), 1);
          }
        }
      }
      if (step % 97 == 0) expect_consistent(kv);
    }
    expect_consistent(kv);
    // Whatever the history, one sequence can take every cell the others do not hold.
    for (int32_t s = 1; s < kSeqs; ++s) kv.seq_truncate(s, 0);
    while (kv.n_free() > 0) ASSERT_TRUE(kv.append(0, kv.seq_len(0), 0).is_ok());
    expect_consistent(kv);
    EXPECT_EQ(kv.n_used(), n_cells);
  }
}

}  // namespace kv_cells_test
}  // namespace strata
