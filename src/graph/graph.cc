#include "graph/graph.h"

#include <string>

namespace strata {

const char* op_name(Op op) {
  switch (op) {
    case Op::kGetRows:
      return "get_rows";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kAdd:
      return "add";
    case Op::kMul:
      return "mul";
    case Op::kMulMat:
      return "mul_mat";
    case Op::kRope:
      return "rope";
    case Op::kSetRows:
      return "set_rows";
    case Op::kAttention:
      return "attention";
    case Op::kSwiglu:
      return "swiglu";
    case Op::kArgmax:
      return "argmax";
    case Op::kCopy:
      return "copy";
  }
  return "unknown";
}

int op_n_src(Op op) {
  switch (op) {
    case Op::kGetRows:
    case Op::kRmsNorm:
    case Op::kAdd:
    case Op::kMul:
    case Op::kMulMat:
    case Op::kRope:
    case Op::kSwiglu:
      return 2;
    case Op::kSetRows:
      return 3;
    case Op::kAttention:
      return 5;
    case Op::kArgmax:
    case Op::kCopy:
      return 1;
  }
  return -1;
}

bool TensorRef::rows_contiguous() const {
  return nb[0] == dtype_block_bytes(dtype) && (ne[0] % dtype_block_size(dtype)) == 0;
}

bool TensorRef::contiguous() const {
  if (!rows_contiguous()) return false;
  uint64_t expect = dtype_row_bytes(dtype, ne[0]);
  for (int d = 1; d < kMaxDims; ++d) {
    if (ne[d] > 1 && nb[d] != expect) return false;
    expect *= static_cast<uint64_t>(ne[d]);
  }
  return true;
}

uint64_t TensorRef::extent_bytes() const {
  uint64_t end = dtype_row_bytes(dtype, ne[0]);
  for (int d = 1; d < kMaxDims; ++d) end += static_cast<uint64_t>(ne[d] - 1) * nb[d];
  return end;
}

TensorRef make_tensor(uint64_t buffer, uint64_t offset, DType dtype, int64_t ne0, int64_t ne1,
                      int64_t ne2, int64_t ne3) {
  TensorRef t;
  t.buffer = buffer;
  t.offset = offset;
  t.dtype = dtype;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  t.ne[2] = ne2;
  t.ne[3] = ne3;
  t.nb[0] = dtype_block_bytes(dtype);
  t.nb[1] = dtype_row_bytes(dtype, ne0);
  t.nb[2] = t.nb[1] * static_cast<uint64_t>(ne1);
  t.nb[3] = t.nb[2] * static_cast<uint64_t>(ne2);
  return t;
}

namespace {

// The largest dimension and element count a graph may name. A denial-of-service bound: no
// model we run has a tensor of more than 2^40 elements, and products of dims stay in int64.
constexpr int64_t kMaxDim = int64_t{1} << 32;
constexpr int64_t kMaxElements = int64_t{1} << 40;

Status check_tensor(const TensorRef& t) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t.dtype));
  if (info == nullptr) {
    return invalid_argument("unknown dtype " + std::to_string(static_cast<uint32_t>(t.dtype)));
  }
  int64_t n = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    if (t.ne[d] < 1 || t.ne[d] > kMaxDim) {
      return out_of_range("ne[" + std::to_string(d) + "] = " + std::to_string(t.ne[d]) +
                          " outside [1, 2^32]");
    }
    if (n > kMaxElements / t.ne[d]) return out_of_range("more than 2^40 elements");
    n *= t.ne[d];
  }
  if (t.ne[0] % info->block_size != 0) {
    return invalid_argument("ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                            std::string(info->name) + " block size " +
                            std::to_string(info->block_size));
  }
  if (t.nb[0] != info->block_bytes) {
    return invalid_argument("nb[0] = " + std::to_string(t.nb[0]) + " is not the element size " +
                            std::to_string(info->block_bytes) + " (rows must be packed)");
  }
  // Strides may leave gaps but rows may not overlap their neighbours in dim 1.
  const uint64_t row = dtype_row_bytes(t.dtype, t.ne[0]);
  if (t.ne[1] > 1 && t.nb[1] < row) {
    return invalid_argument("nb[1] = " + std::to_string(t.nb[1]) + " is less than a row (" +
                            std::to_string(row) + " bytes)");
  }
  // The extent (what placement checks compare with a buffer's size) must not wrap.
  uint64_t extent = row;
  for (int d = 1; d < kMaxDims; ++d) {
    if (t.nb[d] > (uint64_t{1} << 48)) return out_of_range("nb[" + std::to_string(d) + "] > 2^48");
    uint64_t span = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[d] - 1), t.nb[d], &span) ||
        __builtin_add_overflow(extent, span, &extent) || extent > (uint64_t{1} << 62)) {
      return out_of_range("the tensor spans more than 2^62 bytes");
    }
  }
  return Status::ok();
}

bool same_shape(const TensorRef& a, const TensorRef& b) {
  for (int d = 0; d < kMaxDims; ++d) {
    if (a.ne[d] != b.ne[d]) return false;
  }
  return true;
}

std::string shape_str(const TensorRef& t) {
  return "[" + std::to_string(t.ne[0]) + ", " + std::to_string(t.ne[1]) + ", " +
         std::to_string(t.ne[2]) + ", " + std::to_string(t.ne[3]) + "]";
}

Status check_node(const Graph& g, const Node& node) {
  const int n_src = op_n_src(node.op);
  if (n_src < 0) return invalid_argument("unknown op " + std::to_string(uint32_t(node.op)));
  const int64_t n_tensors = static_cast<int64_t>(g.tensors.size());
  auto valid = [&](int32_t i) { return i >= 0 && i < n_tensors; };
  if (!valid(node.out)) return invalid_argument("output index " + std::to_string(node.out));
  const bool optional_src1 = node.op == Op::kRmsNorm;
  for (int s = 0; s < kMaxSrc; ++s) {
    const int32_t i = node.src[s];
    if (s < n_src) {
      if (i == -1 && optional_src1 && s == 1) continue;
      if (!valid(i))
        return invalid_argument("src" + std::to_string(s) + " index " + std::to_string(i));
    } else if (i != -1) {
      return invalid_argument("src" + std::to_string(s) + " given to an op of " +
                              std::to_string(n_src) + " inputs");
    }
  }
  const TensorRef& out = g.tensors[node.out];
  auto src = [&](int s) -> const TensorRef& { return g.tensors[node.src[s]]; };
  auto need = [](bool ok, const std::string& what) {
    return ok ? Status::ok() : invalid_argument(what);
  };
  // For messages that print shapes: built only on failure (graphs are checked every step).
  auto need_lazy = [](bool ok, const auto& what) {
    return ok ? Status::ok() : invalid_argument(what());
  };
  auto is_f32 = [](const TensorRef& t) { return t.dtype == DType::kF32; };
  auto is_i32 = [](const TensorRef& t) { return t.dtype == DType::kI32; };
  switch (node.op) {
    case Op::kGetRows:
      STRATA_RETURN_IF_ERROR(
          need(dtype_info(src(0).dtype).has_kernels, "table dtype has no kernels"));
      STRATA_RETURN_IF_ERROR(
          need(is_i32(src(1)) && src(1).contiguous(), "ids must be contiguous i32"));
      return need_lazy(
          is_f32(out) && out.ne[0] == src(0).ne[0] && out.ne[1] == src(1).ne[0] && out.ne[2] == 1 &&
              out.ne[3] == 1 && src(0).ne[2] == 1 && src(0).ne[3] == 1,
          [&] { return "out must be f32 [n, ids] of table [n, rows]: out " + shape_str(out); });
    case Op::kRmsNorm:
      if (node.src[1] != -1) {
        STRATA_RETURN_IF_ERROR(need(is_f32(src(1)) && src(1).ne[0] == src(0).ne[0] &&
                                        src(1).n_rows() == 1 && src(1).contiguous(),
                                    "weight must be f32 [n]"));
      }
      return need(is_f32(src(0)) && is_f32(out) && same_shape(src(0), out),
                  "x and out must be f32 of one shape");
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
      return need_lazy(
          is_f32(src(0)) && is_f32(src(1)) && is_f32(out) && same_shape(src(0), out) &&
              src(1).ne[0] == src(0).ne[0] &&
              (src(1).n_rows() == src(0).n_rows() ||
               (node.op != Op::kSwiglu && src(1).n_rows() == 1)),
          [&] {
            return "operands must be f32 [n, r] (b may be [n, 1]): " + shape_str(src(0)) + " " +
                   shape_str(src(1)) + " -> " + shape_str(out);
          });
    case Op::kMulMat:
      STRATA_RETURN_IF_ERROR(
          need(dtype_info(src(0).dtype).has_kernels, "weight dtype has no kernels"));
      return need_lazy(is_f32(src(1)) && is_f32(out) && src(0).ne[0] == src(1).ne[0] &&
                           src(0).ne[2] == 1 && src(0).ne[3] == 1 && out.ne[0] == src(0).ne[1] &&
                           out.n_rows() == src(1).n_rows() && out.rows_contiguous() &&
                           out.ne[2] == src(1).ne[2] && out.ne[3] == src(1).ne[3],
                       [&] {
                         return "mul_mat shapes: w " + shape_str(src(0)) + " x " +
                                shape_str(src(1)) + " -> " + shape_str(out);
                       });
    case Op::kRope:
      STRATA_RETURN_IF_ERROR(
          need(node.iparams[0] > 0 && node.iparams[0] <= src(0).ne[0] && node.iparams[0] % 2 == 0,
               "n_rot must be even and in (0, head_dim]"));
      STRATA_RETURN_IF_ERROR(
          need(node.iparams[1] == 0 || node.iparams[1] == 2, "rope mode 0 or 2"));
      return need(is_f32(src(0)) && is_i32(src(1)) && is_f32(out) && same_shape(src(0), out) &&
                      src(1).ne[0] == src(0).ne[2] && src(0).ne[3] == 1 &&
                      src(0).nb[1] == src(0).nb[0] * src(0).ne[0] && out.nb[1] == src(0).nb[1] &&
                      out.nb[2] == src(0).nb[2],
                  "rope: x f32 [hd, heads, t] with packed heads, pos i32 [t]");
    case Op::kSetRows:
      return need((src(0).dtype == DType::kF16 || is_f32(src(0))) && is_f32(src(1)) &&
                      is_i32(src(2)) && src(1).ne[0] == src(0).ne[0] &&
                      src(2).ne[0] == src(1).n_rows() && node.out == node.src[0],
                  "set_rows: cache f16/f32 [n, cells], rows f32 [n, t], idx i32 [t], in place");
    case Op::kAttention: {
      const TensorRef& q = src(0);
      const int64_t kv_heads = node.iparams[0];
      STRATA_RETURN_IF_ERROR(
          need(kv_heads >= 1 && q.ne[1] % kv_heads == 0, "kv_heads must divide the query heads"));
      STRATA_RETURN_IF_ERROR(need(src(1).dtype == src(2).dtype &&
                                      (src(1).dtype == DType::kF16 || is_f32(src(1))) &&
                                      src(1).ne[0] == q.ne[0] * kv_heads &&
                                      src(2).ne[0] == src(1).ne[0] && src(1).nb[1] == src(2).nb[1],
                                  "k and v caches must be f16/f32 [hd*kv_heads, cells] alike"));
      STRATA_RETURN_IF_ERROR(need(is_i32(src(3)) && src(3).contiguous() && is_i32(src(4)) &&
                                      src(4).contiguous() && src(4).ne[0] == 2 &&
                                      src(4).ne[1] == q.ne[2],
                                  "cells i32 [len, lists] and tok i32 [2, t]"));
      return need(is_f32(q) && is_f32(out) && same_shape(q, out) && q.nb[1] == q.nb[0] * q.ne[0] &&
                      out.nb[1] == out.nb[0] * out.ne[0],
                  "q and out must be f32 [hd, heads, t] with packed heads");
    }
    case Op::kArgmax:
      return need(is_f32(src(0)) && is_i32(out) && out.ne[0] == src(0).n_rows() && out.contiguous(),
                  "argmax: f32 [n, r] -> i32 [r]");
    case Op::kCopy:
      return need(is_f32(src(0)) && is_f32(out) && same_shape(src(0), out),
                  "copy: f32 of one shape");
  }
  return invalid_argument("unknown op");
}

}  // namespace

Status graph_validate(const Graph& g) {
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    STRATA_RETURN_IF_ERROR(check_tensor(g.tensors[i]).with_context("tensor " + std::to_string(i)));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    STRATA_RETURN_IF_ERROR(
        check_node(g, g.nodes[i])
            .with_context("node " + std::to_string(i) + " (" + op_name(g.nodes[i].op) + ")"));
  }
  return Status::ok();
}

}  // namespace strata
