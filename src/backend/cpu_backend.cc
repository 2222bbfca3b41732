#include "backend/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include "core/host_memory.h"
#include "core/isa.h"
#include "core/mutex_guarded.h"

namespace strata {
namespace {

constexpr uint64_t kAlignment = 64;
constexpr uint64_t kHugePage = uint64_t{2} << 20;

// Handles of live buffers. Shared by the device and its buffers, which may outlive it.
class Registry : public CpuBufferTable {
 public:
  uint64_t add(uint8_t* ptr, uint64_t size) {
    auto s = state_.lock();
    const uint64_t handle = s->next++;
    s->buffers[handle] = {ptr, size};
    s->used += size;
    generation_.fetch_add(1, std::memory_order_relaxed);
    return handle;
  }
  void remove(uint64_t handle) {
    auto s = state_.lock();
    auto it = s->buffers.find(handle);
    if (it == s->buffers.end()) return;
    s->used -= it->second.size;
    s->buffers.erase(it);
    generation_.fetch_add(1, std::memory_order_relaxed);
  }
  // A buffer is freed only when no queued work names it, so a stream reads the generation
  // between its computations, not during one.
  uint64_t generation() const override { return generation_.load(std::memory_order_relaxed); }
  uint8_t* resolve(uint64_t handle, uint64_t* size) const override {
    auto s = state_.lock();
    auto it = s->buffers.find(handle);
    if (it == s->buffers.end()) return nullptr;
    *size = it->second.size;
    return it->second.ptr;
  }
  uint64_t used() const { return state_.lock()->used; }

 private:
  struct Entry {
    uint8_t* ptr;
    uint64_t size;
  };
  struct State {
    std::map<uint64_t, Entry> buffers;
    uint64_t next = 1;
    uint64_t used = 0;
  };
  MutexGuarded<State> state_;
  std::atomic<uint64_t> generation_{0};
};

class CpuBuffer : public Buffer {
 public:
  CpuBuffer(std::shared_ptr<Registry> registry, uint8_t* ptr, uint64_t size, bool owned)
      : registry_(std::move(registry)), ptr_(ptr), size_(size), owned_(owned) {
    handle_ = registry_->add(ptr_, size_);
  }
  ~CpuBuffer() override {
    registry_->remove(handle_);
    if (owned_) std::free(ptr_);
  }
  uint64_t handle() const override { return handle_; }
  uint64_t size() const override { return size_; }
  void* host_ptr() override { return ptr_; }
  // Only memory of its own: a buffer over the caller's memory (a mapped file) is not written.
  Status clear(uint8_t value) override {
    if (!owned_) return unsupported("a buffer over memory the CPU device did not allocate");
    std::memset(ptr_, value, static_cast<size_t>(size_));
    return Status::ok();
  }

 private:
  std::shared_ptr<Registry> registry_;
  uint8_t* ptr_;
  uint64_t size_;
  bool owned_;
  uint64_t handle_ = 0;
};

struct Shared {
  explicit Shared(int n) : n_threads(n) {}
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  const int n_threads;
  // The device's pool, for streams without pools of their own: made at their first
  // computation (a server whose groups have their own pools never starts its threads), and
  // used by one computation at a time.
  MutexGuarded<std::unique_ptr<ThreadPool>> pool;
};

class CpuStream : public Stream {
 public:
  CpuStream(std::shared_ptr<Shared> shared, const StreamPools& pools)
      : shared_(std::move(shared)), pools_(pools), thread_([this] { run(); }) {}

  ~CpuStream() override {
    state_.lock()->stop = true;
    state_.notify_all();
    thread_.join();
  }

  void set_tensor(const TensorRef& dst, const void* data, size_t size) override {
    std::vector<uint8_t> copy(static_cast<const uint8_t*>(data),
                              static_cast<const uint8_t*>(data) + size);
    push([this, dst, copy = std::move(copy)]() -> Status {
      uint8_t* p = nullptr;
      STRATA_RETURN_IF_ERROR(region(dst, copy.size(), &p));
      std::memcpy(p, copy.data(), copy.size());
      return Status::ok();
    });
  }

  void set_tensor_after(const TensorRef& dst, const void* data, size_t size,
                        const Event& after) override {
    wait_event(after);
    push([this, dst, data, size]() -> Status {
      uint8_t* p = nullptr;
      STRATA_RETURN_IF_ERROR(region(dst, size, &p));
      std::memcpy(p, data, size);
      return Status::ok();
    });
  }

  void get_tensor(const TensorRef& src, void* dst, size_t size) override {
    push([this, src, dst, size]() -> Status {
      uint8_t* p = nullptr;
      STRATA_RETURN_IF_ERROR(region(src, size, &p));
      std::memcpy(dst, p, size);
      return Status::ok();
    });
  }

  void compute(std::shared_ptr<const Graph> graph) override {
    ThreadPool* own = batch_ && pools_.pool_batch != nullptr ? pools_.pool_batch : pools_.pool;
    push([this, own, times = op_times_, graph = std::move(graph)]() -> Status {
      STRATA_RETURN_IF_ERROR(prepare(graph));
      if (own != nullptr) return cpu_graph_run(last_, *own, times);
      auto pool = shared_->pool.lock();
      if (*pool == nullptr) *pool = std::make_unique<ThreadPool>(shared_->n_threads);
      return cpu_graph_run(last_, **pool, times);
    });
  }

  void set_batch(bool batch) override { batch_ = batch; }
  void set_op_times(OpTimes* times) override { op_times_ = times; }

  Event record() override {
    auto state = event_state_new();
    push_always([state](const Status& failed) {
      event_state_complete(*state, failed);
      return Status::ok();
    });
    return Event(state);
  }

  void wait_event(const Event& event) override {
    push([event]() { return event.wait(); });
  }

  Status synchronize() override {
    // The event carries the same error as error_, which is what we report (and clear).
    (void)record().wait();
    auto st = state_.lock();
    Status s = std::move(st->error);
    st->error = Status::ok();
    return s;
  }

 private:
  using Command = std::function<Status(const Status& failed)>;

  Status region(const TensorRef& t, size_t size, uint8_t** p) {
    uint64_t buffer_size = 0;
    uint8_t* base = shared_->registry->resolve(t.buffer, &buffer_size);
    if (base == nullptr) return invalid_argument("buffer " + std::to_string(t.buffer) + " unknown");
    if (t.offset > buffer_size || size > buffer_size - t.offset) {
      return out_of_range("region [" + std::to_string(t.offset) + ", +" + std::to_string(size) +
                          ") past the end of buffer " + std::to_string(t.buffer) + " (size " +
                          std::to_string(buffer_size) + ")");
    }
    *p = base + t.offset;
    return Status::ok();
  }

  // On the stream's thread: the graph checked and placed, unless it is the last one computed
  // and no buffer of the device came or went since (a decode step's graph, again and again).
  Status prepare(std::shared_ptr<const Graph> graph) {
    if (graph == last_graph_ && last_.placed_in(*shared_->registry)) return Status::ok();
    last_graph_.reset();
    STRATA_ASSIGN_OR_RETURN(last_, cpu_graph_prepare(*graph, *shared_->registry));
    last_graph_ = std::move(graph);
    return Status::ok();
  }

  // Normal work is skipped after an error until synchronize() reports it.
  void push(std::function<Status()> fn) {
    push_always([fn = std::move(fn)](const Status& failed) {
      return failed.is_ok() ? fn() : Status::ok();
    });
  }
  void push_always(Command cmd) {
    state_.lock()->queue.push_back(std::move(cmd));
    state_.notify_one();
  }

  void run() {
    for (;;) {
      Command cmd;
      Status failed;
      {
        auto st = state_.lock();
        st.wait([](const State& s) { return s.stop || !s.queue.empty(); });
        if (st->queue.empty()) return;
        cmd = std::move(st->queue.front());
        st->queue.pop_front();
        failed = st->error;
      }
      Status s = cmd(failed);
      if (!s.is_ok()) {
        auto st = state_.lock();
        if (st->error.is_ok()) st->error = std::move(s);
      }
    }
  }

  std::shared_ptr<Shared> shared_;
  const StreamPools pools_;
  // The caller's: set_batch, set_op_times and compute are called from one thread.
  bool batch_ = false;
  OpTimes* op_times_ = nullptr;
  struct State {
    std::deque<Command> queue;
    Status error;  // the first error of the queued work, until synchronize() takes it
    bool stop = false;
  };
  // The stream thread's only: the last graph computed, held so that its address names it, and
  // its placement.
  std::shared_ptr<const Graph> last_graph_;
  CpuPreparedGraph last_;
  MutexGuarded<State> state_;  // its condition variable wakes run()
  std::thread thread_;         // last: starts after the members it uses
};

class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options)
      : options_(options), shared_(std::make_shared<Shared>(options.n_threads)) {}

  DeviceInfo info() const override {
    DeviceInfo info;
    info.name = options_.name;
    info.description = std::string(isa_name(isa_active())) + ", " +
                       std::to_string(options_.n_threads) + " threads";
    const uint64_t avail = host_memory_available();
    info.memory_total = options_.memory_limit ? options_.memory_limit : avail;
    const uint64_t used = shared_->registry->used();
    info.memory_free = options_.memory_limit
                           ? (used < options_.memory_limit ? options_.memory_limit - used : 0)
                           : avail;
    info.alignment = kAlignment;
    info.max_buffer_size = info.memory_total;
    return info;
  }

  Result<std::unique_ptr<Buffer>> alloc_buffer(uint64_t size) override {
    if (options_.memory_limit && shared_->registry->used() + size > options_.memory_limit) {
      return out_of_range("buffer of " + std::to_string(size) + " bytes exceeds the memory limit " +
                          std::to_string(options_.memory_limit) + " of " + options_.name);
    }
    // Large buffers (weights, KV caches) on 2 MiB boundaries and with transparent huge pages
    // asked for: a matmul streams its weights, and 4 KiB pages stop the hardware prefetcher
    // at every page and cost a TLB miss each.
    const uint64_t align = size >= kHugePage ? kHugePage : kAlignment;
    const uint64_t rounded = (std::max<uint64_t>(size, 1) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (p != nullptr && align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
    if (p == nullptr) {
      return out_of_range("cannot allocate " + std::to_string(size) + " bytes on " + options_.name);
    }
    return std::unique_ptr<Buffer>(
        std::make_unique<CpuBuffer>(shared_->registry, static_cast<uint8_t*>(p), size, true));
  }

  Result<std::unique_ptr<Buffer>> buffer_from_host(const void* ptr, uint64_t size) override {
    return std::unique_ptr<Buffer>(std::make_unique<CpuBuffer>(
        shared_->registry, static_cast<uint8_t*>(const_cast<void*>(ptr)), size, false));
  }

  std::unique_ptr<Stream> create_stream() override {
    return std::make_unique<CpuStream>(shared_, StreamPools{});
  }
  std::unique_ptr<Stream> create_stream_on(const StreamPools& pools) override {
    return std::make_unique<CpuStream>(shared_, pools);
  }

  DeviceCaps caps() const override { return cpu_device_caps(); }

 private:
  CpuDeviceOptions options_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace

std::unique_ptr<Device> cpu_device_new(const CpuDeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

}  // namespace strata
