// attention(): the scalar reference and the AVX2 path against a softmax in double, the AVX2
// path against the kernel it replaced bit for bit, and a token's result bitwise the same
// whatever its batch and the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/alloc_count_testing.h"
#include "core/fp16.h"
#include "core/isa.h"
#include "core/kernel_test_util.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/quant_rows.h"

namespace strata {
namespace {

using testing::bitwise_equal;
using testing::IsaScope;
using testing::kEps;
using testing::uniform_floats;

// The levels of testing::isas() that have an attention kernel of their own: a level that runs
// the kernel of the level below (AVX-VNNI runs AVX2's) would only repeat its run.
std::vector<Isa> attention_isas() {
  std::vector<Isa> out;
  for (Isa isa : testing::isas()) {
    if (internal::attention_kernel_level(isa) == isa) out.push_back(isa);
  }
  return out;
}

struct KvCache {
  DType dtype;
  int64_t head_dim, n_head_kv, n_cells, max_len;
  KvStrides kv;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> cells;  // [max_len, n_lists], unused entries -1

  size_t elem_bytes() const { return dtype == DType::kF16 ? 2 : 4; }
  size_t at(int32_t cell, int64_t kvh, int64_t d) const {
    return size_t(cell) * kv.cell_bytes + size_t(kvh) * kv.head_bytes + size_t(d) * elem_bytes();
  }
  KvStrides strides() const { return kv; }

  float get(const std::vector<uint8_t>& base, int32_t cell, int64_t kvh, int64_t d) const {
    const uint8_t* p = base.data() + at(cell, kvh, d);
    if (dtype == DType::kF16) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    }
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};

// Rows hold n_head_kv heads plus 3 unused elements (rows are not packed). Each list is a
// random set of distinct cells in random order. Values are uniform in [-range, range], rounded
// to integers when `integers` is set.
KvCache make_cache(DType dt, int64_t head_dim, int64_t n_head_kv, int64_t n_cells,
                   const std::vector<int64_t>& list_lens, uint32_t seed, float range = 1.0f,
                   bool integers = false) {
  KvCache c{dt, head_dim, n_head_kv, n_cells, 0, {}, {}, {}, {}};
  c.max_len = *std::max_element(list_lens.begin(), list_lens.end());
  const int64_t elems = n_head_kv * head_dim + 3;
  const size_t es = c.elem_bytes();
  c.kv = kv_cell_major(elems * es, head_dim, dt);
  std::vector<float> kf = uniform_floats(elems * n_cells, seed, -range, range);
  std::vector<float> vf = uniform_floats(elems * n_cells, seed + 1, -1.0f, 1.0f);
  if (integers) {
    for (float& x : kf) x = std::round(x);
  }
  c.k.resize(c.kv.cell_bytes * n_cells);
  c.v.resize(c.kv.cell_bytes * n_cells);
  for (int64_t i = 0; i < elems * n_cells; ++i) {
    if (dt == DType::kF16) {
      const uint16_t hk = f32_to_f16(kf[i]), hv = f32_to_f16(vf[i]);
      std::memcpy(&c.k[i * 2], &hk, 2);
      std::memcpy(&c.v[i * 2], &hv, 2);
    } else {
      std::memcpy(&c.k[i * 4], &kf[i], 4);
      std::memcpy(&c.v[i * 4], &vf[i], 4);
    }
  }
  std::mt19937 rng(seed + 2);
  c.cells.assign(c.max_len * list_lens.size(), -1);
  for (size_t l = 0; l < list_lens.size(); ++l) {
    std::vector<int32_t> all(n_cells);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), list_lens[l], c.cells.begin() + l * c.max_len);
  }
  return c;
}

// The same values, head-major: each kv head's cells side by side, one unused element after
// each cell's values and 5 after each head's cells (neither stride is packed).
KvCache head_major(const KvCache& c) {
  KvCache h = c;
  const size_t es = c.elem_bytes();
  h.kv.cell_bytes = (c.head_dim + 1) * es;
  h.kv.head_bytes = c.n_cells * h.kv.cell_bytes + 5 * es;
  for (std::vector<uint8_t>* dst : {&h.k, &h.v}) dst->assign(c.n_head_kv * h.kv.head_bytes, 0xff);
  for (int32_t cell = 0; cell < c.n_cells; ++cell) {
    for (int64_t kvh = 0; kvh < c.n_head_kv; ++kvh) {
      const size_t n = c.head_dim * es;
      std::memcpy(h.k.data() + h.at(cell, kvh, 0), c.k.data() + c.at(cell, kvh, 0), n);
      std::memcpy(h.v.data() + h.at(cell, kvh, 0), c.v.data() + c.at(cell, kvh, 0), n);
    }
  }
  return h;
}

// Softmax attention in double, written directly from the definition.
std::vector<double> attention_oracle(const KvCache& c, const float* qh, int64_t h, int64_t n_head,
                                     int32_t list, int64_t len, float scale,
                                     const AttentionExtra& extra = {}) {
  const int64_t kvh = h / (n_head / c.n_head_kv);
  const int32_t* cells = c.cells.data() + list * c.max_len;
  if (extra.window > 0 && len > extra.window) {  // the last `window` cells of the prefix
    cells += len - extra.window;
    len = extra.window;
  }
  std::vector<double> s(len);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < c.head_dim; ++d) dot += double(qh[d]) * c.get(c.k, cells[j], kvh, d);
    s[j] = dot * scale;
    if (extra.softcap > 0) s[j] = std::tanh(s[j] / extra.softcap) * extra.softcap;
    mx = std::max(mx, s[j]);
  }
  const double sink = extra.sinks != nullptr ? extra.sinks[h] : -INFINITY;
  mx = std::max(mx, sink);
  double sum = std::exp(sink - mx);
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> out(c.head_dim, 0.0);
  for (int64_t j = 0; j < len; ++j) {
    for (int64_t d = 0; d < c.head_dim; ++d) out[d] += s[j] / sum * c.get(c.v, cells[j], kvh, d);
  }
  return out;
}

struct AttnRun {
  int64_t n_head;
  std::vector<int32_t> tok;  // [2, n_tokens]
  std::vector<float> q;      // token stride n_head * head_dim + 5
  float scale;
  AttentionExtra extra = {};

  int64_t n_tokens() const { return int64_t(tok.size() / 2); }
  size_t q_stride(const KvCache& c) const { return n_head * c.head_dim + 5; }

  std::vector<float> run(ThreadPool& pool, const KvCache& c, int64_t first = 0,
                         int64_t count = -1) const {
    if (count < 0) count = n_tokens();
    const size_t qs = q_stride(c), os = n_head * c.head_dim + 2;
    std::vector<float> out(os * count, -7.0f);
    attention(pool, q.data() + first * qs, qs, c.head_dim, n_head, count, c.dtype, c.k.data(),
              c.v.data(), c.strides(), c.n_head_kv, c.cells.data(), c.max_len,
              tok.data() + 2 * first, scale, out.data(), os, extra);
    // Keep only the head values (the padding of each output row must be left alone).
    std::vector<float> packed;
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t i = 0; i < n_head * c.head_dim; ++i) packed.push_back(out[t * os + i]);
      for (size_t i = n_head * c.head_dim; i < os; ++i) EXPECT_EQ(out[t * os + i], -7.0f);
    }
    return packed;
  }
};

AttnRun make_run(const KvCache& c, int64_t n_head, std::vector<int32_t> tok, uint32_t seed,
                 float q_range = 1.0f, bool integers = false) {
  AttnRun r{n_head, std::move(tok), {}, 1.0f / std::sqrt(float(c.head_dim))};
  r.q = uniform_floats(r.q_stride(c) * r.n_tokens(), seed, -q_range, q_range);
  if (integers) {
    for (float& x : r.q) x = std::round(x);
  }
  return r;
}

// The oracle's output of every (token, head) of a run, token-major.
std::vector<std::vector<double>> oracle_of(const KvCache& c, const AttnRun& r) {
  std::vector<std::vector<double>> out;
  for (int64_t t = 0; t < r.n_tokens(); ++t) {
    for (int64_t h = 0; h < r.n_head; ++h) {
      out.push_back(attention_oracle(c, r.q.data() + t * r.q_stride(c) + h * c.head_dim, h,
                                     r.n_head, r.tok[2 * t], r.tok[2 * t + 1], r.scale, r.extra));
    }
  }
  return out;
}

void expect_matches(const KvCache& c, const AttnRun& r,
                    const std::vector<std::vector<double>>& want, const std::vector<float>& got,
                    const char* what) {
  for (int64_t t = 0; t < r.n_tokens(); ++t) {
    const int64_t len = r.tok[2 * t + 1];
    // Float rounding errors of the q.k dots and of the weighted sum over the cells behave like
    // random walks (~eps * sqrt(terms) for values of magnitude <= 1); 10x margin.
    const double tol = 10 * kEps * (std::sqrt(double(c.head_dim)) + std::sqrt(double(len)) + 1);
    for (int64_t h = 0; h < r.n_head; ++h) {
      const std::vector<double>& w = want[static_cast<size_t>(t * r.n_head + h)];
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const float g = got[(t * r.n_head + h) * c.head_dim + d];
        ASSERT_TRUE(std::isfinite(g));
        ASSERT_NEAR(g, w[d], tol) << what << " " << dtype_name(c.dtype) << " hd=" << c.head_dim
                                  << " t=" << t << " h=" << h << " d=" << d << " len=" << len;
      }
    }
  }
}

void expect_matches_oracle(const KvCache& c, const AttnRun& r, const std::vector<float>& got,
                           const char* what) {
  expect_matches(c, r, oracle_of(c, r), got, what);
}

// The run at every instruction set with a kernel of its own, against the oracle made once;
// `also` (if given) checks more of each output.
void expect_every_kernel_matches_oracle(
    const KvCache& c, const AttnRun& r, ThreadPool& pool,
    const std::function<void(Isa, const std::vector<float>&)>& also = nullptr) {
  const std::vector<std::vector<double>> want = oracle_of(c, r);
  for (Isa isa : attention_isas()) {
    IsaScope scope(isa);
    const std::vector<float> got = r.run(pool, c);
    expect_matches(c, r, want, got, isa_name(isa));
    if (also) also(isa, got);
  }
}

TEST(OpsAttention, MatchesDoubleOracle) {
  struct Case {
    int64_t head_dim, n_head, n_head_kv;
  };
  // Plain MHA, GQA 4:1, MQA with a group of 6 (runs of 4 + 2 heads), odd head sizes.
  const Case cases[] = {{128, 4, 4}, {64, 8, 2}, {100, 6, 1}, {256, 2, 1}, {7, 3, 3}, {16, 4, 2}};
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    for (const Case& cs : cases) {
      const KvCache c = make_cache(dt, cs.head_dim, cs.n_head_kv, 300, {257, 1, 40, 300},
                                   uint32_t(cs.head_dim + cs.n_head));
      // (list, len): full lists, prefixes, one-cell lists, an empty prefix.
      const AttnRun r = make_run(c, cs.n_head, {0, 257, 1, 1, 2, 17, 0, 1, 3, 300, 2, 40, 3, 0},
                                 uint32_t(cs.n_head_kv));
      expect_every_kernel_matches_oracle(c, r, pool);
    }
  }
}

TEST(OpsAttention, LongListMatchesOracle) {
  ThreadPool pool(2);
  const KvCache c = make_cache(DType::kF16, 64, 1, 20000, {20000, 5}, 7);
  const AttnRun r = make_run(c, 6, {0, 20000, 1, 5, 0, 12345}, 8, 3.0f);
  expect_every_kernel_matches_oracle(c, r, pool);
}

// Sliding windows (shorter and longer than the lists) and soft-capped scores, on every ISA,
// against the oracle that applies both by definition.
TEST(OpsAttention, WindowAndSoftcapMatchOracle) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 64, 2, 300, {257, 40}, 31, 2.0f);
    for (const AttentionExtra extra : {AttentionExtra{16, 0.0f}, AttentionExtra{0, 0.7f},
                                       AttentionExtra{100, 2.0f}, AttentionExtra{1, 0.0f}}) {
      AttnRun r = make_run(c, 4, {0, 257, 1, 40, 0, 17, 1, 1, 0, 100}, 32, 2.0f);
      r.extra = extra;
      expect_every_kernel_matches_oracle(c, r, pool);
    }
  }
}

// Sinks (gpt-oss) with windows and caps, on every ISA, against the oracle that adds each head's
// sink to the softmax's maximum and denominator. Sinks far above the scores leave a head almost
// nothing to attend to: its output shrinks towards zero, and the oracle must still agree.
TEST(OpsAttention, SinksMatchOracle) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 64, 2, 300, {257, 40}, 33, 2.0f);
    std::vector<float> sinks = uniform_floats(8, 34, -3.0f, 3.0f);
    sinks[1] = 30.0f;   // dominates every score
    sinks[6] = -80.0f;  // adds nothing measurable
    for (const AttentionExtra extra :
         {AttentionExtra{0, 0.0f, sinks.data()}, AttentionExtra{16, 0.0f, sinks.data()},
          AttentionExtra{100, 2.0f, sinks.data()}, AttentionExtra{1, 0.0f, sinks.data()}}) {
      AttnRun r = make_run(c, 8, {0, 257, 1, 40, 0, 17, 1, 1, 0, 100}, 35, 2.0f);
      r.extra = extra;
      expect_every_kernel_matches_oracle(c, r, pool, [&](Isa isa, const std::vector<float>& got) {
        float head1 = 0;  // the head whose sink dominates: exp(score - 30) weighs each V row
        for (int64_t d = 0; d < c.head_dim; ++d) head1 = std::max(head1, std::abs(got[64 + d]));
        EXPECT_LT(head1, 1e-6f) << isa_name(isa);
      });
    }
  }
}

// A sink of -inf has exp 0: attention with such sinks is plain attention, bit for bit.
TEST(OpsAttention, MinusInfSinksArePlainAttention) {
  ThreadPool pool(2);
  const KvCache c = make_cache(DType::kF16, 64, 2, 120, {120, 9}, 43);
  AttnRun r = make_run(c, 4, {0, 120, 1, 9, 0, 33, 0, 1}, 44);
  const std::vector<float> sinks(4, -INFINITY);
  for (Isa isa : attention_isas()) {
    IsaScope scope(isa);
    const std::vector<float> plain = r.run(pool, c);
    r.extra.sinks = sinks.data();
    EXPECT_TRUE(bitwise_equal(plain, r.run(pool, c))) << isa_name(isa);
    r.extra = {};
  }
}

// A window of 0 and a cap of 0 are plain attention, bit for bit.
TEST(OpsAttention, NoWindowNoCapIsPlainAttention) {
  ThreadPool pool(2);
  const KvCache c = make_cache(DType::kF16, 32, 1, 50, {50}, 41);
  AttnRun r = make_run(c, 2, {0, 50, 0, 7}, 42);
  for (Isa isa : attention_isas()) {
    IsaScope scope(isa);
    const std::vector<float> plain = r.run(pool, c);
    r.extra = AttentionExtra{0, 0.0f};
    EXPECT_TRUE(bitwise_equal(plain, r.run(pool, c))) << isa_name(isa);
    r.extra = AttentionExtra{50, 0.0f};  // a window as long as the list changes nothing
    EXPECT_TRUE(bitwise_equal(plain, r.run(pool, c))) << isa_name(isa);
    r.extra = {};
  }
}

// Integer q and k make the scores exact in float (|score| ~ 1e4): exp(score) alone would be
// inf, so a finite result that matches the oracle shows the maximum is subtracted.
TEST(OpsAttention, LargeScoresAreStable) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 16, 2, 64, {64, 9}, 11, 30.0f, true);
    AttnRun r = make_run(c, 4, {0, 64, 1, 9, 1, 1}, 12, 30.0f, true);
    r.scale = 1.0f;
    float max_score = 0;
    for (int64_t d = 0; d < 16; ++d) max_score += std::abs(r.q[d]) * 30.0f;
    EXPECT_GT(max_score, 1000.0f) << "the test needs large scores";
    expect_every_kernel_matches_oracle(c, r, pool);
  }
}

// A token's output must be bitwise the same whatever the thread count and whatever else is in
// the batch (other sequences, other lengths): computed alone it must equal its batch row.
TEST(OpsAttention, BitwiseAcrossThreadsAndBatches) {
  for (DType dt : {DType::kF32, DType::kF16}) {
    const KvCache c = make_cache(dt, 128, 2, 800, {700, 33, 1}, 21);
    const AttnRun r = make_run(c, 8, {0, 700, 1, 33, 2, 1, 0, 450, 1, 5, 0, 1, 0, 699}, 22, 2.0f);
    const int64_t per_token = r.n_head * c.head_dim;
    for (Isa isa : attention_isas()) {
      IsaScope scope(isa);
      std::vector<float> batch;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> got = r.run(pool, c);
        if (batch.empty()) {
          batch = got;
        } else {
          EXPECT_TRUE(bitwise_equal(batch, got)) << isa_name(isa) << " threads=" << threads;
        }
        for (int64_t t = 0; t < r.n_tokens(); ++t) {
          std::vector<float> alone = r.run(pool, c, t, 1);
          std::vector<float> row(batch.begin() + t * per_token,
                                 batch.begin() + (t + 1) * per_token);
          EXPECT_TRUE(bitwise_equal(alone, row))
              << isa_name(isa) << " token " << t << " threads=" << threads;
        }
      }
    }
  }
}

// One decode token's attention, and the rope before it, touch no heap (after a first call: the
// pool's scratch is sized then): a step calls them once a layer, and an allocation there costs
// a cache miss or two on the allocator's lines (core/small_list.h).
TEST(OpsAttention, ADecodeTokenAllocatesNothing) {
  if (!testing::heap_allocations_counted()) GTEST_SKIP() << "a sanitizer build counts none";
  const KvCache c = make_cache(DType::kF16, 128, 2, 400, {300}, 31);
  const AttnRun r = make_run(c, 8, {0, 299}, 32);
  const size_t qs = r.q_stride(c), os = r.n_head * c.head_dim;
  std::vector<float> out(os), q = r.q;
  const int32_t pos = 299;
  for (Isa isa : attention_isas()) {
    if (isa == Isa::kScalar) continue;  // the reference, which no CPU with AVX2 runs
    IsaScope scope(isa);
    ThreadPool pool(2);
    for (int call = 0; call < 2; ++call) {
      const uint64_t before = testing::heap_allocations();
      rope(pool, q.data(), c.head_dim, r.n_head, 1, qs, &pos, c.head_dim, RopeMode::kNeox, 10000.0f,
           1.0f);
      attention(pool, q.data(), qs, c.head_dim, r.n_head, 1, c.dtype, c.k.data(), c.v.data(),
                c.strides(), c.n_head_kv, c.cells.data(), c.max_len, r.tok.data(), r.scale,
                out.data(), os);
      if (call == 1) {
        EXPECT_EQ(testing::heap_allocations() - before, 0u) << isa_name(isa);
      }
    }
  }
}

// The AVX2 kernel that attended one token at a time, for every token and head of the run.
std::vector<float> untiled_avx2(const KvCache& c, const AttnRun& r) {
  const int64_t per_token = r.n_head * c.head_dim;
  std::vector<float> out(per_token * r.n_tokens(), -7.0f);
  const internal::AttentionArgs a{
      r.q.data(),   r.q_stride(c), c.head_dim, r.n_head,          r.n_tokens(),   c.dtype,
      c.k.data(),   c.v.data(),    c.kv,       c.n_head_kv,       c.cells.data(), c.max_len,
      r.tok.data(), r.scale,       out.data(), size_t(per_token), r.extra};
  std::vector<float> scratch(internal::avx2::attention_untiled_scratch_floats(a));
  const int64_t group = r.n_head / c.n_head_kv;
  for (int64_t t = 0; t < r.n_tokens(); ++t) {
    for (int64_t h = 0; h < r.n_head; h += group) {
      internal::avx2::attention_heads_untiled(a, t, h, h + group, scratch.data());
    }
  }
  return out;
}

// Prompt chunks of three sequences interleaved token by token (one starting its prompt, one
// continuing it, one decoding), an empty prefix, head sizes with a scalar tail and an odd 8-wide
// chunk, grouped-query groups of 1, 4 and 8, f32 and f16 caches, windows and caps: fn(cache,
// run, label) for each.
template <typename Fn>
void for_each_tiling_case(const Fn& fn) {
  std::vector<int32_t> tok;
  for (int32_t i = 0; i < 40; ++i) {
    tok.insert(tok.end(), {0, 301 + i});
    if (i < 25) tok.insert(tok.end(), {1, 1 + i});
    if (i == 7) tok.insert(tok.end(), {2, 517});
  }
  tok.insert(tok.end(), {1, 0});
  // Sinks around the scores' range (|score| <= ~3 here): below, among and above them.
  const std::vector<float> sinks = uniform_floats(16, 77, -4.0f, 4.0f);
  const AttentionExtra extras[] = {{0, 0.0f},
                                   {37, 0.0f},
                                   {0, 1.5f},
                                   {100, 2.0f},
                                   {0, 0.0f, sinks.data()},
                                   {37, 1.5f, sinks.data()}};
  for (DType dt : {DType::kF32, DType::kF16}) {
    for (int64_t head_dim : {64, 128, 80, 72, 100, 7}) {
      for (int64_t group : {1, 4, 8}) {
        const KvCache c =
            make_cache(dt, head_dim, 2, 600, {340, 25, 517}, uint32_t(head_dim * 10 + group), 2.0f);
        AttnRun r = make_run(c, 2 * group, tok, uint32_t(head_dim + group), 2.0f);
        for (const AttentionExtra& extra : extras) {
          r.extra = extra;
          const std::string label =
              std::string(dtype_name(dt)) + " hd=" + std::to_string(head_dim) +
              " group=" + std::to_string(group) + " window=" + std::to_string(extra.window) +
              " cap=" + std::to_string(extra.softcap) + (extra.sinks != nullptr ? " sinks" : "");
          fn(c, r, label);
        }
      }
    }
  }
}

// want: the output of the whole run. At 1-3 threads the run must give it bit for bit, and each
// token alone (as a decode step attends) its row of it. Under a sanitizer, 3 threads and every
// 9th token alone: the same code paths (a token alone is the decode path), a fifth of the work;
// the Release build checks every split.
void expect_bitwise(const KvCache& c, const AttnRun& r, const std::vector<float>& want,
                    const std::string& label) {
  const std::vector<int> thread_counts =
      STRATA_TEST_SANITIZED ? std::vector<int>{3} : std::vector<int>{1, 2, 3};
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    EXPECT_TRUE(bitwise_equal(r.run(pool, c), want)) << label << " threads=" << threads;
  }
  ThreadPool pool(2);
  const int64_t per_token = r.n_head * c.head_dim;
  const int64_t token_step = STRATA_TEST_SANITIZED ? 9 : 1;
  for (int64_t t = 0; t < r.n_tokens(); t += token_step) {
    const std::vector<float> row(want.begin() + t * per_token, want.begin() + (t + 1) * per_token);
    ASSERT_TRUE(bitwise_equal(r.run(pool, c, t, 1), row)) << label << " token " << t;
  }
}

// The tiled AVX2 kernel shares the loads of K and V rows between the tokens of a tile and walks
// the cells in blocks; the float operations of every output element must stay those of the
// kernel it replaced.
TEST(OpsAttention, TiledIsBitwiseTheUntiledKernel) {
  if (isa_best_supported() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  IsaScope scope(Isa::kAvx2);
  for_each_tiling_case([](const KvCache& c, const AttnRun& r, const std::string& label) {
    expect_bitwise(c, r, untiled_avx2(c, r), label);
  });
}

// The AVX-512 kernel does the AVX2 kernel's float operations 16 lanes at a time: a machine with
// AVX-512 and one without must give the same bits, prompt chunks and decode steps alike.
TEST(OpsAttention, Avx512IsBitwiseTheAvx2Kernel) {
  if (isa_best_supported() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  for_each_tiling_case([](const KvCache& c, const AttnRun& r, const std::string& label) {
    std::vector<float> want;
    {
      IsaScope scope(Isa::kAvx2);
      ThreadPool pool(2);
      want = r.run(pool, c);
    }
    IsaScope scope(Isa::kAvx512);
    expect_bitwise(c, r, want, label);
  });
}

// The q8_0 cache of an f32 cache's values (quantize_row_q8_0 over each head's head_dim values,
// heads side by side in a cell or, head_major, each kv head's cells side by side, with unused
// bytes after each cell and head, 2-aligned as graph validation wants them), and the f32 cache
// of the values it holds, in c's layout.
std::pair<KvCache, KvCache> q8_0_and_its_values(const KvCache& c, bool head_major) {
  const size_t seg = size_t(c.head_dim) / 32 * 34;
  KvCache q = c;
  q.dtype = DType::kQ8_0;
  if (head_major) {  // unused bytes, in whole f16s (where the blocks' scales are read)
    q.kv.cell_bytes = seg + 4;
    q.kv.head_bytes = c.n_cells * q.kv.cell_bytes + 6;
  } else {
    q.kv.head_bytes = seg;
    q.kv.cell_bytes = c.n_head_kv * seg + 8;
  }
  KvCache f = c;
  const size_t q_bytes = head_major ? c.n_head_kv * q.kv.head_bytes : c.n_cells * q.kv.cell_bytes;
  for (std::vector<uint8_t>* dst : {&q.k, &q.v}) dst->assign(q_bytes, 0xee);
  std::vector<float> vals(c.head_dim);
  for (int32_t cell = 0; cell < c.n_cells; ++cell) {
    for (int64_t kvh = 0; kvh < c.n_head_kv; ++kvh) {
      const size_t qo = size_t(cell) * q.kv.cell_bytes + size_t(kvh) * q.kv.head_bytes;
      for (auto [src, qdst, fdst] : {std::tuple{&c.k, &q.k, &f.k}, std::tuple{&c.v, &q.v, &f.v}}) {
        for (int64_t d = 0; d < c.head_dim; ++d) vals[d] = c.get(*src, cell, kvh, d);
        quantize_row_q8_0(vals.data(), qdst->data() + qo, c.head_dim);
        dequantize_row_q8_0(qdst->data() + qo, vals.data(), c.head_dim);
        std::memcpy(fdst->data() + c.at(cell, kvh, 0), vals.data(), c.head_dim * sizeof(float));
      }
    }
  }
  return {q, f};
}

// A q8_0 cache reads as the exact floats q * d it holds: attention over it is, bit for bit,
// attention over an f32 cache of those floats, at every level, in both layouts, for decode
// steps and prompt tiles, with windows, caps and sinks. And the f32 cache against the oracle.
TEST(OpsAttention, AQ8_0CacheIsTheF32CacheOfItsValues) {
  struct Case {
    int64_t head_dim, n_head, n_head_kv;
  };
  const Case cases[] = {{64, 8, 2}, {128, 4, 4}, {32, 6, 1}, {96, 8, 1}};
  ThreadPool pool(3);
  const std::vector<float> sinks = uniform_floats(8, 61, -2.0f, 2.0f);
  for (const Case& cs : cases) {
    const KvCache base =
        make_cache(DType::kF32, cs.head_dim, cs.n_head_kv, 200, {200, 37}, 60, 2.0f);
    for (bool hm : {false, true}) {
      const auto [q8, f32] = q8_0_and_its_values(base, hm);
      // Decode steps of both lists, and a prompt tile of 20 tokens of list 0.
      std::vector<int32_t> tok = {0, 200, 1, 37, 1, 1};
      for (int32_t t = 0; t < 20; ++t) tok.insert(tok.end(), {0, 150 + t});
      for (const AttentionExtra extra :
           {AttentionExtra{}, AttentionExtra{24, 1.5f}, AttentionExtra{0, 0.0f, sinks.data()}}) {
        AttnRun r = make_run(f32, cs.n_head, tok, 62, 2.0f);
        r.extra = extra;
        const std::string label = "hd=" + std::to_string(cs.head_dim) +
                                  (hm ? " head-major" : " cell-major") +
                                  " window=" + std::to_string(extra.window);
        for (Isa isa : attention_isas()) {
          IsaScope scope(isa);
          const std::vector<float> want = r.run(pool, f32);
          EXPECT_TRUE(bitwise_equal(r.run(pool, q8), want)) << isa_name(isa) << " " << label;
          if (isa == Isa::kScalar) expect_matches_oracle(f32, r, want, label.c_str());
        }
      }
    }
  }
}

// A long list and a large group: one token's scores for all 32 heads would pass the tiles'
// score budget, so the group is cut into runs of heads; still the untiled kernel's bits, at
// every SIMD level.
TEST(OpsAttention, TiledLongListLargeGroupIsBitwiseTheUntiledKernel) {
  if (isa_best_supported() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const KvCache c = make_cache(DType::kF16, 64, 1, 12000, {12000, 50}, 51, 2.0f);
  const AttnRun r = make_run(c, 32, {0, 11998, 1, 50, 0, 11999, 0, 12000, 1, 7, 0, 3000}, 52, 2.0f);
  const std::vector<float> want = untiled_avx2(c, r);
  for (Isa isa : attention_isas()) {
    if (isa < Isa::kAvx2) continue;
    IsaScope scope(isa);
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      EXPECT_TRUE(bitwise_equal(r.run(pool, c), want)) << isa_name(isa) << " threads=" << threads;
    }
  }
}

// Where the cache keeps its heads changes only the addresses: a head-major cache (each kv
// head's cells side by side, neither stride packed) gives the cell-major cache's bits at every
// level, prompt chunks and decode steps alike.
TEST(OpsAttention, HeadMajorCacheIsBitwiseTheCellMajorCache) {
  for_each_tiling_case([](const KvCache& c, const AttnRun& r, const std::string& label) {
    if (r.extra.window != 0 || r.extra.softcap != 0.0f) return;  // the layout is all that varies
    const KvCache h = head_major(c);
    for (Isa isa : attention_isas()) {
      IsaScope scope(isa);
      ThreadPool pool(2);
      // Under a sanitizer the scalar kernel (a token and a head at a time: 16 s of this test
      // there, against 3.5 for each SIMD kernel) runs only the three tokens alone, the same
      // reads of both layouts at the first, middle and last token; the Release build compares
      // every token.
      if (!STRATA_TEST_SANITIZED || isa != Isa::kScalar) {
        const std::vector<float> want = r.run(pool, c);
        ASSERT_TRUE(bitwise_equal(r.run(pool, h), want)) << label << " " << isa_name(isa);
      }
      for (int64_t t : {int64_t{0}, r.n_tokens() / 2, r.n_tokens() - 1}) {
        ASSERT_TRUE(bitwise_equal(r.run(pool, h, t, 1), r.run(pool, c, t, 1)))
            << label << " " << isa_name(isa) << " token " << t;
      }
    }
  });
}

}  // namespace
}  // namespace strata
