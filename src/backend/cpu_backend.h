// The CPU device. Its streams are truly asynchronous (one worker thread per stream), so every
// asynchronous path of the engine runs and is tested on the CPU, not only on remote devices.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "graph/op_table.h"

namespace strata {

struct CpuDeviceOptions {
  int n_threads = 1;
  std::string name = "CPU";
  uint64_t memory_limit = 0;  // 0: the machine's available memory
};

// Buffers are named by handles that the device resolves, and checks, for every graph: a graph
// that names a buffer of another device, or a region past a buffer's end, is an error, never a
// stray access. Streams of one device share its thread pool, one computation at a time, except
// the streams made with pools of their own (create_stream_on: a pipeline group's), which compute
// on those and never wait for another group.
std::unique_ptr<Device> cpu_device_new(const CpuDeviceOptions& options);

// Runs a graph whose tensors are resolved to host memory; every index in the data (ids,
// cells) is checked before the kernel that uses it. Used by the CPU device and by the worker.
class CpuBufferTable {
 public:
  virtual ~CpuBufferTable() = default;
  // The host memory and size of a handle, or nullptr when the handle names no buffer.
  virtual uint8_t* resolve(uint64_t handle, uint64_t* size) const = 0;
  // Changes whenever a buffer comes or goes: what resolved at one generation resolves the same
  // while it lasts (CpuPreparedGraph::placed_in).
  virtual uint64_t generation() const = 0;
};
// Ops are run through a table of executors indexed by Op; a node whose op has no executor
// fails with kUnsupported before any node runs.
Status cpu_graph_compute(const Graph& graph, const CpuBufferTable& buffers, ThreadPool& pool);
// cpu_graph_compute in two parts, for a graph that runs step after step: the checks of the
// graph (graph_validate, every tensor inside a buffer of the table, every op with an executor)
// and its tensors' host addresses, then runs. A prepared graph stays valid while `graph` lives
// and it is placed_in the table (a decode step's graph, about 400 nodes: the checks took 50 us
// of every step).
struct CpuPreparedGraph {
  const Graph* graph = nullptr;
  uint64_t generation = 0;    // the buffer table's, when the graph was placed in it
  std::vector<uint8_t*> ptr;  // per tensor of the graph
  // The order it runs in: node `begin` alone, or nodes [begin, end) in one pass: matmuls of one
  // input (after the row op that writes it, a row of cpu_exec.cc's producer table counted from 1,
  // when `producer` > 0), or mul_mat_ids of one input and experts. Found once: it depends on the
  // graph and on where its tensors are (a node that writes what another reads ends a run).
  struct Step {
    enum class Kind : uint8_t { kNode, kMatmuls, kMatmulIds };
    Kind kind = Kind::kNode;
    uint32_t begin = 0;
    uint32_t end = 0;
    uint8_t producer = 0;
  };
  std::vector<Step> steps;

  // Whether it is placed in `buffers` as they are now: no buffer came or went since.
  bool placed_in(const CpuBufferTable& buffers) const {
    return graph != nullptr && generation == buffers.generation();
  }
};
Result<CpuPreparedGraph> cpu_graph_prepare(const Graph& graph, const CpuBufferTable& buffers);
// With `times`, each step's time is added to its op's entry (OpTimes says how runs count).
Status cpu_graph_run(const CpuPreparedGraph& prepared, ThreadPool& pool, OpTimes* times = nullptr);
// The ops that have an executor here.
OpSet cpu_ops();
// What the CPU device runs: the ops of the op table that have an executor, and the weight dtypes
// that have kernels in the dtype table.
DeviceCaps cpu_device_caps();

}  // namespace strata
