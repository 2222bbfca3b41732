// Graph execution on host memory: resolve and bounds-check every tensor, then run the kernels.
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/matmul.h"
#include "core/ops.h"

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

Status run_node(const Graph& g, const Node& node, const std::vector<uint8_t*>& ptr,
                ThreadPool& pool) {
  const TensorRef& out = g.tensors[node.out];
  auto T = [&](int s) -> const TensorRef& { return g.tensors[node.src[s]]; };
  auto F = [&](int s) { return reinterpret_cast<float*>(ptr[node.src[s]]); };
  auto I = [&](int s) { return reinterpret_cast<const int32_t*>(ptr[node.src[s]]); };
  float* y = reinterpret_cast<float*>(ptr[node.out]);
  auto floats = [](uint64_t bytes) { return static_cast<size_t>(bytes / sizeof(float)); };

  switch (node.op) {
    case Op::kGetRows: {
      STRATA_RETURN_IF_ERROR(check_indices(I(1), T(1).ne[0], T(0).ne[1], "ids"));
      get_rows(pool, T(0).dtype, ptr[node.src[0]], T(0).nb[1], T(0).ne[0], I(1), T(1).ne[0], y,
               floats(out.nb[1]));
      return Status::ok();
    }
    case Op::kRmsNorm:
      if (!rows_uniform(T(0)) || !rows_uniform(out)) return invalid_argument("rows not uniform");
      rms_norm(pool, F(0), floats(T(0).nb[1]), node.src[1] >= 0 ? F(1) : nullptr, y,
               floats(out.nb[1]), T(0).ne[0], T(0).n_rows(), node.fparams[0]);
      return Status::ok();
    case Op::kAdd:
    case Op::kMul:
      if (!rows_uniform(T(0)) || !rows_uniform(T(1)) || !rows_uniform(out)) {
        return invalid_argument("rows not uniform");
      }
      binary(pool, node.op == Op::kAdd ? BinaryOp::kAdd : BinaryOp::kMul, F(0), floats(T(0).nb[1]),
             F(1), floats(T(1).nb[1]), T(1).n_rows(), y, floats(out.nb[1]), T(0).ne[0],
             T(0).n_rows());
      return Status::ok();
    case Op::kSwiglu:
      if (!rows_uniform(T(0)) || !rows_uniform(T(1)) || !rows_uniform(out)) {
        return invalid_argument("rows not uniform");
      }
      swiglu(pool, F(0), floats(T(0).nb[1]), F(1), floats(T(1).nb[1]), y, floats(out.nb[1]),
             T(0).ne[0], T(0).n_rows());
      return Status::ok();
    case Op::kMulMat:
      if (!rows_uniform(T(1)) || !rows_uniform(out)) return invalid_argument("rows not uniform");
      matmul(pool, T(0).dtype, ptr[node.src[0]], T(0).nb[1], T(0).ne[1], T(0).ne[0], F(1),
             floats(T(1).nb[1]), T(1).n_rows(), y, floats(out.nb[1]));
      return Status::ok();
    case Op::kRope: {
      const TensorRef& x = T(0);
      if (node.src[0] != node.out && ptr[node.src[0]] != ptr[node.out]) {
        for (int64_t t = 0; t < x.ne[2]; ++t) {
          std::memcpy(reinterpret_cast<uint8_t*>(y) + t * out.nb[2], ptr[node.src[0]] + t * x.nb[2],
                      static_cast<size_t>(x.nb[1] * x.ne[1]));
        }
      }
      rope(pool, y, x.ne[0], x.ne[1], x.ne[2], floats(out.nb[2]), I(1), node.iparams[0],
           static_cast<RopeMode>(node.iparams[1]), node.fparams[0], node.fparams[1]);
      return Status::ok();
    }
    case Op::kSetRows: {
      if (!rows_uniform(T(1))) return invalid_argument("rows not uniform");
      STRATA_RETURN_IF_ERROR(check_indices(I(2), T(2).ne[0], T(0).ne[1], "cells"));
      set_rows(pool, T(0).dtype, ptr[node.src[0]], T(0).nb[1], F(1), floats(T(1).nb[1]), T(1).ne[0],
               I(2), T(2).ne[0]);
      return Status::ok();
    }
    case Op::kAttention: {
      const TensorRef& q = T(0);
      const TensorRef& cells = T(3);
      const int64_t max_len = cells.ne[0];
      const int64_t n_lists = cells.n_rows();
      STRATA_RETURN_IF_ERROR(check_indices(I(3), cells.n_elements(), T(1).ne[1], "cells"));
      const int32_t* tok = I(4);
      for (int64_t t = 0; t < q.ne[2]; ++t) {
        if (tok[2 * t] < 0 || tok[2 * t] >= n_lists || tok[2 * t + 1] < 1 ||
            tok[2 * t + 1] > max_len) {
          return out_of_range("tok[" + std::to_string(t) + "] = (" + std::to_string(tok[2 * t]) +
                              ", " + std::to_string(tok[2 * t + 1]) + ") outside " +
                              std::to_string(n_lists) + " lists of " + std::to_string(max_len));
        }
      }
      if (!rows_uniform(q) || !rows_uniform(out)) return invalid_argument("rows not uniform");
      const float scale = node.fparams[0];
      attention(pool, F(0), floats(q.nb[2]), q.ne[0], q.ne[1], q.ne[2], T(1).dtype,
                ptr[node.src[1]], ptr[node.src[2]], T(1).nb[1], node.iparams[0], I(3), max_len, tok,
                scale, y, floats(out.nb[2]));
      return Status::ok();
    }
    case Op::kArgmax:
      if (!rows_uniform(T(0))) return invalid_argument("rows not uniform");
      argmax(pool, F(0), floats(T(0).nb[1]), T(0).ne[0], T(0).n_rows(),
             reinterpret_cast<int32_t*>(y));
      return Status::ok();
    case Op::kCopy: {
      const TensorRef& x = T(0);
      if (!rows_uniform(x) || !rows_uniform(out)) return invalid_argument("rows not uniform");
      for (int64_t r = 0; r < x.n_rows(); ++r) {
        std::memmove(ptr[node.out] + r * out.nb[1], ptr[node.src[0]] + r * x.nb[1],
                     static_cast<size_t>(x.ne[0]) * sizeof(float));
      }
      return Status::ok();
    }
  }
  return invalid_argument("unknown op");
}

}  // namespace

Status cpu_graph_compute(const Graph& graph, const CpuBufferTable& buffers, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(graph_validate(graph));
  std::vector<uint8_t*> ptr(graph.tensors.size());
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const TensorRef& t = graph.tensors[i];
    uint64_t size = 0;
    uint8_t* base = buffers.resolve(t.buffer, &size);
    if (base == nullptr) {
      return invalid_argument("tensor " + std::to_string(i) + ": buffer " +
                              std::to_string(t.buffer) + " is not a buffer of this device");
    }
    STRATA_RETURN_IF_ERROR(check_placement(t, size).with_context("tensor " + std::to_string(i)));
    ptr[i] = base + t.offset;
  }
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    STRATA_RETURN_IF_ERROR(
        run_node(graph, graph.nodes[k], ptr, pool)
            .with_context("node " + std::to_string(k) + " (" + op_name(graph.nodes[k].op) + ")"));
  }
  return Status::ok();
}

}  // namespace strata
