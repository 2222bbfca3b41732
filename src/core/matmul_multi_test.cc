// matmul_multi against one matmul per part: the same bits, whatever the dtypes mixed in one pass,
// the batch or the thread count; and the pass structure (one barrier at batch 1).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "core/kernel_test_util.h"
#include "core/matmul.h"
#include "core/quant.h"

namespace strata {
namespace {

using testing::isas;
using testing::IsaScope;
using testing::random_floats;
using testing::same_bits;

// A multiple of every block size (256 for the K-quants), and an odd number of 32-blocks' pairs.
constexpr int64_t kK = 1280;

struct Matrix {
  Matrix(DType t, int64_t n, uint64_t seed) : dtype(t), n(n), row_bytes(dtype_row_bytes(t, kK)) {
    const std::vector<float> src = random_floats(static_cast<size_t>(n * kK), seed);
    bytes.resize(row_bytes * static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) quantize_row(t, &src[r * kK], &bytes[r * row_bytes], kK);
  }
  DType dtype;
  int64_t n;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
};

constexpr float kUnwritten = -1234.5f;

// Outputs with a stride of n + 1, the last row of each column left as kUnwritten.
std::vector<float> output(int64_t n, int64_t m) {
  return std::vector<float>(static_cast<size_t>((n + 1) * m), kUnwritten);
}

// One output per matrix (output(n, m)) in *y, and the parts that write them.
std::vector<MatmulPart> parts_writing(const std::vector<Matrix>& w, int64_t m,
                                      std::vector<std::vector<float>>* y) {
  y->clear();
  for (const Matrix& mat : w) y->push_back(output(mat.n, m));
  std::vector<MatmulPart> parts;
  for (size_t i = 0; i < w.size(); ++i) {
    parts.push_back({w[i].dtype, w[i].bytes.data(), w[i].row_bytes, w[i].n, (*y)[i].data(),
                     static_cast<size_t>(w[i].n) + 1});
  }
  return parts;
}

// Groups as a layer has them (q/k/v of one dtype; a K-quant mix, whose kernels share one
// activation format) and groups whose kernels read different activation formats (or F32).
const std::vector<std::vector<DType>> kGroups = {
    {DType::kQ8_0, DType::kQ8_0, DType::kQ8_0},
    {DType::kQ4_K, DType::kQ6_K, DType::kQ5_K},
    {DType::kQ8_0, DType::kQ4_0, DType::kF16, DType::kQ4_K},
    {DType::kF32, DType::kBF16},
    {DType::kIQ4_NL, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K},
};

// Rows per part: enough bytes for three tasks of the split, and counts that put the task
// boundaries inside parts, off the kernels' row groups.
constexpr int64_t kRows[] = {131, 64, 203, 37};

TEST(MatmulMulti, SameBitsAsOneMatmulPerPart) {
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  constexpr int64_t kMaxM = 40;  // 40 columns: the quantisation pass is split too
  const std::vector<float> x = random_floats(static_cast<size_t>(kK * kMaxM), 21);
  for (Isa isa : isas()) {
    IsaScope guard(isa);
    for (const std::vector<DType>& group : kGroups) {
      std::vector<Matrix> w;
      for (size_t i = 0; i < group.size(); ++i) w.emplace_back(group[i], kRows[i], 30 + i);
      for (const int64_t m : {int64_t{1}, int64_t{7}, kMaxM}) {
        // One matmul per part, on one thread.
        std::vector<std::vector<float>> alone;
        for (const Matrix& mat : w) {
          alone.push_back(output(mat.n, m));
          matmul(pools[0], mat.dtype, mat.bytes.data(), mat.row_bytes, mat.n, kK, x.data(), kK, m,
                 alone.back().data(), static_cast<size_t>(mat.n) + 1);
        }
        for (ThreadPool& pool : pools) {
          std::vector<std::vector<float>> y;
          const std::vector<MatmulPart> parts = parts_writing(w, m, &y);
          matmul_multi(pool, parts, kK, x.data(), kK, m);
          for (size_t p = 0; p < w.size(); ++p) {
            for (size_t i = 0; i < y[p].size(); ++i) {
              ASSERT_TRUE(same_bits(y[p][i], alone[p][i]))
                  << isa_name(isa) << " part " << p << " (" << dtype_name(w[p].dtype) << ") m " << m
                  << " threads " << pool.size() << " element " << i << ": " << y[p][i] << " vs "
                  << alone[p][i];
            }
          }
        }
      }
    }
  }
}

// A thread done with its share takes rows from the back of another's: every row is computed once,
// with the same bits. Three threads on fewer cores, or one descheduled, make the taking happen;
// the test repeats until it has seen some.
TEST(MatmulMulti, RowsTakenFromAnotherThreadHaveTheSameBits) {
  const std::vector<DType> dtypes = {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0};
  std::vector<Matrix> w;
  for (size_t i = 0; i < dtypes.size(); ++i) w.emplace_back(dtypes[i], 4 * kRows[i], 60 + i);
  const std::vector<float> x = random_floats(static_cast<size_t>(kK), 61);
  ThreadPool one(1), three(3);
  std::vector<std::vector<float>> alone;
  for (const Matrix& mat : w) {
    alone.push_back(output(mat.n, 1));
    matmul(one, mat.dtype, mat.bytes.data(), mat.row_bytes, mat.n, kK, x.data(), kK, 1,
           alone.back().data(), static_cast<size_t>(mat.n) + 1);
  }
  const uint64_t before = matmul_claims_stolen();
  int runs = 0;
  for (; runs < 2000 && (runs < 20 || matmul_claims_stolen() == before); ++runs) {
    std::vector<std::vector<float>> y;
    const std::vector<MatmulPart> parts = parts_writing(w, 1, &y);
    matmul_multi(three, parts, kK, x.data(), kK, 1);
    for (size_t p = 0; p < w.size(); ++p) {
      for (size_t i = 0; i < y[p].size(); ++i) {
        ASSERT_TRUE(same_bits(y[p][i], alone[p][i]))
            << "run " << runs << " part " << p << " element " << i << ": " << y[p][i] << " vs "
            << alone[p][i];
      }
    }
  }
  EXPECT_GT(matmul_claims_stolen(), before)
      << "no thread took another's rows in " << runs << " runs";
}

// More parts and more threads than a decode step's lists hold in place (8 parts, 16 tasks: past
// those they go to the heap): the same bits as one matmul per part on one thread.
TEST(MatmulMulti, MorePartsAndTasksThanInPlaceGiveTheSameBits) {
  std::vector<Matrix> w;
  for (int64_t i = 0; i < 10; ++i) w.emplace_back(DType::kQ8_0, 101 + 7 * i, 90 + i);
  const std::vector<float> x = random_floats(static_cast<size_t>(kK), 91);
  ThreadPool one(1);
  ThreadPool many(20);
  std::vector<std::vector<float>> y;
  const std::vector<MatmulPart> parts = parts_writing(w, 1, &y);
  size_t bytes = 0;
  for (const Matrix& m : w) bytes += m.bytes.size();
  ASSERT_GE(bytes, size_t{20} * 64 * 1024) << "enough bytes for a task on each of 20 threads";
  matmul_multi(many, parts, kK, x.data(), kK, 1);
  for (size_t p = 0; p < w.size(); ++p) {
    std::vector<float> expect = output(w[p].n, 1);
    matmul(one, w[p].dtype, w[p].bytes.data(), w[p].row_bytes, w[p].n, kK, x.data(), kK, 1,
           expect.data(), static_cast<size_t>(w[p].n) + 1);
    for (size_t i = 0; i < expect.size(); ++i) {
      ASSERT_TRUE(same_bits(y[p][i], expect[i])) << "part " << p << " element " << i;
    }
  }
}

// The columns callback writes X in the quantisation pass: each column once, before any part
// reads it.
TEST(MatmulMulti, ColumnsAreWrittenOnceBeforeTheyAreRead) {
  constexpr int64_t m = 40;
  const std::vector<float> src = random_floats(static_cast<size_t>(kK * m), 41);
  const std::vector<DType> dtypes = {DType::kQ8_0, DType::kQ4_K, DType::kF32};
  std::vector<Matrix> w;
  for (size_t i = 0; i < dtypes.size(); ++i) w.emplace_back(dtypes[i], kRows[i], 50 + i);
  std::vector<float> doubled(src.size());
  for (size_t i = 0; i < src.size(); ++i) doubled[i] = 2.0f * src[i];
  ThreadPool one(1);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> x(src.size(), 0.0f);
    std::vector<int> calls(m, 0);
    const MatmulColumnsFn columns = [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        ++calls[j];
        for (int64_t i = 0; i < kK; ++i) x[j * kK + i] = 2.0f * src[j * kK + i];
      }
    };
    std::vector<std::vector<float>> y;
    const std::vector<MatmulPart> parts = parts_writing(w, m, &y);
    matmul_multi(pool, parts, kK, x.data(), kK, m, &columns);
    for (int64_t j = 0; j < m; ++j) ASSERT_EQ(calls[j], 1) << "column " << j;
    for (size_t p = 0; p < w.size(); ++p) {
      std::vector<float> expect = output(w[p].n, m);
      matmul(one, w[p].dtype, w[p].bytes.data(), w[p].row_bytes, w[p].n, kK, doubled.data(), kK, m,
             expect.data(), static_cast<size_t>(w[p].n) + 1);
      for (size_t i = 0; i < expect.size(); ++i) {
        ASSERT_TRUE(same_bits(y[p][i], expect[i]))
            << dtype_name(w[p].dtype) << " threads " << threads << " element " << i;
      }
    }
  }
}

// At batch 1 the activations are quantised on the caller and all parts' rows are one split:
// one barrier for the whole group.
TEST(MatmulMulti, OneBarrierAtBatchOne) {
  std::vector<Matrix> w;
  for (size_t i = 0; i < 3; ++i) w.emplace_back(DType::kQ8_0, kRows[i], 60 + i);
  const std::vector<float> x = random_floats(static_cast<size_t>(kK), 61);
  std::vector<std::vector<float>> y;
  const std::vector<MatmulPart> parts = parts_writing(w, 1, &y);
  ThreadPool pool(2);
  const ThreadPool::Counts before = pool.counts();
  matmul_multi(pool, parts, kK, x.data(), kK, 1);
  const ThreadPool::Counts after = pool.counts();
  EXPECT_EQ(after.barriers - before.barriers, 1u);
}

TEST(MatmulMulti, EmptyPartsAndColumnsOnly) {
  ThreadPool pool(2);
  const float w = 1.0f;
  float y = 7.0f;
  std::vector<float> x(3, 0.0f);
  const MatmulPart empty{DType::kF32, &w, 4, 0, &y, 1};
  std::atomic<int64_t> written{0};
  const MatmulColumnsFn columns = [&](int64_t j0, int64_t j1) { written += j1 - j0; };
  // No rows: the columns are still written (they are the output of the op fused in).
  matmul_multi(pool, {&empty, 1}, 1, x.data(), 1, 3, &columns);
  EXPECT_EQ(written.load(), 3);
  EXPECT_EQ(y, 7.0f);
  matmul_multi(pool, {}, 1, x.data(), 1, 3);
}

}  // namespace
}  // namespace strata
