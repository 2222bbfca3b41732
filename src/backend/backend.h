// Devices, buffers and streams: where graphs run.
//
// A Device allocates Buffers and makes Streams. A Stream is a queue: writes, reads and graph
// computations run in the order they were queued, asynchronously to the caller; an Event marks
// a point in a queue that the host or another stream can wait for. Errors of queued work are
// reported by the next synchronize() (or Event wait) of that stream; after an error the stream
// drops the work queued behind it until synchronize() has reported it.
// Optional members say so and have a default that declines.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_table.h"

namespace strata {

class ThreadPool;

// Where a CPU stream computes when it has pools of its own (a pipeline group's), instead of the
// device's pool that its other streams share. Borrowed: the pools outlive the stream.
struct StreamPools {
  ThreadPool* pool = nullptr;        // steps of one token (decoding)
  ThreadPool* pool_batch = nullptr;  // steps of several tokens (prompts); null: `pool`
};

// The time a stream's computations spent in each op, indexed by the op's id, for a profile
// (strata bench --ops). A fused run of matmuls (one pass over several weights, with the norm or
// activation that feeds it) counts as one mul_mat call, a run of expert matmuls as one
// mul_mat_id. Atomic: the streams of a context's stages (several CPU devices) add at once.
struct OpTime {
  std::atomic<int64_t> ns{0};
  std::atomic<int64_t> calls{0};
};
using OpTimes = std::array<OpTime, kOpIdLimit>;

struct DeviceInfo {
  std::string name;         // "CPU", "RPC0[host:port]"
  std::string description;  // human readable: ISA, threads, endpoint
  uint64_t memory_total = 0;
  uint64_t memory_free = 0;
  uint64_t alignment = 64;
  uint64_t max_buffer_size = 0;
};

// Every dtype id is below this: the size of dtype sets (bit i: the DType of id i).
constexpr uint32_t kDTypeIdLimit = 256;
using DTypeSet = std::bitset<kDTypeIdLimit>;

// What a device can run: its ops, and the dtypes its kernels take for an op's weight input (the
// op table's weight_src: mul_mat's weights, get_rows' table). The engine refuses to place a
// stage whose graph needs anything else, before any of the stage's weights is uploaded.
struct DeviceCaps {
  OpSet ops;
  DTypeSet weight_dtypes;
  // Its set_rows, get_rows, rope_shift and attention take KV caches in planes, one per kv head
  // ([head_dim, cells, kv_heads]: the engine's head-major cache, docs/engine.md). A device of
  // an earlier release takes only [head_dim * kv_heads, cells].
  bool kv_planes = false;
  // Its set_rows, get_rows, rope_shift and attention take q8_0 KV caches (-ctk q8_0). A device
  // of an earlier release takes f16 and f32 caches only.
  bool kv_q8_0 = false;

  // What either needs (or has): every field's union.
  DeviceCaps& operator|=(const DeviceCaps& o) {
    ops |= o.ops;
    weight_dtypes |= o.weight_dtypes;
    kv_planes = kv_planes || o.kv_planes;
    kv_q8_0 = kv_q8_0 || o.kv_q8_0;
    return *this;
  }
};

// What every device could run before devices reported what they run: the ops of values 1..11
// (get_rows to copy) and the weight dtypes f32, f16, q4_0, q8_0, q4_K, q5_K, q6_K and bf16.
// Fixed for good: a worker of that time (it sends no op bits in HELLO) is taken to have exactly
// this set, whatever the tables of this build hold.
constexpr uint64_t kBaselineOpBits = 0xffe;  // bits 1..11
constexpr uint64_t kBaselineWeightDTypeBits =
    (uint64_t{1} << 0) | (uint64_t{1} << 1) | (uint64_t{1} << 2) | (uint64_t{1} << 8) |
    (uint64_t{1} << 12) | (uint64_t{1} << 13) | (uint64_t{1} << 14) | (uint64_t{1} << 30);
inline DeviceCaps device_caps_baseline() {
  return DeviceCaps{OpSet(kBaselineOpBits), DTypeSet(kBaselineWeightDTypeBits)};
}

// What a graph needs of its device: its nodes' ops and the dtypes of their weight inputs.
DeviceCaps graph_needs(const Graph& g);
// What `need` has that `have` lacks, as "op 'swiglu', weight dtype q6_K"; empty when nothing.
std::string caps_missing(const DeviceCaps& need, const DeviceCaps& have);
// The dtypes named in a comma-separated list ("q8_0,q4_K"); an unknown name is an error.
Result<DTypeSet> dtype_set_from_names(std::string_view names);
// The ops named in a comma-separated list ("swiglu,rope"); an unknown name is an error.
Result<OpSet> op_set_from_names(std::string_view names);

class Buffer {
 public:
  virtual ~Buffer() = default;
  // The handle graphs use to name this buffer on its device; never 0.
  virtual uint64_t handle() const = 0;
  virtual uint64_t size() const = 0;
  // Host memory of the buffer, for devices that have it (CPU); nullptr otherwise.
  virtual void* host_ptr() { return nullptr; }
  // Sets every byte to `value` before returning: the buffer's memory is then in use, its pages
  // mapped (a KV cache cleared when it is made, as llama.cpp does, costs its page faults at
  // start instead of in the first request's steps). A buffer that cannot (no bytes of its own)
  // says so.
  virtual Status clear(uint8_t /*value*/) { return unsupported("this buffer cannot be cleared"); }
};

// A point in a stream's queue. Copyable; waiting on a default-constructed Event returns at once.
class Event {
 public:
  struct State;
  Event() = default;
  explicit Event(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Blocks until the stream has run everything queued before the event.
  Status wait() const;
  bool ready() const;
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

// Completes an Event's State (for backends).
std::shared_ptr<Event::State> event_state_new();
void event_state_complete(Event::State& state, Status status);

class Stream {
 public:
  virtual ~Stream() = default;
  // Queues a write of `size` bytes into dst; the data is copied before the call returns.
  virtual void set_tensor(const TensorRef& dst, const void* data, size_t size) = 0;
  // Queues a read of src into dst; dst must stay valid until the read completed (an Event
  // recorded after it, or synchronize()).
  virtual void get_tensor(const TensorRef& src, void* dst, size_t size) = 0;
  // Queues a computation. The graph is shared so that the caller may keep reusing it.
  virtual void compute(std::shared_ptr<const Graph> graph) = 0;
  // Marks the current end of the queue.
  virtual Event record() = 0;
  // Makes work queued after this call wait for `event` (of any stream, any device).
  virtual void wait_event(const Event& event) = 0;
  // Waits for everything queued; returns the first error since the last synchronize().
  virtual Status synchronize() = 0;
  // Optional: flush queued commands to the device without waiting (remote devices batch).
  virtual void flush() {}

  // Optional: queues a write whose host data is read only when the stream reaches it, after
  // `after` (of any stream) completed; `data` must stay valid until then. This moves a value
  // that another stream is still producing into host memory without blocking the caller.
  // Default: waits for `after` on the caller's thread, then set_tensor.
  virtual void set_tensor_after(const TensorRef& dst, const void* data, size_t size,
                                const Event& after) {
    wait_event(after);  // the stream sees the producer's error, if any
    (void)after.wait();
    set_tensor(dst, data, size);
  }

  // Optional: hand-off between devices. Makes the next compute() queued on this stream send,
  // once it has run, `size` bytes of `src` (a tensor of this stream's device) straight into
  // `dst` on the device of `to`, and the next compute() queued on `to` wait until they have
  // landed: a stage's output reaches the next stage's device without passing through the host.
  // Both streams belong to the caller's thread. An error of either side is reported by the
  // streams as any other. Default: false, nothing queued (the devices cannot, or not between
  // these two); the caller then moves the value through the host.
  virtual bool handoff(Stream& to, const TensorRef& src, const TensorRef& dst, size_t size) {
    return false;
  }

  // Optional: queues a write of model weights; `data` must stay valid until synchronize(). A
  // device may skip bytes it already holds (a remote worker's cache by content hash).
  // Default: set_tensor.
  virtual void set_tensor_weights(const TensorRef& dst, const void* data, size_t size) {
    set_tensor(dst, data, size);
  }

  // Optional: the computations queued from now on are steps of several tokens (true) or of one
  // (false); a stream with a batch pool (StreamPools) runs the former on it. Default: nothing.
  virtual void set_batch(bool batch) {}
  // Optional: each op's time in the computations queued from now on is added to *times
  // (borrowed; null: none), which the caller reads after a synchronize. Called from the thread
  // that queues them. Streams that cannot time their ops (a worker's) leave it untouched.
  virtual void set_op_times(OpTimes* /*times*/) {}
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceInfo info() const = 0;
  virtual Result<std::unique_ptr<Buffer>> alloc_buffer(uint64_t size) = 0;
  // Optional: a buffer over host memory the caller keeps alive (the CPU uses the GGUF mapping
  // in place). Devices without host access decline with kUnsupported.
  virtual Result<std::unique_ptr<Buffer>> buffer_from_host(const void* ptr, uint64_t size) {
    return unsupported(info().name + " cannot use host memory in place");
  }
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // Optional: a stream that computes on `pools` (the CPU). Devices that compute elsewhere (a
  // worker) have no use for them. Default: create_stream().
  virtual std::unique_ptr<Stream> create_stream_on(const StreamPools& pools) {
    return create_stream();
  }
  // Optional: the ops and weight dtypes the device runs. Default: the baseline, what every
  // device could run before devices said.
  virtual DeviceCaps caps() const { return device_caps_baseline(); }
};

}  // namespace strata
