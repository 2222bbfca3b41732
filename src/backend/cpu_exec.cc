// Graph execution on host memory: resolve and bounds-check every tensor, then run the kernels.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/dtype_traits.h"
#include "core/isa.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "core/ops_act.h"
#include "core/ops_moe.h"
#include "core/rope_rates.h"
#include "core/rope_shift.h"
#include "core/sample.h"
#include "core/small_list.h"
#include "graph/op_table.h"

namespace strata {
namespace {

Status check_placement(const TensorRef& t, uint64_t buffer_size) {
  const uint64_t extent = t.extent_bytes();
  if (t.offset > buffer_size || extent > buffer_size - t.offset) {
    return out_of_range("region [" + std::to_string(t.offset) + ", +" + std::to_string(extent) +
                        ") past the end of buffer " + std::to_string(t.buffer) + " (size " +
                        std::to_string(buffer_size) + ")");
  }
  const uint64_t elem = dtype_block_size(t.dtype) == 1 ? dtype_block_bytes(t.dtype) : 1;
  if (t.offset % elem != 0 || t.nb[1] % elem != 0 || t.nb[2] % elem != 0 || t.nb[3] % elem != 0) {
    return invalid_argument("offset or strides not a multiple of the element size " +
                            std::to_string(elem));
  }
  return Status::ok();
}

// Rows of dims 1..3 must be evenly spaced for the row-wise kernels.
bool rows_uniform(const TensorRef& t) {
  return (t.ne[2] == 1 || t.nb[2] == t.nb[1] * static_cast<uint64_t>(t.ne[1])) &&
         (t.ne[3] == 1 || t.nb[3] == t.nb[2] * static_cast<uint64_t>(t.ne[2]));
}

Status check_indices(const int32_t* v, int64_t n, int64_t limit, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] < 0 || v[i] >= limit) {
      return out_of_range(std::string(what) + "[" + std::to_string(i) + "] = " +
                          std::to_string(v[i]) + " outside [0, " + std::to_string(limit) + ")");
    }
  }
  return Status::ok();
}

// What an executor gets: a node that graph_validate accepted, the host address of every tensor
// of its graph (placement checked), and the pool.
struct ExecNode {
  const Graph& g;
  const Node& node;
  const std::vector<uint8_t*>& ptr;
  ThreadPool& pool;

  const TensorRef& T(int s) const { return g.tensors[node.src[s]]; }
  const TensorRef& out() const { return g.tensors[node.out]; }
  uint8_t* P(int s) const { return ptr[node.src[s]]; }
  float* F(int s) const { return reinterpret_cast<float*>(ptr[node.src[s]]); }
  const int32_t* I(int s) const { return reinterpret_cast<const int32_t*>(ptr[node.src[s]]); }
  float* y() const { return reinterpret_cast<float*>(ptr[node.out]); }
};
using OpExec = Status (*)(const ExecNode& e);

size_t floats(uint64_t bytes) { return static_cast<size_t>(bytes / sizeof(float)); }

// --- Executors, one per op: the checks of the data (indices, row layout), then the kernel ------

Status exec_get_rows(const ExecNode& e) {
  STRATA_RETURN_IF_ERROR(check_indices(e.I(1), e.T(1).ne[0], e.T(0).ne[1], "ids"));
  get_rows(e.pool, e.T(0).dtype, e.P(0), e.T(0).nb[1], e.T(0).ne[0], e.I(1), e.T(1).ne[0], e.y(),
           floats(e.out().nb[1]), e.T(0).ne[1], e.T(0).ne[2], e.T(0).nb[2]);
  return Status::ok();
}

Status exec_rms_norm(const ExecNode& e) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.out())) return invalid_argument("rows not uniform");
  rms_norm(e.pool, e.F(0), floats(e.T(0).nb[1]), e.node.src[1] >= 0 ? e.F(1) : nullptr, e.y(),
           floats(e.out().nb[1]), e.T(0).ne[0], e.T(0).n_rows(), e.node.fparams[0]);
  return Status::ok();
}

Status exec_binary(const ExecNode& e, BinaryOp op) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.T(1)) || !rows_uniform(e.out())) {
    return invalid_argument("rows not uniform");
  }
  binary(e.pool, op, e.F(0), floats(e.T(0).nb[1]), e.F(1), floats(e.T(1).nb[1]), e.T(1).n_rows(),
         e.y(), floats(e.out().nb[1]), e.T(0).ne[0], e.T(0).n_rows());
  return Status::ok();
}
Status exec_add(const ExecNode& e) { return exec_binary(e, BinaryOp::kAdd); }
Status exec_mul(const ExecNode& e) { return exec_binary(e, BinaryOp::kMul); }

Status exec_swiglu(const ExecNode& e) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.T(1)) || !rows_uniform(e.out())) {
    return invalid_argument("rows not uniform");
  }
  swiglu(e.pool, e.F(0), floats(e.T(0).nb[1]), e.F(1), floats(e.T(1).nb[1]), e.y(),
         floats(e.out().nb[1]), e.T(0).ne[0], e.T(0).n_rows());
  return Status::ok();
}

Status exec_mul_mat(const ExecNode& e) {
  if (!rows_uniform(e.T(1)) || !rows_uniform(e.out())) return invalid_argument("rows not uniform");
  matmul(e.pool, e.T(0).dtype, e.P(0), e.T(0).nb[1], e.T(0).ne[1], e.T(0).ne[0], e.F(1),
         floats(e.T(1).nb[1]), e.T(1).n_rows(), e.y(), floats(e.out().nb[1]));
  return Status::ok();
}

// Rope writes in place; a distinct output gets the input's heads first.
void rope_copy_in(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  const TensorRef& out = e.out();
  if (e.node.src[0] != e.node.out && e.P(0) != e.ptr[e.node.out]) {
    for (int64_t t = 0; t < x.ne[2]; ++t) {
      std::memcpy(e.ptr[e.node.out] + t * out.nb[2], e.P(0) + t * x.nb[2],
                  static_cast<size_t>(x.nb[1] * x.ne[1]));
    }
  }
}

Status exec_rope(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  rope_copy_in(e);
  rope(e.pool, e.y(), x.ne[0], x.ne[1], x.ne[2], floats(e.out().nb[2]), e.I(1), e.node.iparams[0],
       static_cast<RopeMode>(e.node.iparams[1]), e.node.fparams[0], e.node.fparams[1]);
  return Status::ok();
}

Status exec_rope_rates(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  rope_copy_in(e);
  rope_rates(e.pool, e.y(), x.ne[0], x.ne[1], x.ne[2], floats(e.out().nb[2]), e.I(1),
             e.node.iparams[0], static_cast<RopeMode>(e.node.iparams[1]), e.F(2),
             e.node.fparams[0]);
  return Status::ok();
}

Status exec_rope_shift(const ExecNode& e) {
  const TensorRef& cache = e.T(0);
  const int64_t m = e.T(1).ne[0];
  STRATA_RETURN_IF_ERROR(check_indices(e.I(1), m, cache.ne[1], "cells"));
  // Rows are rotated in parallel: a cell listed twice would be written by two threads.
  std::vector<int32_t> sorted(e.I(1), e.I(1) + m);
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return invalid_argument("cells: a cell is listed twice");
  }
  RopeShiftArgs a;
  a.dtype = cache.dtype;
  a.cache = e.P(0);
  a.row_bytes = cache.nb[1];
  a.head_dim = e.node.iparams[2];
  a.n_head = cache.ne[0] / a.head_dim;
  a.n_planes = cache.ne[2];
  a.plane_bytes = cache.nb[2];
  a.n_rot = e.node.iparams[0];
  a.mode = static_cast<RopeMode>(e.node.iparams[1]);
  a.rates = e.node.src[3] >= 0 ? e.F(3) : nullptr;
  a.freq_base = e.node.fparams[0];
  a.freq_scale = e.node.fparams[1];
  rope_shift(e.pool, a, e.I(1), e.I(2), m);
  return Status::ok();
}

Status exec_scale(const ExecNode& e) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.out())) return invalid_argument("rows not uniform");
  scale(e.pool, e.F(0), floats(e.T(0).nb[1]), e.node.fparams[0], e.y(), floats(e.out().nb[1]),
        e.T(0).ne[0], e.T(0).n_rows());
  return Status::ok();
}

Status exec_softcap(const ExecNode& e) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.out())) return invalid_argument("rows not uniform");
  softcap(e.pool, e.F(0), floats(e.T(0).nb[1]), e.node.fparams[0], e.y(), floats(e.out().nb[1]),
          e.T(0).ne[0], e.T(0).n_rows());
  return Status::ok();
}

Status exec_geglu(const ExecNode& e) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.T(1)) || !rows_uniform(e.out())) {
    return invalid_argument("rows not uniform");
  }
  geglu(e.pool, e.F(0), floats(e.T(0).nb[1]), e.F(1), floats(e.T(1).nb[1]), e.y(),
        floats(e.out().nb[1]), e.T(0).ne[0], e.T(0).n_rows());
  return Status::ok();
}

Status exec_swiglu_oai(const ExecNode& e) {
  if (!rows_uniform(e.T(0)) || !rows_uniform(e.T(1)) || !rows_uniform(e.out())) {
    return invalid_argument("rows not uniform");
  }
  swiglu_oai(e.pool, e.F(0), floats(e.T(0).nb[1]), e.F(1), floats(e.T(1).nb[1]), e.node.fparams[0],
             e.node.fparams[1], e.y(), floats(e.out().nb[1]), e.T(0).ne[0], e.T(0).n_rows());
  return Status::ok();
}

Status exec_set_rows(const ExecNode& e) {
  if (!rows_uniform(e.T(1))) return invalid_argument("rows not uniform");
  STRATA_RETURN_IF_ERROR(check_indices(e.I(2), e.T(2).ne[0], e.T(0).ne[1], "cells"));
  set_rows(e.pool, e.T(0).dtype, e.P(0), e.T(0).nb[1], e.F(1), floats(e.T(1).nb[1]), e.T(0).ne[0],
           e.I(2), e.T(2).ne[0], e.T(0).ne[2], e.T(0).nb[2]);
  return Status::ok();
}

Status run_attention(const ExecNode& e, const AttentionExtra& extra) {
  const TensorRef& q = e.T(0);
  const TensorRef& cells = e.T(3);
  const TensorRef& out = e.out();
  const int64_t max_len = cells.ne[0];
  const int64_t n_lists = cells.n_rows();
  STRATA_RETURN_IF_ERROR(check_indices(e.I(3), cells.n_elements(), e.T(1).ne[1], "cells"));
  const int32_t* tok = e.I(4);
  for (int64_t t = 0; t < q.ne[2]; ++t) {
    if (tok[2 * t] < 0 || tok[2 * t] >= n_lists || tok[2 * t + 1] < 1 || tok[2 * t + 1] > max_len) {
      return out_of_range("tok[" + std::to_string(t) + "] = (" + std::to_string(tok[2 * t]) + ", " +
                          std::to_string(tok[2 * t + 1]) + ") outside " + std::to_string(n_lists) +
                          " lists of " + std::to_string(max_len));
    }
  }
  if (!rows_uniform(q) || !rows_uniform(out)) return invalid_argument("rows not uniform");
  const float scale = e.node.fparams[0];
  // The validator took [hd * kv_heads, cells] (cell-major) or [hd, cells, kv_heads].
  const TensorRef& k = e.T(1);
  const KvStrides kv =
      k.ne[0] == q.ne[0] ? KvStrides{k.nb[1], k.nb[2]} : kv_cell_major(k.nb[1], q.ne[0], k.dtype);
  attention(e.pool, e.F(0), floats(q.nb[2]), q.ne[0], q.ne[1], q.ne[2], k.dtype, e.P(1), e.P(2), kv,
            e.node.iparams[0], e.I(3), max_len, tok, scale, e.y(), floats(out.nb[2]), extra);
  return Status::ok();
}

Status exec_attention(const ExecNode& e) { return run_attention(e, {}); }

Status exec_attention_ext(const ExecNode& e) {
  return run_attention(e, {e.node.iparams[1], e.node.fparams[1]});
}

Status exec_attention_sink(const ExecNode& e) {
  return run_attention(e, {e.node.iparams[1], e.node.fparams[1], e.F(5)});
}

Status exec_argmax(const ExecNode& e) {
  if (!rows_uniform(e.T(0))) return invalid_argument("rows not uniform");
  argmax(e.pool, e.F(0), floats(e.T(0).nb[1]), e.T(0).ne[0], e.T(0).n_rows(),
         reinterpret_cast<int32_t*>(e.y()));
  return Status::ok();
}

Status exec_copy(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  const TensorRef& out = e.out();
  if (!rows_uniform(x) || !rows_uniform(out)) return invalid_argument("rows not uniform");
  for (int64_t r = 0; r < x.n_rows(); ++r) {
    std::memmove(e.ptr[e.node.out] + r * out.nb[1], e.P(0) + r * x.nb[1],
                 static_cast<size_t>(x.ne[0]) * sizeof(float));
  }
  return Status::ok();
}

Status exec_sample(const ExecNode& e) {
  const TensorRef& logits = e.T(0);
  SampleRowsArgs a;
  a.logits = e.F(0);
  a.logits_stride = floats(logits.nb[1]);
  a.n_vocab = static_cast<int32_t>(logits.ne[0]);
  a.rows = logits.ne[1];
  a.settings = e.I(1);
  a.entries = e.I(2);
  a.width = e.T(2).ne[1];
  a.uniforms = e.F(3);
  a.out = reinterpret_cast<int32_t*>(e.y());
  a.out_words = e.out().ne[0];
  return sample_rows(e.pool, a);
}

// --- Mixture of experts -------------------------------------------------------------------------

// Expert ids I32 [n_used, r] (contiguous: validated) each in [0, n_expert): they may come from a
// peer, and a kernel would read outside the weights or the logits with a bad one.
Status check_expert_ids(const ExecNode& e, int s, int64_t n_expert) {
  const TensorRef& ids = e.T(s);
  const int32_t* v = e.I(s);
  for (int64_t t = 0; t < ids.ne[1]; ++t) {
    for (int64_t k = 0; k < ids.ne[0]; ++k) {
      const int32_t id = v[t * ids.ne[0] + k];
      if (id < 0 || id >= n_expert) {
        return out_of_range("token " + std::to_string(t) + ", slot " + std::to_string(k) +
                            ": expert id " + std::to_string(id) + " outside [0, " +
                            std::to_string(n_expert) + ")");
      }
    }
  }
  return Status::ok();
}

Status exec_moe_top_k(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  moe_top_k(e.pool, e.F(0), floats(x.nb[1]), x.ne[0], x.ne[1], e.node.iparams[0],
            reinterpret_cast<int32_t*>(e.y()), static_cast<size_t>(e.out().ne[0]));
  return Status::ok();
}

Status exec_moe_gate(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  const TensorRef& ids = e.T(1);
  STRATA_RETURN_IF_ERROR(check_expert_ids(e, 1, x.ne[0]));
  moe_gate(e.pool, e.F(0), floats(x.nb[1]), x.ne[0], e.I(1), static_cast<size_t>(ids.ne[0]),
           ids.ne[0], ids.ne[1], static_cast<MoeGating>(e.node.iparams[0]), e.node.iparams[1] != 0,
           e.node.fparams[0], e.y(), floats(e.out().nb[1]));
  return Status::ok();
}

MatmulIdArgs mul_mat_id_args(const ExecNode& e) {
  const TensorRef& w = e.T(0);
  const TensorRef& x = e.T(1);
  const TensorRef& ids = e.T(2);
  const TensorRef& out = e.out();
  MatmulIdArgs a;
  a.w_dtype = w.dtype;
  a.w = e.P(0);
  a.w_row_bytes = w.nb[1];
  a.w_expert_bytes = w.nb[2];
  a.k = w.ne[0];
  a.n = w.ne[1];
  a.n_expert = w.ne[2];
  a.x = e.F(1);
  a.x_slot_stride = floats(x.nb[1]);
  a.x_tok_stride = floats(x.nb[2]);
  a.x_m = x.ne[1];
  a.ids = e.I(2);
  a.n_used = ids.ne[0];
  a.n_tokens = ids.ne[1];
  a.y = e.y();
  a.y_slot_stride = floats(out.nb[1]);
  a.y_tok_stride = floats(out.nb[2]);
  return a;
}

Status exec_mul_mat_id(const ExecNode& e) {
  STRATA_RETURN_IF_ERROR(check_expert_ids(e, 2, e.T(0).ne[2]));
  matmul_id(e.pool, mul_mat_id_args(e));
  return Status::ok();
}

Status exec_add_id(const ExecNode& e) {
  const TensorRef& x = e.T(0);
  const TensorRef& b = e.T(1);
  STRATA_RETURN_IF_ERROR(check_expert_ids(e, 2, b.ne[1]));
  moe_add_id(e.pool, e.F(0), floats(x.nb[1]), floats(x.nb[2]), e.F(1), floats(b.nb[1]), e.I(2),
             static_cast<size_t>(e.T(2).ne[0]), e.y(), floats(e.out().nb[1]), floats(e.out().nb[2]),
             x.ne[0], x.ne[1], x.ne[2]);
  return Status::ok();
}

Status exec_moe_sum(const ExecNode& e) {
  const TensorRef& y = e.T(0);
  moe_sum(e.pool, e.F(0), floats(y.nb[1]), floats(y.nb[2]), e.F(1), floats(e.T(1).nb[1]), e.y(),
          floats(e.out().nb[1]), y.ne[0], y.ne[1], y.ne[2]);
  return Status::ok();
}

// --- Matmuls that share their input, run as one pass --------------------------------------------
//
// A layer projects one normed hidden state several times (q, k and v; gate and up). Consecutive
// mul_mat nodes with the same input run as one matmul_multi: their activations are quantised
// once and all their rows are split over the pool in one pass, one barrier instead of one per
// node; a row-wise op right before them that writes that input (the norm, the gated activation
// before the down projection) runs in the pass that quantises it. The outputs are those of the
// nodes run one by one, bit for bit, as long as no node of the run writes what another reads: a
// node that would is left out of the run.

// Rows [r0, r1) of a producer's output, on the calling thread: the same bits as its executor.
using ProducerRows = void (*)(const ExecNode& e, int64_t r0, int64_t r1);

void rms_norm_rows(const ExecNode& e, int64_t r0, int64_t r1) {
  const size_t xs = floats(e.T(0).nb[1]), ys = floats(e.out().nb[1]);
  rms_norm_serial(e.F(0) + r0 * xs, xs, e.node.src[1] >= 0 ? e.F(1) : nullptr, e.y() + r0 * ys, ys,
                  e.T(0).ne[0], r1 - r0, e.node.fparams[0]);
}

void swiglu_rows(const ExecNode& e, int64_t r0, int64_t r1) {
  const size_t gs = floats(e.T(0).nb[1]), us = floats(e.T(1).nb[1]), ys = floats(e.out().nb[1]);
  swiglu_serial(e.F(0) + r0 * gs, gs, e.F(1) + r0 * us, us, e.y() + r0 * ys, ys, e.T(0).ne[0],
                r1 - r0);
}

void geglu_rows(const ExecNode& e, int64_t r0, int64_t r1) {
  const size_t gs = floats(e.T(0).nb[1]), us = floats(e.T(1).nb[1]), ys = floats(e.out().nb[1]);
  geglu_serial(e.F(0) + r0 * gs, gs, e.F(1) + r0 * us, us, e.y() + r0 * ys, ys, e.T(0).ne[0],
               r1 - r0);
}

// Ops whose output row r depends only on row r of their inputs (or on a one-row weight).
struct ProducerRow {
  Op op;
  ProducerRows rows;
};
constexpr ProducerRow kProducers[] = {
    {Op::kRmsNorm, rms_norm_rows},
    {Op::kSwiglu, swiglu_rows},
    {Op::kGeglu, geglu_rows},
};

// The row of kProducers of node k's op when it can produce a run's input: a producer whose
// inputs and output pass the row checks of its executor.
const ProducerRow* producer_of(const Graph& g, const Node& node) {
  for (const ProducerRow& p : kProducers) {
    if (p.op != node.op) continue;
    if (!rows_uniform(g.tensors[node.out])) return nullptr;
    for (int32_t s : node.src) {
      if (s >= 0 && !rows_uniform(g.tensors[s])) return nullptr;
    }
    return &p;
  }
  return nullptr;
}

struct Region {
  const uint8_t* begin;
  const uint8_t* end;
  bool overlaps(const Region& o) const { return begin < o.end && o.begin < end; }
};

Region region(const Graph& g, const std::vector<uint8_t*>& ptr, int32_t t) {
  return {ptr[t], ptr[t] + g.tensors[t].extent_bytes()};
}

// Nodes [begin, end) of a run; with a producer, the first node writes the matmuls' input.
struct MatmulRun {
  size_t begin = 0;
  size_t end = 0;
  const ProducerRow* producer = nullptr;
};

// The run that starts at node k, or an empty one when node k runs alone.
MatmulRun matmul_run_at(const Graph& g, const std::vector<uint8_t*>& ptr, size_t k) {
  const size_t n_nodes = g.nodes.size();
  const Node& head = g.nodes[k];
  MatmulRun run{k, k, nullptr};
  size_t first = k;
  if (head.op != Op::kMulMat) {
    if (k + 1 == n_nodes || g.nodes[k + 1].op != Op::kMulMat || g.nodes[k + 1].src[1] != head.out) {
      return run;
    }
    run.producer = producer_of(g, head);
    if (run.producer == nullptr) return run;
    first = k + 1;
  }
  const int32_t x = g.nodes[first].src[1];
  if (!rows_uniform(g.tensors[x])) return run;
  const Region xr = region(g, ptr, x);
  std::vector<Region> written, read;
  size_t end = first;
  for (; end < n_nodes; ++end) {
    const Node& mm = g.nodes[end];
    if (mm.op != Op::kMulMat || mm.src[1] != x || !rows_uniform(g.tensors[mm.out])) break;
    const Region out = region(g, ptr, mm.out);
    const Region w = region(g, ptr, mm.src[0]);
    const auto hits = [](const Region& r, const std::vector<Region>& v) {
      return std::any_of(v.begin(), v.end(), [&r](const Region& o) { return r.overlaps(o); });
    };
    if (out.overlaps(xr) || hits(out, written) || hits(out, read) || hits(w, written)) break;
    written.push_back(out);
    read.push_back(w);
  }
  // A lone matmul runs as itself; a producer needs one matmul to share its pass.
  if (end - first >= (run.producer != nullptr ? 1u : 2u)) run.end = end;
  return run;
}

// What matmul_run_at accepted needs no further check: the nodes passed graph_validate and the
// row checks of their executors. The producer finishes in the first pass of matmul_multi, before
// any matmul writes, as it would run alone.
void exec_matmul_run(const Graph& g, const std::vector<uint8_t*>& ptr, ThreadPool& pool,
                     const MatmulRun& run) {
  const size_t first = run.begin + (run.producer != nullptr ? 1 : 0);
  SmallList<MatmulPart, 8> parts;  // in place: a step allocates nothing (core/small_list.h)
  for (size_t i = first; i < run.end; ++i) {
    const ExecNode e{g, g.nodes[i], ptr, pool};
    parts.push_back(
        {e.T(0).dtype, e.P(0), e.T(0).nb[1], e.T(0).ne[1], e.y(), floats(e.out().nb[1])});
  }
  const ExecNode mm{g, g.nodes[first], ptr, pool};
  const TensorRef& x = mm.T(1);
  if (run.producer == nullptr) {
    matmul_multi(pool, parts, x.ne[0], mm.F(1), floats(x.nb[1]), x.n_rows());
    return;
  }
  // The producer's rows are the matmuls' activation columns.
  const ExecNode producer{g, g.nodes[run.begin], ptr, pool};
  const MatmulColumnsFn columns = [&run, &producer](int64_t j0, int64_t j1) {
    run.producer->rows(producer, j0, j1);
  };
  matmul_multi(pool, parts, x.ne[0], mm.F(1), floats(x.nb[1]), x.n_rows(), &columns);
}

// Consecutive mul_mat_id nodes of the same input, experts and weight dtype (a layer's gate and
// up experts) run as one matmul_id_multi: one grouping and gathering of the columns, one pass
// over the selected experts' rows of both. A row op right before them that writes an input of one
// column per pair (the gated activation before the down experts) runs in the gathering pass,
// each pair's column produced just before it is quantised; matmul_id_multi makes every column
// before it writes any output, so the outputs may lie where the producer reads (the scratch
// planner gives the down experts' outputs the gate and up outputs' memory). As with the matmul
// runs, a node that writes what another of the run reads is left out. The run that starts at
// node k, or an empty one (end == begin) when node k runs alone.
MatmulRun mul_mat_id_run_at(const Graph& g, const std::vector<uint8_t*>& ptr, size_t k) {
  MatmulRun run{k, k, nullptr};
  size_t first = k;
  if (g.nodes[k].op != Op::kMulMatId) {
    if (k + 1 == g.nodes.size() || g.nodes[k + 1].op != Op::kMulMatId) return run;
    // X [k, n_used, tokens], one column per pair, whose row p = t * n_used + s is row p of the
    // producer's output: the same rows, maybe through another view (the engine's activation is
    // [n_ff, n_used * tokens], the down experts read it as [n_ff, n_used, tokens]).
    const Node& next = g.nodes[k + 1];
    const TensorRef& x = g.tensors[next.src[1]];
    const TensorRef& made = g.tensors[g.nodes[k].out];
    if (x.ne[1] != g.tensors[next.src[2]].ne[0] || ptr[next.src[1]] != ptr[g.nodes[k].out] ||
        x.ne[0] != made.ne[0] || x.nb[1] != made.nb[1] || x.n_rows() != made.n_rows() ||
        !rows_uniform(x)) {
      return run;
    }
    run.producer = producer_of(g, g.nodes[k]);
    if (run.producer == nullptr) return run;
    first = k + 1;
  }
  const Node& head = g.nodes[first];
  const TensorRef& w0 = g.tensors[head.src[0]];
  const Region inputs[] = {region(g, ptr, head.src[1]), region(g, ptr, head.src[2])};
  // What the nodes of the run so far write and read: [first, end).
  std::array<Region, kMaxIdMatrices> written, read;
  const auto hits = [](const Region& r, const Region* v, size_t n) {
    return std::any_of(v, v + n, [&r](const Region& o) { return r.overlaps(o); });
  };
  size_t end = first;
  for (; end < g.nodes.size() && end - first < kMaxIdMatrices; ++end) {
    const Node& n = g.nodes[end];
    if (n.op != Op::kMulMatId || n.src[1] != head.src[1] || n.src[2] != head.src[2]) break;
    const TensorRef& w = g.tensors[n.src[0]];
    if (w.dtype != w0.dtype || w.ne[0] != w0.ne[0] || w.ne[2] != w0.ne[2]) break;
    const Region out = region(g, ptr, n.out);
    const Region wr = region(g, ptr, n.src[0]);
    const size_t m = end - first;
    if (hits(out, inputs, 2) || hits(out, written.data(), m) || hits(out, read.data(), m) ||
        hits(wr, written.data(), m)) {
      break;
    }
    written[m] = out;
    read[m] = wr;
  }
  // A lone mul_mat_id runs as itself; a producer needs one to share its pass.
  if (end - first >= (run.producer != nullptr ? 1u : 2u)) run.end = end;
  return run;
}

// The expert ids are checked before the producer or any matmul writes: a bad id fails the step
// with nothing of the run written, naming the run's first mul_mat_id node.
Status exec_mul_mat_id_run(const Graph& g, const std::vector<uint8_t*>& ptr, ThreadPool& pool,
                           const MatmulRun& run) {
  const size_t first = run.begin + (run.producer != nullptr ? 1 : 0);
  const ExecNode head{g, g.nodes[first], ptr, pool};
  if (Status s = check_expert_ids(head, 2, head.T(0).ne[2]); !s.is_ok()) {
    return s.with_context("node " + std::to_string(first) + " (mul_mat_id)");
  }
  std::array<MatmulIdArgs, kMaxIdMatrices> mats;
  for (size_t i = first; i < run.end; ++i) {
    mats[i - first] = mul_mat_id_args(ExecNode{g, g.nodes[i], ptr, pool});
  }
  const std::span<const MatmulIdArgs> span(mats.data(), run.end - first);
  if (run.producer == nullptr) {
    matmul_id_multi(pool, span);
    return Status::ok();
  }
  // The producer's rows are the pairs' columns.
  const ExecNode producer{g, g.nodes[run.begin], ptr, pool};
  const MatmulColumnsFn columns = [&run, &producer](int64_t p0, int64_t p1) {
    run.producer->rows(producer, p0, p1);
  };
  matmul_id_multi(pool, span, &columns);
  return Status::ok();
}

// --- The executor table: an op the graph layer knows but that has no row here is refused -------

struct ExecRow {
  Op op;
  OpExec run;
};
constexpr ExecRow kExecRows[] = {
    {Op::kGetRows, exec_get_rows},
    {Op::kRmsNorm, exec_rms_norm},
    {Op::kAdd, exec_add},
    {Op::kMul, exec_mul},
    {Op::kMulMat, exec_mul_mat},
    {Op::kRope, exec_rope},
    {Op::kSetRows, exec_set_rows},
    {Op::kAttention, exec_attention},
    {Op::kSwiglu, exec_swiglu},
    {Op::kArgmax, exec_argmax},
    {Op::kCopy, exec_copy},
    {Op::kRopeRates, exec_rope_rates},
    {Op::kScale, exec_scale},
    {Op::kGeglu, exec_geglu},
    {Op::kSoftcap, exec_softcap},
    {Op::kAttentionExt, exec_attention_ext},
    {Op::kRopeShift, exec_rope_shift},
    {Op::kSample, exec_sample},
    {Op::kMoeTopK, exec_moe_top_k},
    {Op::kMoeGate, exec_moe_gate},
    {Op::kMulMatId, exec_mul_mat_id},
    {Op::kMoeSum, exec_moe_sum},
    {Op::kAttentionSink, exec_attention_sink},
    {Op::kSwigluOai, exec_swiglu_oai},
    {Op::kAddId, exec_add_id},
};

constexpr std::array<OpExec, kOpIdLimit> make_exec_table() {
  std::array<OpExec, kOpIdLimit> table{};
  for (const ExecRow& row : kExecRows) table[static_cast<uint32_t>(row.op)] = row.run;
  return table;
}
constexpr auto kExec = make_exec_table();

OpExec executor(Op op) {
  const uint32_t id = static_cast<uint32_t>(op);
  return id < kOpIdLimit ? kExec[id] : nullptr;
}

}  // namespace

OpSet cpu_ops() {
  OpSet ops;
  for (const ExecRow& row : kExecRows) ops.set(static_cast<uint32_t>(row.op));
  return ops;
}

DeviceCaps cpu_device_caps() {
  DeviceCaps caps;
  caps.ops = cpu_ops() & op_set_all();
  caps.kv_planes = true;
  caps.kv_q8_0 = true;
  for (uint32_t id = 0; id < kDTypeIdLimit; ++id) {
    const DTypeInfo* info = dtype_info(id);
    if (info == nullptr || !info->has_kernels) continue;
    // A layout only where it pays: the engine stores weights in every layout a device offers.
    if (dtype_is_layout(info->dtype) && !dtype_layout_pays(info->dtype, isa_active())) continue;
    caps.weight_dtypes.set(id);
  }
  return caps;
}

Result<CpuPreparedGraph> cpu_graph_prepare(const Graph& graph, const CpuBufferTable& buffers) {
  STRATA_RETURN_IF_ERROR(graph_validate(graph));
  CpuPreparedGraph prepared;
  prepared.graph = &graph;
  prepared.generation = buffers.generation();
  prepared.ptr.resize(graph.tensors.size());
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const TensorRef& t = graph.tensors[i];
    uint64_t size = 0;
    uint8_t* base = buffers.resolve(t.buffer, &size);
    if (base == nullptr) {
      return invalid_argument("tensor " + std::to_string(i) + ": buffer " +
                              std::to_string(t.buffer) + " is not a buffer of this device");
    }
    STRATA_RETURN_IF_ERROR(check_placement(t, size).with_context("tensor " + std::to_string(i)));
    prepared.ptr[i] = base + t.offset;
  }
  // Every node's executor: a graph with an op this build cannot run fails before any node has
  // written anything.
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    if (executor(graph.nodes[k].op) == nullptr) {
      return unsupported("node " + std::to_string(k) + " (" + op_name(graph.nodes[k].op) +
                         "): the CPU backend has no kernel for this op");
    }
  }
  using Step = CpuPreparedGraph::Step;
  for (size_t k = 0; k < graph.nodes.size();) {
    Step step{Step::Kind::kNode, static_cast<uint32_t>(k), static_cast<uint32_t>(k + 1), 0};
    if (const MatmulRun mm = matmul_run_at(graph, prepared.ptr, k); mm.end > mm.begin) {
      step.kind = Step::Kind::kMatmuls;
      step.end = static_cast<uint32_t>(mm.end);
      step.producer =
          mm.producer == nullptr ? 0 : static_cast<uint8_t>(mm.producer - kProducers + 1);
    } else if (const MatmulRun id = mul_mat_id_run_at(graph, prepared.ptr, k); id.end > id.begin) {
      step.kind = Step::Kind::kMatmulIds;
      step.end = static_cast<uint32_t>(id.end);
      step.producer =
          id.producer == nullptr ? 0 : static_cast<uint8_t>(id.producer - kProducers + 1);
    }
    prepared.steps.push_back(step);
    k = step.end;
  }
  return prepared;
}

Status cpu_graph_run(const CpuPreparedGraph& prepared, ThreadPool& pool, OpTimes* times) {
  const Graph& graph = *prepared.graph;
  const std::vector<uint8_t*>& ptr = prepared.ptr;
  using Step = CpuPreparedGraph::Step;
  using Clock = std::chrono::steady_clock;
  // The error's context is built only on an error: a decode step runs hundreds of nodes.
  for (const Step& step : prepared.steps) {
    const size_t k = step.begin;
    const Clock::time_point start = times != nullptr ? Clock::now() : Clock::time_point{};
    switch (step.kind) {
      case Step::Kind::kMatmuls:
        exec_matmul_run(
            graph, ptr, pool,
            {k, step.end, step.producer == 0 ? nullptr : &kProducers[step.producer - 1]});
        break;
      case Step::Kind::kMatmulIds:
        STRATA_RETURN_IF_ERROR(exec_mul_mat_id_run(
            graph, ptr, pool,
            {k, step.end, step.producer == 0 ? nullptr : &kProducers[step.producer - 1]}));
        break;
      case Step::Kind::kNode: {
        const Node& node = graph.nodes[k];
        if (Status s = executor(node.op)(ExecNode{graph, node, ptr, pool}); !s.is_ok()) {
          return s.with_context("node " + std::to_string(k) + " (" + op_name(node.op) + ")");
        }
        break;
      }
    }
    if (times != nullptr) {
      const Op op = step.kind == Step::Kind::kMatmuls     ? Op::kMulMat
                    : step.kind == Step::Kind::kMatmulIds ? Op::kMulMatId
                                                          : graph.nodes[k].op;
      OpTime& t = (*times)[static_cast<uint32_t>(op)];
      t.ns.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
          std::memory_order_relaxed);
      t.calls.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return Status::ok();
}

Status cpu_graph_compute(const Graph& graph, const CpuBufferTable& buffers, ThreadPool& pool) {
  STRATA_ASSIGN_OR_RETURN(const CpuPreparedGraph prepared, cpu_graph_prepare(graph, buffers));
  return cpu_graph_run(prepared, pool);
}

}  // namespace strata
