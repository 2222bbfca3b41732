#include "core/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "core/check.h"
#include "core/dtype_traits.h"
#include "core/function_ref.h"
#include "core/isa.h"
#include "core/matmul_internal.h"
#include "core/ops_moe.h"
#include "core/small_list.h"

namespace strata {
namespace {

using matmul_detail::MatmulArgs;

// Weight bytes per thread task at least this many: a task is one long sequential read, which the
// hardware prefetchers follow, and tiny matrices stay on one thread.
constexpr uint64_t kMinChunkBytes = 64 * 1024;
// Activations per quantisation task at least this many: below that, waking a thread costs more
// than the work.
constexpr int64_t kMinColumnElements = 16384;
// A task starts on a multiple of this many rows of its part, so that a split does not cut the
// kernels' row groups.
constexpr int64_t kRowAlign = 16;

// A part ready to run, and where it sits in the concatenation of all parts' rows and bytes.
struct Prepared {
  const MatmulKernel* kernel;
  MatmulArgs args;  // args.n_rows: the part's rows
  int64_t row0;
  uint64_t byte0;

  int64_t n() const { return args.n_rows; }
};

// The activation columns of every part whose kernel reads this layout (kernels that share an
// act_column_bytes function write the same bytes: see MatmulKernel).
struct ActFormat {
  size_t (*column_bytes)(int64_t k);
  void (*quantize)(const float* x, void* dst, int64_t k);
  size_t col_bytes = 0;
  size_t offset = 0;  // of column 0 in the scratch
};

// The first concatenated row of task t of n_tasks: the first row whose weights start at or after
// byte total * t / n_tasks, moved up to kRowAlign within its part. Non-decreasing in t, 0 for
// t = 0 and n_rows for t = n_tasks, so the tasks' row ranges cover every row once.
int64_t task_row(std::span<const Prepared> parts, uint64_t total, int64_t n_rows, int64_t t,
                 int64_t n_tasks) {
  const uint64_t pos = total * static_cast<uint64_t>(t) / static_cast<uint64_t>(n_tasks);
  for (const Prepared& p : parts) {
    const uint64_t row_bytes = p.args.w_row_bytes;
    if (pos >= p.byte0 + static_cast<uint64_t>(p.n()) * row_bytes) continue;
    const auto first = static_cast<int64_t>((pos - p.byte0 + row_bytes - 1) / row_bytes);
    return p.row0 + std::min(p.n(), (first + kRowAlign - 1) / kRowAlign * kRowAlign);
  }
  return n_rows;
}

// The part that holds concatenated row r (the last part for r past the end). Parts are in row
// order, none empty.
size_t part_index(std::span<const Prepared> prep, int64_t r) {
  const auto after = std::upper_bound(prep.begin() + 1, prep.end(), r,
                                      [](int64_t row, const Prepared& p) { return row < p.row0; });
  return static_cast<size_t>(after - prep.begin()) - 1;
}

// Called by the thread that computed rows [lo, hi) of part `part`, right after them.
using RowsDoneFn = FunctionRef<void(size_t part, int64_t lo, int64_t hi)>;

// The rows of all parts, concatenated, as one range of rows split into claims: where claims may
// start and end (a multiple of kRowAlign rows into a part, or a part's end, so that a claim
// does not cut the kernels' row groups) and how many weight bytes one holds.
class Claims {
 public:
  explicit Claims(std::span<const Prepared> prep) : prep_(prep) {}

  // The end of the owner's claim that starts at row f (a boundary) and ends before `back`: a
  // quarter of what is left, at least kClaimBytes, so that a long range takes few claims and
  // its last ones are short.
  int64_t front_claim(int64_t f, int64_t back) const {
    const Prepared& p = part_of(f);
    const uint64_t at = p.byte0 + static_cast<uint64_t>(f - p.row0) * p.args.w_row_bytes;
    const uint64_t bytes = std::max(kClaimBytes, (byte_of(back) - at) / 4);
    const auto rows = static_cast<int64_t>(bytes / p.args.w_row_bytes);
    const int64_t in = f - p.row0 + std::max<int64_t>(kRowAlign, rows / kRowAlign * kRowAlign);
    return std::min(back, in >= p.n() ? p.row0 + p.n() : p.row0 + in);
  }

  // The start of the claim of kClaimBytes that ends at row b (a boundary) and starts at or after
  // `front`.
  int64_t back_claim(int64_t front, int64_t b) const {
    const Prepared& p = part_of(b - 1);
    const auto rows = static_cast<int64_t>(kClaimBytes / p.args.w_row_bytes);
    // Rows [p.row0, b) of the part, less a claim, rounded down to a boundary.
    const int64_t in = b - p.row0 - std::max<int64_t>(kRowAlign, rows);
    return std::max(front, in <= 0 ? p.row0 : p.row0 + in / kRowAlign * kRowAlign);
  }

 private:
  // Weight bytes per claim: small enough that the threads end a pass together (one claim of
  // one thread's 25-35 GB/s takes about 2 us), large enough that the claims' own cost stays
  // small (a compare-and-swap on the owner's cache line and a kernel call).
  static constexpr uint64_t kClaimBytes = 64 * 1024;

  const Prepared& part_of(int64_t r) const { return prep_[part_index(prep_, r)]; }

  // Where row r's weights start in the concatenation of all parts' weights.
  uint64_t byte_of(int64_t r) const {
    const Prepared& p = part_of(r);
    return p.byte0 + static_cast<uint64_t>(std::min(r - p.row0, p.n())) * p.args.w_row_bytes;
  }

  std::span<const Prepared> prep_;
};

std::atomic<uint64_t> g_claims_stolen{0};

// The unclaimed rows [front, back) of a task's range, one word: the owner claims from the front,
// a thread whose own range is done claims from the back, each with one compare-and-swap. On a
// line of its own, which stays in the owner's cache until another thread comes.
struct alignas(64) Unclaimed {
  std::atomic<uint64_t> v;
  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(back) << 32 | static_cast<uint64_t>(front);
  }
  static int64_t front(uint64_t w) { return static_cast<int64_t>(w & 0xffffffffu); }
  static int64_t back(uint64_t w) { return static_cast<int64_t>(w >> 32); }
};

// The rows of all parts, concatenated, in tasks of equal weight bytes, at most one per thread:
// parts of different dtypes read different bytes per row. A task's thread claims its rows from
// the front (Claims::front_claim); a thread done with its own claims the rest of the others'
// from their backs, 64 KiB of weights at a time, so that the threads end together though the
// machine runs them at different speeds (measured: the caller's share of a decode step's
// passes 8-16% slower than the worker's, whichever rows it has; see docs/engine.md). The
// claims need only be atomic (relaxed): the pool's barrier publishes the outputs. Threads split
// the output rows, never k: each output element is the same sequence of operations whichever
// thread computes it. `work`: each thread's work_bytes, one after the other.
void run_rows(ThreadPool& pool, std::span<const Prepared> prep, uint64_t total_bytes,
              int64_t total_rows, uint8_t* work, size_t work_bytes, const RowsDoneFn* done) {
  STRATA_CHECK(total_rows < (int64_t{1} << 31), "matmul: too many rows");
  const auto n_tasks = static_cast<int64_t>(
      std::clamp<uint64_t>(total_bytes / kMinChunkBytes, 1, static_cast<uint64_t>(pool.size())));
  const auto compute = [&](int thread, int64_t r0, int64_t r1) {
    for (size_t i = part_index(prep, r0); i < prep.size() && prep[i].row0 < r1; ++i) {
      const Prepared& p = prep[i];
      const int64_t lo = std::max(r0, p.row0) - p.row0;
      const int64_t hi = std::min(r1, p.row0 + p.n()) - p.row0;
      if (lo >= hi) continue;
      if (p.kernel->work_bytes == nullptr) {
        p.kernel->rows(p.args, lo, hi);
      } else {
        MatmulArgs own = p.args;
        own.work = work + work_bytes * static_cast<size_t>(thread);
        p.kernel->rows(own, lo, hi);
      }
      if (done != nullptr) (*done)(i, lo, hi);
    }
  };
  if (n_tasks == 1) {
    pool.parallel_for(1, 1, [&](int thread, int64_t, int64_t) { compute(thread, 0, total_rows); });
    return;
  }
  const Claims claims(prep);
  // On the stack for the pools a machine usually has, on the heap past that; only the n_tasks
  // words used are made (each on a line of its own: a full array would write 16 lines a pass).
  constexpr int64_t kLocalTasks = 16;
  alignas(Unclaimed) unsigned char place[kLocalTasks * sizeof(Unclaimed)];
  std::unique_ptr<Unclaimed[]> heap;
  Unclaimed* ranges = reinterpret_cast<Unclaimed*>(place);
  if (n_tasks > kLocalTasks) {
    heap = std::make_unique<Unclaimed[]>(static_cast<size_t>(n_tasks));
    ranges = heap.get();
  }
  for (int64_t t = 0; t < n_tasks; ++t) {
    std::construct_at(ranges + t);
    ranges[t].v.store(Unclaimed::pack(task_row(prep, total_bytes, total_rows, t, n_tasks),
                                      task_row(prep, total_bytes, total_rows, t + 1, n_tasks)),
                      std::memory_order_relaxed);
  }
  pool.parallel_for(n_tasks, 1, [&](int thread, int64_t t0, int64_t) {
    // Claims from task t's range until it is empty: its owner from the front, others from the
    // back.
    const auto drain = [&](int64_t t) {
      const bool own = t == t0;
      std::atomic<uint64_t>& range = ranges[t].v;
      for (uint64_t w = range.load(std::memory_order_relaxed);;) {
        const int64_t f = Unclaimed::front(w), b = Unclaimed::back(w);
        if (f >= b) return;
        const int64_t cut = own ? claims.front_claim(f, b) : claims.back_claim(f, b);
        const uint64_t rest = own ? Unclaimed::pack(cut, b) : Unclaimed::pack(f, cut);
        if (!range.compare_exchange_weak(w, rest, std::memory_order_relaxed)) continue;
        if (!own) g_claims_stolen.fetch_add(1, std::memory_order_relaxed);
        compute(thread, own ? f : cut, own ? cut : b);
        w = range.load(std::memory_order_relaxed);
      }
    };
    for (int64_t i = 0; i < n_tasks; ++i) drain((t0 + i) % n_tasks);
  });
}

}  // namespace

uint64_t matmul_claims_stolen() { return g_claims_stolen.load(std::memory_order_relaxed); }

void matmul(ThreadPool& pool, DType w_dtype, const void* w, size_t w_row_bytes, int64_t n,
            int64_t k, const float* x, size_t x_stride, int64_t m, float* y, size_t y_stride) {
  const MatmulPart part{w_dtype, w, w_row_bytes, n, y, y_stride};
  matmul_multi(pool, {&part, 1}, k, x, x_stride, m);
}

void matmul_multi(ThreadPool& pool, std::span<const MatmulPart> parts, int64_t k, const float* x,
                  size_t x_stride, int64_t m, const MatmulColumnsFn* columns) {
  STRATA_CHECK(m >= 0 && k >= 0, "matmul: negative size");
  STRATA_CHECK(m <= 1 || x_stride >= static_cast<size_t>(k), "matmul: column strides too small");
  // One ISA decision per call; the kernels below never look at it again.
  const Isa isa = isa_active();
  SmallList<Prepared, 8> prep;
  SmallList<ActFormat, 4> formats;
  uint64_t total_bytes = 0;
  int64_t total_rows = 0;
  for (const MatmulPart& part : parts) {
    const DTypeTraits* traits = dtype_traits(part.w_dtype);
    const MatmulKernel* kernel = traits ? dtype_matmul_kernel(*traits, isa, m) : nullptr;
    STRATA_CHECK(kernel != nullptr, "matmul: dtype without kernels");
    STRATA_CHECK(part.n >= 0 && k % dtype_block_size(part.w_dtype) == 0,
                 "matmul: k must be a multiple of the weight block size");
    STRATA_CHECK(part.w_row_bytes >= dtype_row_bytes(part.w_dtype, k),
                 "matmul: weight rows overlap");
    STRATA_CHECK(
        !dtype_is_layout(part.w_dtype) || part.w_row_bytes == dtype_row_bytes(part.w_dtype, k),
        "matmul: a layout's rows must be packed");
    STRATA_CHECK(m <= 1 || part.y_stride >= static_cast<size_t>(part.n),
                 "matmul: column strides too small");
    if (part.n == 0) continue;
    prep.push_back({kernel,
                    MatmulArgs{static_cast<const uint8_t*>(part.w), part.w_row_bytes, k, m, x,
                               x_stride, nullptr, 0, part.y, part.y_stride, nullptr, part.n},
                    total_rows, total_bytes});
    total_rows += part.n;
    total_bytes += static_cast<uint64_t>(part.n) * part.w_row_bytes;
    if (kernel->act_column_bytes != nullptr &&
        std::none_of(formats.begin(), formats.end(), [kernel](const ActFormat& f) {
          return f.column_bytes == kernel->act_column_bytes;
        })) {
      formats.push_back({kernel->act_column_bytes, kernel->quantize_activation});
    }
  }
  if (m == 0 || (total_rows == 0 && columns == nullptr)) return;

  // The quantised columns live in the caller's scratch of the pool (thread 0), reused so that
  // the decode loop does not allocate per matmul; one 64-byte aligned region per format. After
  // them, each thread's work area (MatmulKernel::work_bytes), as large as the largest part's.
  size_t scratch_bytes = 0;
  for (ActFormat& f : formats) {
    f.col_bytes = f.column_bytes(k);
    f.offset = scratch_bytes;
    scratch_bytes += (f.col_bytes * static_cast<size_t>(m) + 63) / 64 * 64;
  }
  const size_t work_offset = scratch_bytes;
  size_t work_bytes = 0;
  for (const Prepared& p : prep) {
    if (p.kernel->work_bytes != nullptr) {
      work_bytes = std::max(work_bytes, (p.kernel->work_bytes(k) + 63) / 64 * 64);
    }
  }
  scratch_bytes += work_bytes * static_cast<size_t>(pool.size());
  uint8_t* scratch = scratch_bytes == 0 ? nullptr : pool.scratch(0, scratch_bytes);
  if (!formats.empty() || columns != nullptr) {
    const int64_t grain = std::max<int64_t>(1, kMinColumnElements / std::max<int64_t>(k, 1));
    pool.parallel_for(m, grain, [&](int, int64_t j0, int64_t j1) {
      if (columns != nullptr) (*columns)(j0, j1);
      for (const ActFormat& f : formats) {
        for (int64_t j = j0; j < j1; ++j) {
          f.quantize(x + j * x_stride, scratch + f.offset + static_cast<size_t>(j) * f.col_bytes,
                     k);
        }
      }
    });
  }
  for (Prepared& p : prep) {
    for (const ActFormat& f : formats) {
      if (f.column_bytes != p.kernel->act_column_bytes) continue;
      p.args.xq = scratch + f.offset;
      p.args.xq_col_bytes = f.col_bytes;
    }
  }
  if (total_rows == 0) return;

  run_rows(pool, prep, total_bytes, total_rows, scratch + work_offset, work_bytes, nullptr);
}

void matmul_id(ThreadPool& pool, const MatmulIdArgs& a) { matmul_id_multi(pool, {&a, 1}); }

void matmul_id_multi(ThreadPool& pool, std::span<const MatmulIdArgs> mats,
                     const MatmulColumnsFn* columns) {
  STRATA_CHECK(!mats.empty(), "matmul_id: no matrix");
  const MatmulIdArgs& a = mats[0];
  STRATA_CHECK(columns == nullptr || a.x_m == a.n_used,
               "matmul_id: a producer of X needs one column per pair");
  STRATA_CHECK(a.k >= 0 && a.n_used >= 0 && a.n_tokens >= 0 && a.n_expert >= 1,
               "matmul_id: negative size");
  STRATA_CHECK(a.x_m == 1 || a.x_m == a.n_used, "matmul_id: x_m must be 1 or n_used");
  STRATA_CHECK(a.n_expert <= kMaxExperts, "matmul_id: more experts than kMaxExperts");
  const DTypeTraits* traits = dtype_traits(a.w_dtype);
  STRATA_CHECK(traits != nullptr && dtype_matmul_kernel(*traits, Isa::kScalar) != nullptr,
               "matmul_id: dtype without kernels");
  int64_t n_all = 0;  // output rows of all matrices
  for (const MatmulIdArgs& b : mats) {
    STRATA_CHECK(b.w_dtype == a.w_dtype && b.k == a.k && b.n_expert == a.n_expert && b.x == a.x &&
                     b.x_slot_stride == a.x_slot_stride && b.x_tok_stride == a.x_tok_stride &&
                     b.x_m == a.x_m && b.ids == a.ids && b.n_used == a.n_used &&
                     b.n_tokens == a.n_tokens,
                 "matmul_id: the matrices of one call share their dtype, input and experts");
    STRATA_CHECK(b.n >= 0, "matmul_id: negative size");
    STRATA_CHECK(
        b.k % dtype_block_size(b.w_dtype) == 0 && b.w_row_bytes >= dtype_row_bytes(b.w_dtype, b.k),
        "matmul_id: bad weight rows");
    STRATA_CHECK(!dtype_is_layout(b.w_dtype) || b.w_row_bytes == dtype_row_bytes(b.w_dtype, b.k),
                 "matmul_id: a layout's rows must be packed");
    n_all += b.n;
  }
  const int64_t n_pairs = a.n_used * a.n_tokens;
  if (n_pairs == 0 || n_all == 0) return;

  // The pairs (p = t * n_used + s) in grouped order: a counting sort by expert, stable in p.
  // Runs every layer of every step: its counts live on the stack, its order in the scratch.
  std::array<int64_t, kMaxExperts + 1> first;  // of the n_expert + 1 used, only those are set
  std::fill_n(first.begin(), a.n_expert + 1, 0);
  for (int64_t p = 0; p < n_pairs; ++p) {
    STRATA_CHECK(a.ids[p] >= 0 && a.ids[p] < a.n_expert, "matmul_id: expert id out of range");
    ++first[static_cast<size_t>(a.ids[p]) + 1];
  }
  int64_t most = 0;  // the most columns any expert has
  for (int64_t e = 0; e < a.n_expert; ++e) {
    most = std::max(most, first[e + 1]);
    first[e + 1] += first[e];
  }
  // One kernel for every expert (the gathered columns are in its format), chosen for the
  // widest: in a decode step of one token every expert has one column.
  const MatmulKernel* kernel = dtype_matmul_kernel(*traits, isa_active(), most);

  // A gathered column: the kernel's activation format, or the F32 values as given. Each
  // matrix's outputs of the slice have a region of their own.
  const bool quantised = kernel->act_column_bytes != nullptr;
  const size_t col_bytes =
      quantised ? kernel->act_column_bytes(a.k) : static_cast<size_t>(a.k) * sizeof(float);
  const size_t out_bytes = static_cast<size_t>(n_all) * sizeof(float);
  const size_t limit = a.scratch_limit != 0 ? a.scratch_limit : kMatmulIdScratchBytes;
  const int64_t slice =
      std::clamp<int64_t>(static_cast<int64_t>(limit / (col_bytes + out_bytes)), 1, n_pairs);
  const auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  const size_t cols_region = aligned(col_bytes * static_cast<size_t>(slice));
  std::array<size_t, kMaxIdMatrices> out_offset{};
  STRATA_CHECK(mats.size() <= kMaxIdMatrices, "matmul_id: too many matrices in one call");
  size_t out_region = 0;
  for (size_t i = 0; i < mats.size(); ++i) {
    out_offset[i] = out_region;
    out_region +=
        aligned(static_cast<size_t>(mats[i].n) * sizeof(float) * static_cast<size_t>(slice));
  }
  const size_t work_bytes = kernel->work_bytes != nullptr ? aligned(kernel->work_bytes(a.k)) : 0;
  // With one input per token shared by its slots, each token's column is quantised once, here,
  // and copied to its pairs. At most the size of X, which the caller's buffers hold already (a
  // quantised column is smaller than the F32 one).
  const bool shared = quantised && a.x_m == 1 && a.n_used > 1;
  const size_t tokens_region = shared ? aligned(col_bytes * static_cast<size_t>(a.n_tokens)) : 0;
  const size_t order_region = aligned(sizeof(int64_t) * static_cast<size_t>(n_pairs));
  uint8_t* scratch = pool.scratch(0, order_region + tokens_region + cols_region + out_region +
                                         work_bytes * static_cast<size_t>(pool.size()));
  auto* order = reinterpret_cast<int64_t*>(scratch);
  {
    std::array<int64_t, kMaxExperts> next;
    std::copy(first.begin(), first.begin() + a.n_expert, next.begin());
    for (int64_t p = 0; p < n_pairs; ++p) order[next[a.ids[p]]++] = p;
  }
  uint8_t* tokens = scratch + order_region;
  uint8_t* cols = tokens + tokens_region;
  uint8_t* outs = cols + cols_region;
  uint8_t* work = outs + out_region;
  const auto outs_of = [&](size_t i) { return reinterpret_cast<float*>(outs + out_offset[i]); };

  const int64_t grain = std::max<int64_t>(1, kMinColumnElements / std::max<int64_t>(a.k, 1));
  // The producer of X writes each pair's column as it is gathered when the pairs run in one
  // slice: then every column is made before any output is written. With several, a later slice's
  // columns would be made after an earlier slice's outputs, which may lie where the producer
  // reads (the executor's scratch gives the down experts' outputs the memory of the gate and up
  // outputs that the activation reads): then it makes them all first, in a pass of its own.
  const MatmulColumnsFn* produce = columns;
  if (columns != nullptr && slice < n_pairs) {
    pool.parallel_for(n_pairs, grain, [&](int, int64_t p0, int64_t p1) { (*columns)(p0, p1); });
    produce = nullptr;
  }
  if (shared) {
    pool.parallel_for(a.n_tokens, grain, [&](int, int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        kernel->quantize_activation(a.x + static_cast<size_t>(t) * a.x_tok_stride,
                                    tokens + static_cast<size_t>(t) * col_bytes, a.k);
      }
    });
  }
  // The matrices with rows: every expert of a slice has one part per matrix, in this order, so
  // part p is of matrix active[p % n_active].
  std::array<size_t, kMaxIdMatrices> active{};
  size_t n_active = 0;
  for (size_t i = 0; i < mats.size(); ++i) {
    if (mats[i].n > 0) active[n_active++] = i;
  }
  SmallList<Prepared, 32> prep;
  for (int64_t q0 = 0; q0 < n_pairs; q0 += slice) {
    const int64_t q1 = std::min(n_pairs, q0 + slice);
    const int64_t* pairs = order + q0;
    // An expert with one column in the slice reads a shared token's column where it is (every
    // expert, in a decode step of one token): no copy.
    const auto alone = [&](int64_t j) {
      const auto e = static_cast<size_t>(a.ids[pairs[j]]);
      const int64_t in_slice = std::min(first[e + 1], q1) - std::max(first[e], q0);
      return shared && in_slice == 1;
    };
    // The slice's other columns, gathered in grouped order.
    pool.parallel_for(q1 - q0, grain, [&](int, int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        if (alone(j)) continue;
        if (produce != nullptr) (*produce)(pairs[j], pairs[j] + 1);
        const int64_t t = pairs[j] / a.n_used;
        const int64_t s = a.x_m == 1 ? 0 : pairs[j] % a.n_used;
        const float* src = a.x + static_cast<size_t>(t) * a.x_tok_stride +
                           static_cast<size_t>(s) * a.x_slot_stride;
        uint8_t* dst = cols + static_cast<size_t>(j) * col_bytes;
        if (shared) {
          std::memcpy(dst, tokens + static_cast<size_t>(t) * col_bytes, col_bytes);
        } else if (quantised) {
          kernel->quantize_activation(src, dst, a.k);
        } else {
          std::memcpy(dst, src, col_bytes);
        }
      }
    });
    // One part per expert of the slice and matrix, over the expert's consecutive columns; an
    // expert's matrices follow each other, so that its parts are read together.
    prep.clear();
    uint64_t total_bytes = 0;
    int64_t total_rows = 0;
    for (int64_t j = 0; j < q1 - q0;) {
      const int32_t e = a.ids[pairs[j]];
      const int64_t end = std::min(first[static_cast<size_t>(e) + 1] - q0, q1 - q0);
      const uint8_t* col = alone(j) ? tokens + static_cast<size_t>(pairs[j] / a.n_used) * col_bytes
                                    : cols + static_cast<size_t>(j) * col_bytes;
      for (size_t a_i = 0; a_i < n_active; ++a_i) {
        const size_t i = active[a_i];
        const MatmulIdArgs& b = mats[i];
        MatmulArgs args{
            static_cast<const uint8_t*>(b.w) + static_cast<size_t>(e) * b.w_expert_bytes,
            b.w_row_bytes,
            b.k,
            end - j,
            quantised ? nullptr : reinterpret_cast<const float*>(col),
            static_cast<size_t>(b.k),
            quantised ? col : nullptr,
            col_bytes,
            outs_of(i) + static_cast<size_t>(j) * static_cast<size_t>(b.n),
            static_cast<size_t>(b.n),
            nullptr,
            b.n};
        prep.push_back({kernel, args, total_rows, total_bytes});
        total_rows += b.n;
        total_bytes += static_cast<uint64_t>(b.n) * b.w_row_bytes;
      }
      j = end;
    }
    // Each thread scatters the rows it computed to their pairs: no pass of its own.
    const auto scatter_rows = [&](size_t part, int64_t lo, int64_t hi) {
      const Prepared& p = prep[part];
      const size_t i = active[part % n_active];
      const MatmulIdArgs& b = mats[i];
      const float* base = outs_of(i);
      const int64_t j0 = (p.args.y - base) / b.n;
      for (int64_t j = j0; j < j0 + p.args.m; ++j) {
        const int64_t t = pairs[j] / a.n_used;
        const int64_t s = pairs[j] % a.n_used;
        float* dst = b.y + static_cast<size_t>(t) * b.y_tok_stride +
                     static_cast<size_t>(s) * b.y_slot_stride;
        std::memcpy(dst + lo, base + static_cast<size_t>(j) * static_cast<size_t>(b.n) + lo,
                    static_cast<size_t>(hi - lo) * sizeof(float));
      }
    };
    const RowsDoneFn scatter = scatter_rows;
    run_rows(pool, prep, total_bytes, total_rows, work, work_bytes, &scatter);
  }
}

}  // namespace strata
