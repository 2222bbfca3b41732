#include "graph/serialize.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "graph/op_table.h"

namespace strata {
namespace {

void put32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool op_known(uint32_t op) { return op_info(op) != nullptr; }

// Dims and strides whose products could wrap are refused here, before graph_validate and the
// device's placement check multiply them: a wrapped extent would pass a bounds check.
Status check_extent(const TensorRef& t) {
  int64_t n = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    if (t.ne[d] < 1 || t.ne[d] > (int64_t{1} << 32)) {
      return out_of_range("ne[" + std::to_string(d) + "] = " + std::to_string(t.ne[d]) +
                          " outside [1, 2^32]");
    }
    if (__builtin_mul_overflow(n, t.ne[d], &n) || n > (int64_t{1} << 40)) {
      return out_of_range("more than 2^40 elements");
    }
  }
  // offset + row + sum((ne[d] - 1) * nb[d]) must not wrap; the row is at most 2^40 elements of
  // at most 2^8 bytes per element.
  uint64_t end = t.offset;
  if (__builtin_add_overflow(end, static_cast<uint64_t>(t.ne[0]) << 8, &end)) {
    return out_of_range("offset " + std::to_string(t.offset) + " plus the row wraps");
  }
  for (int d = 1; d < kMaxDims; ++d) {
    uint64_t span = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[d] - 1), t.nb[d], &span) ||
        __builtin_add_overflow(end, span, &end)) {
      return out_of_range("ne[" + std::to_string(d) + "] * nb[" + std::to_string(d) +
                          "] = " + std::to_string(t.ne[d]) + " * " + std::to_string(t.nb[d]) +
                          " wraps past 2^64");
    }
  }
  return Status::ok();
}

}  // namespace

std::vector<uint8_t> graph_serialize(const Graph& g) {
  static_assert(kMaxSrc == 6, "the wire format's newest nodes carry six inputs");
  const bool six = std::any_of(g.nodes.begin(), g.nodes.end(),
                               [](const Node& n) { return n.src[kMaxSrc - 1] != -1; });
  const uint32_t version = six ? kGraphVersion : kGraphVersionFiveSrc;
  const int n_src = graph_node_srcs(version);
  std::vector<uint8_t> out;
  out.reserve(kGraphHeaderBytes + g.tensors.size() * kGraphTensorBytes +
              g.nodes.size() * graph_node_bytes(version));
  put32(&out, kGraphMagic);
  put32(&out, version);
  put32(&out, static_cast<uint32_t>(g.tensors.size()));
  put32(&out, static_cast<uint32_t>(g.nodes.size()));
  for (const TensorRef& t : g.tensors) {
    put64(&out, t.buffer);
    put64(&out, t.offset);
    put32(&out, static_cast<uint32_t>(t.dtype));
    put32(&out, 0);
    for (int d = 0; d < kMaxDims; ++d) put64(&out, static_cast<uint64_t>(t.ne[d]));
    for (int d = 0; d < kMaxDims; ++d) put64(&out, t.nb[d]);
  }
  for (const Node& n : g.nodes) {
    put32(&out, static_cast<uint32_t>(n.op));
    for (int s = 0; s < n_src; ++s) put32(&out, static_cast<uint32_t>(n.src[s]));
    put32(&out, static_cast<uint32_t>(n.out));
    for (int k = 0; k < kMaxParams; ++k) put32(&out, static_cast<uint32_t>(n.iparams[k]));
    for (int k = 0; k < kMaxParams; ++k) {
      uint32_t bits;
      std::memcpy(&bits, &n.fparams[k], 4);
      put32(&out, bits);
    }
  }
  return out;
}

Result<Graph> graph_deserialize(std::span<const uint8_t> bytes) {
  if (bytes.size() < kGraphHeaderBytes) {
    return invalid_argument("graph: " + std::to_string(bytes.size()) +
                            " bytes, shorter than the 16-byte header");
  }
  const uint8_t* p = bytes.data();
  const uint32_t magic = static_cast<uint32_t>(get(p, 4));
  const uint32_t version = static_cast<uint32_t>(get(p + 4, 4));
  const uint32_t n_tensors = static_cast<uint32_t>(get(p + 8, 4));
  const uint32_t n_nodes = static_cast<uint32_t>(get(p + 12, 4));
  if (magic != kGraphMagic) {
    return invalid_argument("graph field 'magic': " + std::to_string(magic) + " is not a graph");
  }
  if (version != kGraphVersion && version != kGraphVersionFiveSrc) {
    return unsupported("graph field 'version': " + std::to_string(version) + ", this build reads " +
                       std::to_string(kGraphVersionFiveSrc) + " and " +
                       std::to_string(kGraphVersion));
  }
  const size_t node_bytes = graph_node_bytes(version);
  const int n_src = graph_node_srcs(version);
  if (n_tensors > kMaxGraphTensors) {
    return out_of_range("graph field 'n_tensors': " + std::to_string(n_tensors) + ", limit " +
                        std::to_string(kMaxGraphTensors));
  }
  if (n_nodes > kMaxGraphNodes) {
    return out_of_range("graph field 'n_nodes': " + std::to_string(n_nodes) + ", limit " +
                        std::to_string(kMaxGraphNodes));
  }
  // Counts are under 2^16 and record sizes under 2^7: the products and sum fit in 64 bits.
  const uint64_t expect =
      kGraphHeaderBytes + uint64_t{n_tensors} * kGraphTensorBytes + uint64_t{n_nodes} * node_bytes;
  if (bytes.size() != expect) {
    return invalid_argument("graph: " + std::to_string(bytes.size()) + " bytes, but " +
                            std::to_string(n_tensors) + " tensors and " + std::to_string(n_nodes) +
                            " nodes need " + std::to_string(expect));
  }
  Graph g;
  g.tensors.resize(n_tensors);
  g.nodes.resize(n_nodes);
  p += kGraphHeaderBytes;
  for (uint32_t i = 0; i < n_tensors; ++i, p += kGraphTensorBytes) {
    TensorRef& t = g.tensors[i];
    t.buffer = get(p, 8);
    t.offset = get(p + 8, 8);
    const uint32_t dtype = static_cast<uint32_t>(get(p + 16, 4));
    const uint32_t reserved = static_cast<uint32_t>(get(p + 20, 4));
    const std::string where = "graph tensor " + std::to_string(i);
    if (dtype_info(dtype) == nullptr) {
      return invalid_argument(where + " field 'dtype': unknown dtype " + std::to_string(dtype));
    }
    if (reserved != 0) return invalid_argument(where + " field 'reserved': must be 0");
    t.dtype = static_cast<DType>(dtype);
    for (int d = 0; d < kMaxDims; ++d) t.ne[d] = static_cast<int64_t>(get(p + 24 + 8 * d, 8));
    for (int d = 0; d < kMaxDims; ++d) t.nb[d] = get(p + 56 + 8 * d, 8);
    STRATA_RETURN_IF_ERROR(check_extent(t).with_context(where));
  }
  for (uint32_t i = 0; i < n_nodes; ++i, p += node_bytes) {
    Node& n = g.nodes[i];
    const uint32_t op = static_cast<uint32_t>(get(p, 4));
    const std::string where = "graph node " + std::to_string(i);
    if (!op_known(op))
      return invalid_argument(where + " field 'op': unknown op " + std::to_string(op));
    n.op = static_cast<Op>(op);
    // The fields after src[] move by 4 bytes per input (Node's defaults: no further inputs).
    for (int s = 0; s < n_src; ++s) n.src[s] = static_cast<int32_t>(get(p + 4 + 4 * s, 4));
    const uint8_t* q = p + 4 + 4 * n_src;
    n.out = static_cast<int32_t>(get(q, 4));
    for (int k = 0; k < kMaxParams; ++k) n.iparams[k] = static_cast<int32_t>(get(q + 4 + 4 * k, 4));
    for (int k = 0; k < kMaxParams; ++k) {
      const uint32_t bits = static_cast<uint32_t>(get(q + 20 + 4 * k, 4));
      std::memcpy(&n.fparams[k], &bits, 4);
    }
    // Indices first: graph_validate also checks them, but a clear message names the field.
    auto dangling = [&](int32_t idx) { return idx < 0 || static_cast<uint32_t>(idx) >= n_tensors; };
    if (dangling(n.out)) {
      return invalid_argument(where + " field 'out': " + std::to_string(n.out) +
                              " names no tensor (graph has " + std::to_string(n_tensors) + ")");
    }
    for (int s = 0; s < kMaxSrc; ++s) {
      if (n.src[s] != -1 && dangling(n.src[s])) {
        return invalid_argument(where + " field 'src[" + std::to_string(s) +
                                "]': " + std::to_string(n.src[s]) + " names no tensor (graph has " +
                                std::to_string(n_tensors) + ")");
      }
    }
  }
  STRATA_RETURN_IF_ERROR(graph_validate(g).with_context("graph"));
  return g;
}

}  // namespace strata
