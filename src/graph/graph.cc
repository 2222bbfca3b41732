#include "graph/graph.h"

#include <string>

#include "graph/op_table.h"

namespace strata {

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
constexpr int64_t kMaxTensorDim = int64_t{1} << 32;
constexpr int64_t kMaxElements = int64_t{1} << 40;

Status check_tensor(const TensorRef& t) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t.dtype));
  if (info == nullptr) {
    return invalid_argument("unknown dtype " + std::to_string(static_cast<uint32_t>(t.dtype)));
  }
  int64_t n = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    if (t.ne[d] < 1 || t.ne[d] > kMaxTensorDim) {
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

Status check_node(const Graph& g, const Node& node) {
  const OpInfo* info = op_info(static_cast<uint32_t>(node.op));
  if (info == nullptr) return invalid_argument("unknown op " + std::to_string(uint32_t(node.op)));
  const int64_t n_tensors = static_cast<int64_t>(g.tensors.size());
  auto valid = [&](int32_t i) { return i >= 0 && i < n_tensors; };
  if (!valid(node.out)) return invalid_argument("output index " + std::to_string(node.out));
  for (int s = 0; s < kMaxSrc; ++s) {
    const int32_t i = node.src[s];
    if (s < info->n_src) {
      if (i == -1 && (info->optional_src >> s & 1u) != 0) continue;
      if (!valid(i))
        return invalid_argument("src" + std::to_string(s) + " index " + std::to_string(i));
    } else if (i != -1) {
      return invalid_argument("src" + std::to_string(s) + " given to an op of " +
                              std::to_string(info->n_src) + " inputs");
    }
  }
  return info->validate(NodeView{g, node});
}

}  // namespace

Status graph_validate(const Graph& g) {
  // Runs every step: the context of a message is built only when there is one.
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    Status s = check_tensor(g.tensors[i]);
    if (!s.is_ok()) return s.with_context("tensor " + std::to_string(i));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Status s = check_node(g, g.nodes[i]);
    if (!s.is_ok()) {
      return s.with_context("node " + std::to_string(i) + " (" + op_name(g.nodes[i].op) + ")");
    }
  }
  return Status::ok();
}

}  // namespace strata
