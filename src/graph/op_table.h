// The op table: one row per Op with what every layer needs to know about it (its name, its
// inputs, which of them are optional, and the check of its dtypes, shapes and parameters).
// Validation, serialisation, the backends' executors and the devices' capability bits read it,
// so that a new op is a row here, its kernel with a row in each backend's executor table, and
// a row in the op-case test table (tests/unit/op_cases_test.cc); no switch elsewhere names every
// op.
//
// Non-goal: describing what an op computes; the Op enum's comments (graph.h) say that.
#pragma once

#include <bitset>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "graph/graph.h"

namespace strata {

// A node as its validator (and a backend's executor) sees it: every index in it names a
// tensor of the graph, and every input the op needs is there unless the table marks it
// optional.
struct NodeView {
  const Graph& graph;
  const Node& node;
  const TensorRef& src(int s) const { return graph.tensors[static_cast<size_t>(node.src[s])]; }
  bool has_src(int s) const { return node.src[s] >= 0; }
  const TensorRef& out() const { return graph.tensors[static_cast<size_t>(node.out)]; }
};

// Checks a node's dtypes, shapes and parameters; the message says what is wrong (graph_validate
// adds the node and op).
using OpValidator = Status (*)(const NodeView& n);

struct OpInfo {
  Op op;
  const char* name;       // as messages and capability reports print it
  int n_src;              // inputs: src[0, n_src) are used, src[n_src, kMaxSrc) must be -1
  uint32_t optional_src;  // bit s: src[s] may be -1
  // The input whose dtype picks the kernel (a weight or a table, any dtype with kernels), or -1:
  // what a device must support beyond the op itself (backend.h, DeviceCaps).
  int weight_src;
  OpValidator validate;
  // Bit s: src[s] is a KV cache, which the op takes in planes ([n, cells, planes], a plane per
  // kv head: the head-major cache) as well as [n, cells]. A graph that gives one in more than
  // one plane needs a device that takes them (DeviceCaps::kv_planes), and one in q8_0 a device
  // that takes q8_0 caches (DeviceCaps::kv_q8_0).
  uint32_t cache_src = 0;
};

// Every op value is below this: the size of capability sets (bit i: the op of value i).
constexpr uint32_t kOpIdLimit = 256;
using OpSet = std::bitset<kOpIdLimit>;

// nullptr for a value that names no op (the value came from a peer: check it).
const OpInfo* op_info(uint32_t id);
const OpInfo& op_info(Op op);
// Every row, in the order of the op values.
std::span<const OpInfo> op_table();
// Every op of the table.
OpSet op_set_all();
// The row of the op of that name ("mul_mat"), or nullptr.
const OpInfo* op_info_by_name(std::string_view name);

}  // namespace strata
