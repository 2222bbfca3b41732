// matmul_id against one plain matmul per (token, slot): the expert's matrix times that pair's
// column with m = 1. The kernels are batch-invariant, so the two must agree bit for bit, for
// every dtype with kernels, instruction set, thread count, batch and scratch slice.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype_traits.h"
#include "core/kernel_test_util.h"
#include "core/matmul.h"
#include "core/quant.h"
#include "core/rng.h"

namespace strata {
namespace {

using testing::bitwise_equal;
using testing::isas;
using testing::IsaScope;
using testing::random_floats;

// Experts [k, n, n_expert] of one dtype, packed, from random rows.
struct Experts {
  DType dtype;
  int64_t k, n, n_expert;
  size_t row_bytes;
  std::vector<uint8_t> bytes;

  Experts(DType t, int64_t k_in, int64_t n_out, int64_t n_exp, uint64_t seed)
      : dtype(t), k(k_in), n(n_out), n_expert(n_exp), row_bytes(dtype_row_bytes(t, k_in)) {
    bytes.resize(row_bytes * static_cast<size_t>(n * n_expert));
    for (int64_t r = 0; r < n * n_expert; ++r) {
      const std::vector<float> row = random_floats(static_cast<size_t>(k), seed + r);
      quantize_row(t, row.data(), bytes.data() + r * row_bytes, k);
    }
  }
  size_t expert_bytes() const { return row_bytes * static_cast<size_t>(n); }
};

// A batch: x [k, x_m, tokens] with a gap after each column and each token, ids [n_used, tokens].
struct RoutedBatch {
  int64_t x_m, n_used, tokens;
  size_t x_slot, x_tok;  // strides in floats
  std::vector<float> x;
  std::vector<int32_t> ids;
};

RoutedBatch make_batch(const Experts& w, int64_t n_used, int64_t tokens, bool per_slot,
                       uint64_t seed) {
  RoutedBatch b;
  b.x_m = per_slot ? n_used : 1;
  b.n_used = n_used;
  b.tokens = tokens;
  b.x_slot = static_cast<size_t>(w.k) + 3;
  b.x_tok = b.x_slot * static_cast<size_t>(b.x_m) + 5;
  b.x = random_floats(b.x_tok * static_cast<size_t>(tokens), seed, 2.0f);
  Rng rng(seed);
  for (int64_t i = 0; i < n_used * tokens; ++i) {
    b.ids.push_back(static_cast<int32_t>(rng.next() % static_cast<uint64_t>(w.n_expert)));
  }
  return b;
}

// Y [n, n_used, tokens] with a gap of one float after each column and two after each token.
constexpr float kGap = -12345.0f;
std::vector<float> gapped_output(const Experts& w, const RoutedBatch& b) {
  const size_t y_tok = (static_cast<size_t>(w.n) + 1) * static_cast<size_t>(b.n_used) + 2;
  return std::vector<float>(y_tok * static_cast<size_t>(b.tokens), kGap);
}

MatmulIdArgs id_args(const Experts& w, const RoutedBatch& b, std::vector<float>& y,
                     size_t scratch_limit) {
  const size_t y_slot = static_cast<size_t>(w.n) + 1;
  MatmulIdArgs a;
  a.w_dtype = w.dtype;
  a.w = w.bytes.data();
  a.w_row_bytes = w.row_bytes;
  a.w_expert_bytes = w.expert_bytes();
  a.k = w.k;
  a.n = w.n;
  a.n_expert = w.n_expert;
  a.x = b.x.data();
  a.x_slot_stride = b.x_slot;
  a.x_tok_stride = b.x_tok;
  a.x_m = b.x_m;
  a.ids = b.ids.data();
  a.n_used = b.n_used;
  a.n_tokens = b.tokens;
  a.y = y.data();
  a.y_slot_stride = y_slot;
  a.y_tok_stride = y_slot * static_cast<size_t>(b.n_used) + 2;
  a.scratch_limit = scratch_limit;
  return a;
}

std::vector<float> run_matmul_id(ThreadPool& pool, const Experts& w, const RoutedBatch& b,
                                 size_t scratch_limit = 0) {
  std::vector<float> y = gapped_output(w, b);
  matmul_id(pool, id_args(w, b, y, scratch_limit));
  return y;
}

// The same layout, one matmul with m = 1 per pair on one thread.
std::vector<float> per_pair(const Experts& w, const RoutedBatch& b) {
  ThreadPool one(1);
  const size_t y_slot = static_cast<size_t>(w.n) + 1;
  const size_t y_tok = y_slot * static_cast<size_t>(b.n_used) + 2;
  std::vector<float> y(y_tok * static_cast<size_t>(b.tokens), kGap);
  for (int64_t t = 0; t < b.tokens; ++t) {
    for (int64_t s = 0; s < b.n_used; ++s) {
      const int32_t e = b.ids[static_cast<size_t>(t * b.n_used + s)];
      const float* x = b.x.data() + t * b.x_tok + (b.x_m == 1 ? 0 : s) * b.x_slot;
      matmul(one, w.dtype, w.bytes.data() + e * w.expert_bytes(), w.row_bytes, w.n, w.k, x,
             static_cast<size_t>(w.k), 1, y.data() + t * y_tok + s * y_slot,
             static_cast<size_t>(w.n));
    }
  }
  return y;
}

TEST(MatmulId, EveryDTypeIsaAndThreadCountMatchesOneMatmulPerPair) {
  for (const DTypeTraits& traits : dtype_traits_all()) {
    // Device layouts: matmul_rows16_test.cc.
    if (!dtype_info(traits.dtype).has_kernels || dtype_is_layout(traits.dtype)) continue;
    const Experts w(traits.dtype, 256, 40, 6, 100);
    for (bool per_slot : {false, true}) {
      const RoutedBatch b = make_batch(w, 3, 5, per_slot, 7);
      for (Isa isa : isas()) {
        IsaScope scope(isa);
        const std::vector<float> want = per_pair(w, b);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          EXPECT_TRUE(bitwise_equal(run_matmul_id(pool, w, b), want))
              << dtype_name(traits.dtype) << " " << isa_name(isa) << " threads " << threads
              << (per_slot ? " per slot" : " per token");
        }
      }
    }
  }
}

// Large enough for several threads' tasks and several column tiles per expert, with slots of one
// token that choose the same expert twice.
TEST(MatmulId, ManyTokensAndRepeatedExpertsOnTheMatmulDTypesOfModels) {
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kF16}) {
    const Experts w(t, 512, 96, 8, 3);
    RoutedBatch b = make_batch(w, 4, 24, t == DType::kQ6_K || t == DType::kF16, 9);
    b.ids[1] = b.ids[0];
    for (Isa isa : isas()) {
      IsaScope scope(isa);
      const std::vector<float> want = per_pair(w, b);
      ThreadPool pool(2);
      EXPECT_TRUE(bitwise_equal(run_matmul_id(pool, w, b), want))
          << dtype_name(t) << " " << isa_name(isa);
    }
  }
}

// Scratch slices cut the grouped pairs anywhere, experts too: the bits stay. Per token, an
// expert left with one column in a slice reads the token's column in place.
TEST(MatmulId, ScratchSlicesChangeNoBit) {
  const Experts w(DType::kQ8_0, 128, 24, 5, 21);
  for (bool per_slot : {false, true}) {
    const RoutedBatch b = make_batch(w, 2, 9, per_slot, 4);
    ThreadPool pool(2);
    const std::vector<float> whole = run_matmul_id(pool, w, b);
    EXPECT_TRUE(bitwise_equal(whole, per_pair(w, b)));
    const size_t pair_bytes = 136 + 24 * 4;  // about one q8_0 column of 128 and one output
    for (size_t limit : {size_t{1}, pair_bytes * 2, pair_bytes * 7}) {
      EXPECT_TRUE(bitwise_equal(run_matmul_id(pool, w, b, limit), whole))
          << limit << (per_slot ? " per slot" : " per token");
    }
  }
}

// A token's outputs are the same bits alone, in a batch, and on any thread count.
TEST(MatmulId, ATokensOutputsDoNotDependOnItsBatch) {
  const Experts w(DType::kQ4_K, 256, 64, 16, 5);
  const RoutedBatch batch = make_batch(w, 4, 12, false, 6);
  const size_t y_tok = (static_cast<size_t>(w.n) + 1) * 4 + 2;
  ThreadPool three(3), one(1);
  const std::vector<float> all = run_matmul_id(three, w, batch);
  for (int64_t t = 0; t < batch.tokens; ++t) {
    RoutedBatch alone = batch;
    alone.tokens = 1;
    alone.x.assign(batch.x.begin() + t * batch.x_tok, batch.x.begin() + (t + 1) * batch.x_tok);
    alone.ids.assign(batch.ids.begin() + t * 4, batch.ids.begin() + (t + 1) * 4);
    const std::vector<float> y = run_matmul_id(one, w, alone);
    EXPECT_EQ(std::memcmp(y.data(), all.data() + t * y_tok, y_tok * sizeof(float)), 0) << t;
  }
}

// Several matrices of the same input and experts in one call (gate and up, or three of other
// widths) give each matrix the bits of its own matmul_id, whatever the threads and slices.
TEST(MatmulId, SeveralMatricesInOneCallAreEachTheirOwnCall) {
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kF16, DType::kMXFP4}) {
    const Experts gate(t, 256, 48, 6, 11), up(t, 256, 48, 6, 12), third(t, 256, 80, 6, 13);
    for (bool per_slot : {false, true}) {
      const RoutedBatch b = make_batch(gate, 3, 7, per_slot, 14);
      for (Isa isa : isas()) {
        IsaScope scope(isa);
        ThreadPool one(1);
        const std::vector<float> want[] = {run_matmul_id(one, gate, b), run_matmul_id(one, up, b),
                                           run_matmul_id(one, third, b)};
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          for (size_t limit : {size_t{0}, size_t{1}, size_t{3000}}) {
            std::vector<float> got[] = {gapped_output(gate, b), gapped_output(up, b),
                                        gapped_output(third, b)};
            const MatmulIdArgs mats[] = {id_args(gate, b, got[0], limit),
                                         id_args(up, b, got[1], limit),
                                         id_args(third, b, got[2], limit)};
            for (size_t n : {size_t{2}, size_t{3}}) {
              for (size_t i = 0; i < n; ++i) std::fill(got[i].begin(), got[i].end(), kGap);
              matmul_id_multi(pool, std::span<const MatmulIdArgs>(mats, n));
              for (size_t i = 0; i < n; ++i) {
                EXPECT_TRUE(bitwise_equal(got[i], want[i]))
                    << dtype_name(t) << " " << isa_name(isa) << " threads " << threads << " limit "
                    << limit << " matrix " << i << " of " << n
                    << (per_slot ? " per slot" : " per token");
              }
            }
          }
        }
      }
    }
  }
}

// A producer of X (the gated activation before the down experts) writes each pair's column once,
// before any is read and before any output is written: here the outputs lie over the values it
// reads, and every scratch slicing gives the bits of X made first and then multiplied.
TEST(MatmulId, AProducerOfXMakesEachColumnOnceBeforeAnyOutputIsWritten) {
  const Experts w(DType::kQ8_0, 128, 24, 5, 31);
  const RoutedBatch b = make_batch(w, 2, 9, true, 32);
  const int64_t n_pairs = b.n_used * b.tokens;
  const auto offset = [&b](int64_t p) {
    return (p / b.n_used) * b.x_tok + (p % b.n_used) * b.x_slot;
  };
  // The producer's input: the batch's values; its output x[i] = 2 * in[i] + 1.
  RoutedBatch made = b;
  for (int64_t p = 0; p < n_pairs; ++p) {
    for (int64_t i = 0; i < w.k; ++i) made.x[offset(p) + i] = 2 * b.x[offset(p) + i] + 1;
  }
  ThreadPool one(1);
  const std::vector<float> want = run_matmul_id(one, w, made);
  const size_t pair_bytes = 136 + 24 * 4;  // about one q8_0 column of 128 and one output
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t limit : {size_t{0}, size_t{1}, pair_bytes * 2, pair_bytes * 7}) {
      // One buffer holds the producer's input and, over it, the outputs.
      std::vector<float> y = gapped_output(w, b);
      std::vector<float> in_and_y(std::max(b.x.size(), y.size()));
      std::copy(b.x.begin(), b.x.end(), in_and_y.begin());
      RoutedBatch x = b;
      std::fill(x.x.begin(), x.x.end(), std::numeric_limits<float>::quiet_NaN());
      MatmulIdArgs a = id_args(w, x, y, limit);
      a.y = in_and_y.data();
      std::vector<std::atomic<int>> made_count(static_cast<size_t>(n_pairs));
      const MatmulColumnsFn columns = [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          made_count[static_cast<size_t>(p)].fetch_add(1);
          for (int64_t i = 0; i < w.k; ++i) {
            x.x[offset(p) + i] = 2 * in_and_y[offset(p) + i] + 1;
          }
        }
      };
      matmul_id_multi(pool, {&a, 1}, &columns);
      for (int64_t p = 0; p < n_pairs; ++p) {
        EXPECT_EQ(made_count[static_cast<size_t>(p)].load(), 1)
            << "pair " << p << " limit " << limit;
      }
      // The outputs, gaps aside (those keep the producer's input).
      const size_t y_slot = static_cast<size_t>(w.n) + 1;
      const size_t y_tok = y_slot * static_cast<size_t>(b.n_used) + 2;
      bool same = true;
      for (int64_t t = 0; t < b.tokens; ++t) {
        for (int64_t s = 0; s < b.n_used; ++s) {
          const size_t at = static_cast<size_t>(t) * y_tok + static_cast<size_t>(s) * y_slot;
          same = same && std::memcmp(&in_and_y[at], &want[at], sizeof(float) * w.n) == 0;
        }
      }
      EXPECT_TRUE(same) << threads << " threads, scratch limit " << limit;
    }
  }
}

}  // namespace
}  // namespace strata
