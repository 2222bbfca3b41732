// Dispatch and threading for the kernels of ops.h. The instruction set is chosen once per call;
// threads split output rows or (token, head) pairs, never a reduction.
#include "core/ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/dtype_traits.h"
#include "core/isa.h"
#include "core/ops_internal.h"
#include "core/rows16.h"
#include "core/small_list.h"

namespace strata {

using internal::row_grain;

namespace {

bool use_avx2() { return isa_active() >= Isa::kAvx2; }

int32_t argmax_row_ref(const float* x, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  int32_t idx = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > best) {
      best = x[i];
      idx = static_cast<int32_t>(i);
    }
  }
  return idx;
}

// Tiles are cut so that the scores of all their tokens and heads fit in this many floats
// (1 MiB, about an L2). More tokens per tile share each K and V row (which, in a long cache,
// come from memory), at the price of scores that spill further: in prompts of 4096 tokens
// 1 MiB measured ~15% faster than 256 KiB. When one token's scores for a whole kv group would
// exceed it, the group is cut into runs of at least kAttentionMinRunHeads heads. So a thread's
// scratch is at most max(1 MiB, 4 x max_len floats), as the one-token kernel's was, plus the
// tile's output accumulators (<= 16 tokens x heads x head_dim) and one block of rows (32 KiB).
constexpr int64_t kAttentionScoreFloats = 256 * 1024;
constexpr int64_t kAttentionMinRunHeads = 4;

// A task is a tile (up to kAttentionMaxTileTokens tokens of one list, in batch order) and a run
// of query heads of one kv group, which share each load of a K or V row. Groups are cut into
// runs when one token's scores would exceed the budget, and when there are too few tasks to
// keep every thread busy. The tasks are dealt to the threads in contiguous ranges of about
// equal cost (cells x heads): in a prompt chunk the last tokens attend to many more cells than
// the first. A token's result depends neither on its tile nor on its run nor on its thread.
void attention_tiled(ThreadPool& pool, const internal::AttentionArgs& a,
                     internal::AttentionTileFn tile_fn) {
  const int64_t n_tokens = a.n_tokens;
  if (n_tokens <= 0) return;
  const int64_t group = a.n_head / a.n_head_kv;
  // The per-call lists are in place for a decode step's few tokens (core/small_list.h).
  SmallList<int64_t, 16> len(static_cast<size_t>(n_tokens));
  int64_t span = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    internal::attention_cells(a, t, &len[t]);
    span = std::max(span, len[t]);
  }
  const int64_t span_pad = std::max<int64_t>(8, (span + 7) / 8 * 8);
  const int64_t heads_fit = std::max(kAttentionMinRunHeads, kAttentionScoreFloats / span_pad);
  const int64_t min_runs = (group + heads_fit - 1) / heads_fit;
  const int64_t tile_max =
      std::clamp<int64_t>(kAttentionScoreFloats / ((group + min_runs - 1) / min_runs * span_pad), 1,
                          internal::kAttentionMaxTileTokens);

  SmallList<int32_t, 16> order(static_cast<size_t>(n_tokens));
  std::iota(order.begin(), order.end(), 0);
  if (n_tokens > 1) {  // (stable_sort takes a heap buffer, even for one item)
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return a.tok[2 * x] < a.tok[2 * y]; });
  }
  SmallList<int64_t, 16> tiles;  // tile i is order[tiles[i] .. tiles[i + 1])
  for (int64_t i = 0; i < n_tokens;) {
    tiles.push_back(i);
    int64_t j = i + 1;
    while (j < n_tokens && j - i < tile_max && a.tok[2 * order[j]] == a.tok[2 * order[i]]) ++j;
    i = j;
  }
  tiles.push_back(n_tokens);
  const int64_t n_tiles = static_cast<int64_t>(tiles.size()) - 1;

  const int n_threads = pool.size();
  const int64_t base_tasks = n_tiles * a.n_head_kv;
  // About 4 tasks a thread, so that they end together. A q8_0 cache's rows are converted once
  // per task, for all its heads: there, when the tasks split evenly, a task is a whole group.
  const bool whole_groups = a.kv_dtype == DType::kQ8_0 && base_tasks % n_threads == 0;
  const int64_t want = (whole_groups ? 1 : 4) * static_cast<int64_t>(n_threads);
  const int64_t n_runs =
      std::clamp<int64_t>(std::max(min_runs, (want + base_tasks - 1) / base_tasks), 1, group);
  const int64_t run = (group + n_runs - 1) / n_runs;
  const int64_t n_tasks = base_tasks * n_runs;
  struct Task {
    int64_t tile, h0, h1;
  };
  auto task = [&](int64_t i) {
    const int64_t kvh = (i / n_runs) % a.n_head_kv;
    const int64_t h0 = kvh * group + (i % n_runs) * run;
    return Task{i / (a.n_head_kv * n_runs), h0, std::min(kvh * group + group, h0 + run)};
  };

  SmallList<int64_t, 16> tile_cost(static_cast<size_t>(n_tiles));
  for (int64_t i = 0; i < n_tiles; ++i) {
    for (int64_t j = tiles[i]; j < tiles[i + 1]; ++j) tile_cost[i] += len[order[j]] + 16;
  }
  SmallList<int64_t, 64> prefix(static_cast<size_t>(n_tasks) + 1);
  for (int64_t i = 0; i < n_tasks; ++i) {
    const Task tk = task(i);
    prefix[i + 1] = prefix[i] + std::max<int64_t>(tk.h1 - tk.h0, 0) * tile_cost[tk.tile];
  }
  SmallList<int64_t, 64> cut(static_cast<size_t>(n_threads) + 1, n_tasks);
  for (int k = 0; k < n_threads; ++k) {
    const int64_t target = prefix[n_tasks] / n_threads * k;
    cut[k] = std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin();
  }

  // Each thread's scratch is its own, 64-byte aligned (the pool's): one array cut in slices
  // put the slices' ends in shared cache lines and their rows at whatever alignment the heap
  // gave, which cost a 1024-token prompt 3-9% on two threads from one build to another.
  const size_t per = internal::attention_tile_scratch_floats(a, tile_max, run, span);
  pool.parallel_for(n_threads, 1, [&](int thread, int64_t begin, int64_t end) {
    auto* scratch = reinterpret_cast<float*>(pool.scratch(thread, per * sizeof(float)));
    for (int64_t k = begin; k < end; ++k) {
      for (int64_t i = cut[k]; i < cut[k + 1]; ++i) {
        const Task tk = task(i);
        if (tk.h0 >= tk.h1) continue;
        tile_fn(a, order.data() + tiles[tk.tile], tiles[tk.tile + 1] - tiles[tk.tile], tk.h0, tk.h1,
                scratch);
      }
    }
  });
}

// The scalar reference, one (token, head) pair at a time.
void attention_ref(ThreadPool& pool, const internal::AttentionArgs& a) {
  const size_t per = static_cast<size_t>(std::max<int64_t>(a.max_len, 1));
  std::vector<float> scratch(per * pool.size());
  pool.parallel_for(a.n_tokens * a.n_head, 1, [&](int thread, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      internal::attention_head_ref(a, i / a.n_head, i % a.n_head, scratch.data() + thread * per);
    }
  });
}

template <internal::AttentionTileFn kTile>
void attention_tiled_with(ThreadPool& pool, const internal::AttentionArgs& a) {
  attention_tiled(pool, a, kTile);
}

// attention() at each instruction set, indexed by Isa. The SIMD levels share the tiling and give
// the same bits; a level without an entry uses the one below.
using AttentionFn = void (*)(ThreadPool& pool, const internal::AttentionArgs& a);
constexpr AttentionFn kAttentionKernels[kIsaLevels] = {
    &attention_ref,
    &attention_tiled_with<&internal::avx2::attention_tile>,
    nullptr,  // AVX-VNNI: the AVX2 kernel (its dot products are in float)
    &attention_tiled_with<&internal::avx512::attention_tile>,
};

}  // namespace

Isa internal::attention_kernel_level(Isa isa) {
  for (int level = static_cast<int>(isa); level > 0; --level) {
    if (kAttentionKernels[level] != nullptr && isa_supported(static_cast<Isa>(level))) {
      return static_cast<Isa>(level);
    }
  }
  return Isa::kScalar;
}

void rms_norm(ThreadPool& pool, const float* x, size_t x_stride, const float* weight, float* y,
              size_t y_stride, int64_t n, int64_t rows, float eps) {
  auto* fn = use_avx2() ? &internal::avx2::rms_norm : &ref::rms_norm;
  pool.parallel_for(rows, row_grain(n), [&](int, int64_t begin, int64_t end) {
    fn(x + begin * x_stride, x_stride, weight, y + begin * y_stride, y_stride, n, end - begin, eps);
  });
}

void rms_norm_serial(const float* x, size_t x_stride, const float* weight, float* y,
                     size_t y_stride, int64_t n, int64_t rows, float eps) {
  auto* fn = use_avx2() ? &internal::avx2::rms_norm : &ref::rms_norm;
  fn(x, x_stride, weight, y, y_stride, n, rows, eps);
}

void binary(ThreadPool& pool, BinaryOp op, const float* a, size_t a_stride, const float* b,
            size_t b_stride, int64_t b_rows, float* y, size_t y_stride, int64_t n, int64_t rows) {
  STRATA_CHECK(b_rows >= 1, "binary: b_rows must be >= 1");
  auto* fn = use_avx2() ? &internal::avx2::binary : &ref::binary;
  pool.parallel_for(rows, row_grain(n), [&](int, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      fn(op, a + r * a_stride, a_stride, b + (r % b_rows) * b_stride, b_stride, 1, y + r * y_stride,
         y_stride, n, 1);
    }
  });
}

void swiglu(ThreadPool& pool, const float* gate, size_t gate_stride, const float* up,
            size_t up_stride, float* y, size_t y_stride, int64_t n, int64_t rows) {
  auto* fn = use_avx2() ? &internal::avx2::swiglu : &ref::swiglu;
  pool.parallel_for(rows, row_grain(n), [&](int, int64_t begin, int64_t end) {
    fn(gate + begin * gate_stride, gate_stride, up + begin * up_stride, up_stride,
       y + begin * y_stride, y_stride, n, end - begin);
  });
}

void swiglu_serial(const float* gate, size_t gate_stride, const float* up, size_t up_stride,
                   float* y, size_t y_stride, int64_t n, int64_t rows) {
  auto* fn = use_avx2() ? &internal::avx2::swiglu : &ref::swiglu;
  fn(gate, gate_stride, up, up_stride, y, y_stride, n, rows);
}

// Split by tokens: the angles of a token are computed once and used for all its heads.
void rope(ThreadPool& pool, float* x, int64_t head_dim, int64_t n_head, int64_t n_tokens,
          size_t tok_stride, const int32_t* pos, int64_t n_rot, RopeMode mode, float freq_base,
          float freq_scale) {
  STRATA_CHECK(n_rot % 2 == 0 && n_rot >= 0 && n_rot <= head_dim,
               "rope: n_rot must be even and <= head_dim");
  if (n_rot == 0) return;
  auto* fn = use_avx2() ? &internal::avx2::rope : &ref::rope;
  pool.parallel_for(n_tokens, row_grain(n_head * n_rot), [&](int, int64_t begin, int64_t end) {
    fn(x + begin * tok_stride, head_dim, n_head, end - begin, tok_stride, pos + begin, n_rot, mode,
       freq_base, freq_scale);
  });
}

void get_rows(ThreadPool& pool, DType dtype, const void* table, size_t row_bytes, int64_t n,
              const int32_t* ids, int64_t n_ids, float* y, size_t y_stride, int64_t n_table_rows,
              int64_t planes, size_t plane_bytes) {
  const DType base = dtype_info(dtype).base;
  const DTypeTraits* traits = dtype_traits(base);
  STRATA_CHECK(traits != nullptr && traits->dequantize != nullptr,
               "get_rows: dtype has no conversion");
  const bool layout = base != dtype;
  STRATA_CHECK(!layout || (row_bytes == dtype_row_bytes(dtype, n) && planes == 1),
               "get_rows: a layout's rows must be packed, in one plane");
  STRATA_CHECK(planes >= 1, "get_rows: no plane");
  const RowToFloat to_float = dtype_to_float(*traits, isa_active());
  pool.parallel_for(n_ids, row_grain(n * planes), [&](int thread, int64_t begin, int64_t end) {
    // A layout's row, read back into the thread's scratch (no allocation per step).
    uint8_t* row = layout ? pool.scratch(thread, row_bytes) : nullptr;
    for (int64_t i = begin; i < end; ++i) {
      const auto* src =
          static_cast<const uint8_t*>(table) + static_cast<size_t>(ids[i]) * row_bytes;
      if (layout) {
        rows16_unpack_row(dtype, table, n_table_rows, ids[i], n, row);
        src = row;
      }
      for (int64_t p = 0; p < planes; ++p) {
        to_float(src + static_cast<size_t>(p) * plane_bytes, y + i * y_stride + p * n, n);
      }
    }
  });
}

// Rows of idx must be distinct: two sources written to one cell would race.
void set_rows(ThreadPool& pool, DType dst_dtype, void* dst, size_t dst_row_bytes, const float* src,
              size_t src_stride, int64_t n, const int32_t* idx, int64_t n_rows, int64_t planes,
              size_t plane_bytes) {
  STRATA_CHECK(
      (dst_dtype == DType::kF32 || dst_dtype == DType::kF16 || dst_dtype == DType::kQ8_0) &&
          n % dtype_block_size(dst_dtype) == 0,
      "set_rows: destination must be f32, f16 or q8_0 (rows of whole blocks)");
  STRATA_CHECK(planes >= 1, "set_rows: no plane");
  const RowFromFloat from_float = dtype_from_float(*dtype_traits(dst_dtype), isa_active());
  pool.parallel_for(n_rows, row_grain(n * planes), [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      auto* d = static_cast<uint8_t*>(dst) + static_cast<size_t>(idx[i]) * dst_row_bytes;
      for (int64_t p = 0; p < planes; ++p) {
        from_float(src + i * src_stride + p * n, d + static_cast<size_t>(p) * plane_bytes, n);
      }
    }
  });
}

void attention(ThreadPool& pool, const float* q, size_t q_tok_stride, int64_t head_dim,
               int64_t n_head, int64_t n_tokens, DType kv_dtype, const void* k, const void* v,
               KvStrides kv, int64_t n_head_kv, const int32_t* cells, int64_t max_len,
               const int32_t* tok, float scale, float* out, size_t out_tok_stride,
               const AttentionExtra& extra) {
  STRATA_CHECK((kv_dtype == DType::kF32 || kv_dtype == DType::kF16 || kv_dtype == DType::kQ8_0) &&
                   head_dim % dtype_block_size(kv_dtype) == 0,
               "attention: the KV cache must be f32, f16 or q8_0 (heads of whole blocks)");
  STRATA_CHECK(head_dim > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
               "attention: n_head must be a multiple of n_head_kv");
  const internal::AttentionArgs a{
      q,     q_tok_stride, head_dim, n_head, n_tokens, kv_dtype,       k,    v, kv, n_head_kv,
      cells, max_len,      tok,      scale,  out,      out_tok_stride, extra};
  kAttentionKernels[static_cast<int>(internal::attention_kernel_level(isa_active()))](pool, a);
}

void argmax(ThreadPool& pool, const float* x, size_t x_stride, int64_t n, int64_t rows,
            int32_t* out) {
  auto* fn = use_avx2() ? &internal::avx2::argmax_row : &argmax_row_ref;
  pool.parallel_for(rows, row_grain(n), [&](int, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) out[r] = fn(x + r * x_stride, n);
  });
}

}  // namespace strata
