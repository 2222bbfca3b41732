// The worker's listener, connections and command handlers.
#include "rpc/worker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "backend/cpu_backend.h"
#include "core/host_memory.h"
#include "core/isa.h"
#include "core/mutex_guarded.h"
#include "core/thread_pool.h"
#include "graph/serialize.h"
#include "rpc/auth.h"
#include "rpc/handoff.h"
#include "rpc/protocol.h"
#include "rpc/transport.h"

namespace strata::rpc {
namespace {

// Room above --mem for the fixed part of a message and a graph (kMaxGraph* bound those).
constexpr uint64_t kMessageSlackBytes = uint64_t{32} << 20;

// SET_TENSOR(S) payloads from this size on are received straight into the buffers. Below it a
// copy costs less than the receive calls of a scattered read.
constexpr uint64_t kPlaceMinBytes = uint64_t{64} << 10;

}  // namespace

// Bytes allocated across connections, against --mem. Outside the unnamed namespace, being a
// field of Worker::Impl (a type with external linkage).
class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit) : limit_(limit) {}
  Status take(uint64_t n) {
    auto used = used_.lock();
    if (n > limit_ || *used > limit_ - n) {
      return out_of_range("ALLOC_BUFFER of " + std::to_string(n) +
                          " bytes: " + std::to_string(*used) + " of the worker's " +
                          std::to_string(limit_) + " bytes (--mem) are in use");
    }
    *used += n;
    return Status::ok();
  }
  void give(uint64_t n) { *used_.lock() -= n; }
  uint64_t used() const { return *used_.lock(); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  MutexGuarded<uint64_t> used_{uint64_t{0}};
};

namespace {

// Anonymous memory: zeroed by the kernel, so a buffer never shows another connection's data,
// and untouched pages cost nothing.
class HostBuffer {
 public:
  static Result<HostBuffer> allocate(uint64_t size, MemoryBudget& budget) {
    STRATA_RETURN_IF_ERROR(budget.take(size));
    const size_t len = static_cast<size_t>(size == 0 ? 1 : size);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      budget.give(size);
      return out_of_range("ALLOC_BUFFER of " + std::to_string(size) +
                          " bytes: the system refused the memory");
    }
    // Weights are streamed by the matmuls: 2 MiB pages keep the prefetcher going where 4 KiB
    // pages would stop it at every page (the CPU device's buffers ask for the same).
    if (len >= (size_t{2} << 20)) ::madvise(p, len, MADV_HUGEPAGE);
    return HostBuffer(static_cast<uint8_t*>(p), size, len, &budget);
  }
  HostBuffer(HostBuffer&& o) noexcept
      : data_(o.data_), size_(o.size_), len_(o.len_), budget_(o.budget_) {
    o.data_ = nullptr;
  }
  HostBuffer& operator=(HostBuffer&&) = delete;
  ~HostBuffer() {
    if (data_ != nullptr) {
      ::munmap(data_, len_);
      budget_->give(size_);
    }
  }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  HostBuffer(uint8_t* data, uint64_t size, size_t len, MemoryBudget* budget)
      : data_(data), size_(size), len_(len), budget_(budget) {}
  uint8_t* data_;
  uint64_t size_;
  size_t len_;
  MemoryBudget* budget_;
};

using BufferMap = std::unordered_map<uint64_t, HostBuffer>;

// Resolves only the handles of one connection.
class ConnectionBuffers : public CpuBufferTable {
 public:
  ConnectionBuffers(const BufferMap& buffers, uint64_t generation)
      : buffers_(buffers), generation_(generation) {}
  uint8_t* resolve(uint64_t handle, uint64_t* size) const override {
    auto it = buffers_.find(handle);
    if (it == buffers_.end()) return nullptr;
    *size = it->second.size();
    return it->second.data();
  }
  uint64_t generation() const override { return generation_; }

 private:
  const BufferMap& buffers_;
  const uint64_t generation_;
};

struct Reply {
  std::vector<uint8_t> fixed;
  std::vector<Piece> data;  // after `fixed`; points into this connection's buffers
};

}  // namespace

struct Worker::Impl {
  WorkerOptions options;
  std::unique_ptr<Listener> listener;
  MemoryBudget budget;
  MutexGuarded<ThreadPool> pool;  // shared by the connections: one computation at a time
  std::atomic<uint64_t> next_handle{1};
  uint64_t caps = 0;
  DeviceCaps device_caps;  // what HELLO announces, and all that compute() runs
  uint64_t max_payload = kMaxMessageBytes;
  HandoffRegistry handoffs;  // sessions that receive hand-offs from peers

  struct Conn {
    std::shared_ptr<Transport> transport;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  // A connection's thread uses its Conn (a list node, which stays put) without the lock: its
  // transport is set before the thread starts (and taken back, under the lock, by the thread
  // when it ends), and `done` is atomic.
  MutexGuarded<std::list<Conn>> conns;
  std::atomic<int> n_open{0};
  std::thread accept_thread;
  MutexGuarded<bool> stopped{false};  // its condition variable wakes wait()

  Impl(const WorkerOptions& o, std::unique_ptr<Listener> l, uint64_t limit)
      : options(o), listener(std::move(l)), budget(limit), pool(o.n_threads) {}

  void log(const std::string& line) const {
    if (!options.log) return;
    if (options.log_to) {
      options.log_to(line);
    } else {
      std::fprintf(stderr, "strata worker: %s\n", line.c_str());
    }
  }
  void accept_loop();
  void serve(Transport& t);
};

namespace {

// One client connection: its buffers, cached graphs and sticky errors. Used by its thread only.
class Session : private HandoffHost {
 public:
  Session(Worker::Impl& w, Transport& t)
      : w_(w), t_(t), handoff_(w.handoffs, w.options.auth_token, w.max_payload, t.peer()) {}

  // Runs the handshake; false closes the connection (`why` says why).
  bool handshake(std::string* why);
  // Serves messages until the peer leaves or breaks the protocol.
  std::string serve();
  // The connection ends (`why`): hand-offs waiting on it learn why.
  void closed(const std::string& why) { handoff_.closed(why); }

 private:
  struct CachedGraph {
    Graph graph;
    uint64_t bytes = 0;  // serialised size, counted against kMaxCachedGraphBytes
    // The graph checked (against the worker's caps too) and placed in this connection's
    // buffers: a GRAPH_RECOMPUTE of it runs without either while it is placed_in them.
    CpuPreparedGraph placed;
  };

  Status reply(const Header& req, const Status& s, const Reply& r = {});
  // Where the data of a SET_TENSOR(S) that will run goes: its regions, received in place.
  std::optional<Placement> place(const Header& h, std::span<const uint8_t> lead);
  Result<uint8_t*> region_ptr(const Region& r, const char* field) const;
  Result<Reply> run(const Message& m);
  Status compute(CachedGraph& c);
  Result<CachedGraph*> store_graph(uint32_t id, std::span<const uint8_t> bytes, const char* what);
  Result<CachedGraph*> cached_graph(uint32_t id, const char* what);
  void cache_store(std::span<const uint8_t> data);
  // HandoffHost.
  Result<uint8_t*> region(const Region& r, const char* field) const override {
    return region_ptr(r, field);
  }
  Status run_graph(const HandoffComputeRequest& req) override;

  Worker::Impl& w_;
  Transport& t_;
  BufferMap buffers_;
  std::map<uint32_t, CachedGraph> graphs_;
  uint64_t graph_bytes_ = 0;
  uint64_t buffers_generation_ = 0;  // bumped whenever a buffer of this connection comes or goes
  bool streams_ = false;             // kCapStreams negotiated: header.stream names the stream
  // The unreported error of each stream that has one; its one-way commands are skipped.
  std::map<uint32_t, Status> sticky_;
  // The last placed message: its flags and the regions its data went to (for the cache).
  struct Placed {
    uint32_t flags = 0;
    std::vector<std::span<uint8_t>> regions;
  };
  Placed placed_;
  SessionHandoff handoff_;
};

Status Session::reply(const Header& req, const Status& s, const Reply& r) {
  Header h;
  h.command = req.command;
  h.flags = kFlagResponse;
  h.request_id = req.request_id;
  h.stream = req.stream;
  if (!s.is_ok()) {
    h.status = static_cast<uint16_t>(wire_status_from(s));
    const std::string text = error_text(s);
    return send_message(t_, h, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  }
  std::vector<Piece> pieces;
  pieces.push_back(r.fixed);
  pieces.insert(pieces.end(), r.data.begin(), r.data.end());
  return t_.send(h, pieces);
}

bool Session::handshake(std::string* why) {
  Result<Message> m = t_.recv(w_.options.handshake_timeout_ms);
  if (!m) {
    *why = "no HELLO: " + m.status().message();
    return false;
  }
  const Header& h = m->header;
  if (h.command != Command::kHello || (h.flags & kFlagResponse) != 0) {
    *why = std::string("first message is ") + command_name(h.command) + ", not HELLO";
    (void)reply(h, invalid_argument(*why));
    return false;
  }
  // The version first, whatever else the message holds: a newer client may send more fields.
  if (m->payload.size() >= 4) {
    const uint16_t major = static_cast<uint16_t>(m->payload[0] | (m->payload[1] << 8));
    const uint16_t minor = static_cast<uint16_t>(m->payload[2] | (m->payload[3] << 8));
    if (major != w_.options.version_major) {
      *why = "protocol version mismatch: client " + std::to_string(major) + "." +
             std::to_string(minor) + ", worker " + std::to_string(w_.options.version_major) + "." +
             std::to_string(kVersionMinor) + " (major versions must match)";
      Header r = h;
      r.flags = kFlagResponse;
      r.status = static_cast<uint16_t>(WireStatus::kVersionMismatch);
      (void)send_message(t_, r, {reinterpret_cast<const uint8_t*>(why->data()), why->size()});
      return false;
    }
  }
  Result<HelloRequest> hello = decode_hello_request(m->payload);
  if (!hello || hello->step != 0) {
    *why = hello ? "HELLO step 1 before a challenge" : hello.status().message();
    (void)reply(h, invalid_argument(*why));
    return false;
  }
  HelloResponse resp;
  resp.major = w_.options.version_major;
  resp.caps = w_.caps;
  resp.device_caps = w_.device_caps;
  resp.idle_timeout_ms = static_cast<uint64_t>(std::max(0, w_.options.idle_timeout_ms));
  streams_ = (hello->caps & w_.caps & kCapStreams) != 0;
  if (!w_.options.auth_token.empty()) {
    Result<Nonce> nonce = auth_nonce();
    if (!nonce) {
      *why = nonce.status().message();
      (void)reply(h, nonce.status());
      return false;
    }
    resp.auth = kAuthChallenge;
    resp.server_nonce = *nonce;
    Reply r;
    encode(resp, &r.fixed);
    if (!reply(h, Status::ok(), r)) {
      *why = "peer left during the handshake";
      return false;
    }
    Result<Message> answer = t_.recv(w_.options.handshake_timeout_ms);
    if (!answer) {
      *why = "no authentication answer: " + answer.status().message();
      return false;
    }
    Result<HelloRequest> a = answer->header.command == Command::kHello
                                 ? decode_hello_request(answer->payload)
                                 : Result<HelloRequest>(invalid_argument("not HELLO"));
    const bool good =
        a && a->step == 1 && a->client_nonce == hello->client_nonce &&
        auth_mac_equal(a->mac, auth_client_mac(w_.options.auth_token, *nonce, hello->client_nonce));
    if (!good) {
      *why = "authentication failed";
      Header r = answer->header;
      r.flags = kFlagResponse;
      r.status = static_cast<uint16_t>(WireStatus::kAuthFailed);
      const std::string text =
          "authentication failed: the worker requires a token "
          "(--auth-token-file or " +
          std::string(kTokenEnv) + ")";
      (void)send_message(t_, r, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
      return false;
    }
    resp.auth = kAuthAccepted;
    resp.server_nonce = *nonce;
    resp.server_mac = auth_server_mac(w_.options.auth_token, hello->client_nonce, *nonce);
    Reply ok;
    encode(resp, &ok.fixed);
    if (!reply(answer->header, Status::ok(), ok)) {
      *why = "peer left during the handshake";
      return false;
    }
    return true;
  }
  Reply r;
  encode(resp, &r.fixed);
  if (!reply(h, Status::ok(), r)) {
    *why = "peer left during the handshake";
    return false;
  }
  return true;
}

std::optional<Placement> Session::place(const Header& h, std::span<const uint8_t> lead) {
  // Only a message that serve() will run: anything it refuses, skips or fails on is received
  // whole and goes the usual way, errors and all.
  const bool set_tensor = h.command == Command::kSetTensor;
  if ((!set_tensor && h.command != Command::kSetTensors) || h.payload_size < kPlaceMinBytes ||
      (h.flags & kFlagResponse) != 0 || (h.stream != 0 && !streams_) ||
      ((h.flags & kFlagOneWay) != 0 && sticky_.contains(h.stream)) ||
      (w_.caps & command_capability(h.command)) != command_capability(h.command)) {
    return std::nullopt;
  }
  std::vector<Region> regions;
  uint32_t flags = 0;
  Placement p;
  if (set_tensor) {
    Result<SetTensorRequest> req = decode_set_tensor_head(lead, h.payload_size);
    if (!req) return std::nullopt;
    regions.push_back(req->region);
    flags = req->flags;
    p.keep = kSetTensorPrefixBytes;
  } else {
    Result<SetTensorsRequest> req = decode_set_tensors_head(lead, h.payload_size);
    if (!req) return std::nullopt;
    regions = std::move(req->regions);
    flags = req->flags;
    p.keep = static_cast<size_t>(set_tensors_head_bytes(regions.size()));
  }
  for (const Region& r : regions) {
    Result<uint8_t*> dst = region_ptr(r, "");
    if (!dst) return std::nullopt;
    p.into.emplace_back(*dst, static_cast<size_t>(r.size));
  }
  placed_ = {flags, p.into};
  return p;
}

std::string Session::serve() {
  const int idle = w_.options.idle_timeout_ms > 0 ? w_.options.idle_timeout_ms : -1;
  const Placer placer = [this](const Header& h, std::span<const uint8_t> lead) {
    return place(h, lead);
  };
  for (;;) {
    Result<std::optional<Message>> next = t_.try_recv_into(idle, idle, placer);
    if (!next) return next.status().message();
    if (!next->has_value()) {
      return "idle for " + std::to_string(idle) + " ms (--idle-timeout); its buffers are freed";
    }
    const std::optional<Message>& m = *next;
    const Header& h = m->header;
    if ((h.flags & kFlagResponse) != 0) return "protocol error: the client sent a response";
    if (handoff_.is_link()) {
      // A peer's link carries its hand-offs (and keepalives) only.
      if (h.command == Command::kHandoffData) {
        Status s = handoff_.deliver(std::move(**next));
        if (!s.is_ok()) return "hand-off link: " + s.message();
        continue;
      }
      if (h.command != Command::kDeviceInfo) {
        return std::string("protocol error: ") + command_name(h.command) + " on a hand-off link";
      }
    }
    if (h.stream != 0 && !streams_) {
      return "protocol error: header field 'stream' is " + std::to_string(h.stream) +
             " but the client did not ask for stream ids (capability bit " +
             std::to_string(kCapStreams) + ")";
    }
    const bool one_way = (h.flags & kFlagOneWay) != 0;
    const bool reports_sticky = h.command == Command::kSynchronize ||
                                h.command == Command::kGetTensor ||
                                h.command == Command::kGetTensors;
    if (auto sticky = sticky_.find(h.stream); sticky != sticky_.end()) {
      if (one_way) {  // skipped until a synchronisation of the stream reports the error
        if (h.command == Command::kHandoffCompute) {
          if (auto req = decode_handoff_compute_request(m->payload)) {
            handoff_.skipped(*req, sticky->second);
          }
        }
        continue;
      }
      if (reports_sticky) {
        Status s = std::move(sticky->second);
        sticky_.erase(sticky);
        if (!reply(h, s)) return "peer left";
        continue;
      }
    }
    Result<Reply> r = Reply{};
    if (const uint64_t need = command_capability(h.command); need != 0 && (w_.caps & need) == 0) {
      r = unsupported(std::string(command_name(h.command)) +
                      " is not offered by this worker (capability bit " + std::to_string(need) +
                      " not advertised)");
    } else {
      r = run(*m);
    }
    if (one_way) {
      if (!r) {
        if (sticky_.size() >= kMaxStreamErrors) {
          return "protocol error: " + std::to_string(sticky_.size()) +
                 " streams hold an unreported error, limit " + std::to_string(kMaxStreamErrors);
        }
        sticky_[h.stream] = r.status().with_context(command_name(h.command));
      }
      continue;
    }
    if (!(r ? reply(h, Status::ok(), *r) : reply(h, r.status()))) return "peer left";
    if (h.command == Command::kHandoffAttach && !r) return r.status().message();
  }
}

Result<uint8_t*> Session::region_ptr(const Region& r, const char* field) const {
  auto it = buffers_.find(r.buffer);
  if (it == buffers_.end()) {
    return invalid_argument(std::string(field) + ": buffer " + std::to_string(r.buffer) +
                            " is not a buffer of this connection");
  }
  const uint64_t size = it->second.size();
  if (r.offset > size || r.size > size - r.offset) {
    return out_of_range(std::string(field) + ": region [" + std::to_string(r.offset) + ", +" +
                        std::to_string(r.size) + ") past the end of buffer " +
                        std::to_string(r.buffer) + " (size " + std::to_string(size) + ")");
  }
  return it->second.data() + r.offset;
}

Status Session::compute(CachedGraph& c) {
  const ConnectionBuffers buffers(buffers_, buffers_generation_);
  if (!c.placed.placed_in(buffers)) {
    c.placed = {};
    // Only what HELLO announced runs, so that a worker posing as an older one (hide_ops) fails
    // like one.
    const std::string missing = caps_missing(graph_needs(c.graph), w_.device_caps);
    if (!missing.empty()) return unsupported("this worker does not run " + missing);
    STRATA_ASSIGN_OR_RETURN(c.placed, cpu_graph_prepare(c.graph, buffers));
  }
  return cpu_graph_run(c.placed, *w_.pool.lock());
}

Result<Session::CachedGraph*> Session::store_graph(uint32_t id, std::span<const uint8_t> bytes,
                                                   const char* what) {
  STRATA_ASSIGN_OR_RETURN(Graph g, graph_deserialize(bytes));
  auto old = graphs_.find(id);
  const uint64_t old_bytes = old == graphs_.end() ? 0 : old->second.bytes;
  if (old == graphs_.end() && graphs_.size() >= kMaxCachedGraphs) {
    return out_of_range(std::string(what) + ": " + std::to_string(graphs_.size()) +
                        " graphs cached on this connection, limit " +
                        std::to_string(kMaxCachedGraphs));
  }
  if (graph_bytes_ - old_bytes + bytes.size() > kMaxCachedGraphBytes) {
    return out_of_range(std::string(what) + ": cached graphs would take " +
                        std::to_string(graph_bytes_ - old_bytes + bytes.size()) + " bytes, limit " +
                        std::to_string(kMaxCachedGraphBytes));
  }
  graph_bytes_ = graph_bytes_ - old_bytes + bytes.size();
  CachedGraph& slot = graphs_[id];
  slot.graph = std::move(g);
  slot.bytes = bytes.size();
  slot.placed = {};
  return &slot;
}

Result<Session::CachedGraph*> Session::cached_graph(uint32_t id, const char* what) {
  auto it = graphs_.find(id);
  if (it == graphs_.end()) {
    return invalid_argument(std::string(what) + ": no graph " + std::to_string(id) +
                            " cached on this connection");
  }
  return &it->second;
}

Status Session::run_graph(const HandoffComputeRequest& req) {
  CachedGraph* g = nullptr;
  if ((req.flags & kHandoffGraph) != 0) {
    STRATA_ASSIGN_OR_RETURN(g, store_graph(req.graph_id, req.graph, "HANDOFF_COMPUTE"));
  } else {
    STRATA_ASSIGN_OR_RETURN(g, cached_graph(req.graph_id, "HANDOFF_COMPUTE"));
  }
  return compute(*g);
}

void Session::cache_store(std::span<const uint8_t> data) {
  namespace fs = std::filesystem;
  const std::string name = hash128_hex(hash128(data));
  const fs::path dir(w_.options.cache_dir);
  std::error_code ec;
  if (fs::exists(dir / name, ec)) return;
  // Write aside and rename: a reader never sees a half-written blob.
  const fs::path tmp =
      dir / ("." + name + ".tmp." + std::to_string(::getpid()) + "." +
             std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())));
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
    if (!out) {
      fs::remove(tmp, ec);
      return;  // the cache is an optimisation: a full disk must not fail the upload
    }
  }
  fs::rename(tmp, dir / name, ec);
  if (ec) fs::remove(tmp, ec);
}

Result<Reply> Session::run(const Message& m) {
  const std::span<const uint8_t> p = m.payload;
  Reply out;
  if (m.placed) {  // a SET_TENSOR(S) that place() checked: its data is in its regions already
    if ((placed_.flags & kSetCacheable) != 0 && !w_.options.cache_dir.empty()) {
      for (const std::span<uint8_t> d : placed_.regions) cache_store(d);
    }
    return out;
  }
  switch (m.header.command) {
    case Command::kHello:
      return invalid_argument("HELLO after the handshake");
    case Command::kDeviceInfo: {
      if (!p.empty()) return invalid_argument("DEVICE_INFO request: payload must be empty");
      DeviceInfo info;
      info.name = "CPU";
      info.description = "strata worker, " + std::to_string(w_.options.n_threads) + " threads, " +
                         isa_name(isa_active());
      info.memory_total = w_.budget.limit();
      info.memory_free = w_.budget.limit() - w_.budget.used();
      info.alignment = 64;
      info.max_buffer_size = w_.budget.limit();
      encode(info, &out.fixed);
      return out;
    }
    case Command::kAllocBuffer: {
      STRATA_ASSIGN_OR_RETURN(AllocBufferRequest req, decode_alloc_buffer_request(p));
      if (buffers_.size() >= kMaxBuffersPerConnection) {
        return out_of_range("ALLOC_BUFFER: this connection has " + std::to_string(buffers_.size()) +
                            " buffers, limit " + std::to_string(kMaxBuffersPerConnection));
      }
      STRATA_ASSIGN_OR_RETURN(HostBuffer b, HostBuffer::allocate(req.size, w_.budget));
      const uint64_t handle = w_.next_handle.fetch_add(1);
      buffers_.emplace(handle, std::move(b));
      ++buffers_generation_;
      encode(AllocBufferResponse{handle, req.size}, &out.fixed);
      return out;
    }
    case Command::kFreeBuffer: {
      STRATA_ASSIGN_OR_RETURN(FreeBufferRequest req, decode_free_buffer_request(p));
      if (buffers_.erase(req.handle) == 0) {
        return invalid_argument("FREE_BUFFER: buffer " + std::to_string(req.handle) +
                                " is not a buffer of this connection");
      }
      ++buffers_generation_;
      return out;
    }
    case Command::kBufferClear: {
      STRATA_ASSIGN_OR_RETURN(BufferClearRequest req, decode_buffer_clear_request(p));
      auto it = buffers_.find(req.handle);
      if (it == buffers_.end()) {
        return invalid_argument("BUFFER_CLEAR: buffer " + std::to_string(req.handle) +
                                " is not a buffer of this connection");
      }
      std::memset(it->second.data(), req.value, static_cast<size_t>(it->second.size()));
      return out;
    }
    case Command::kSetTensor: {
      STRATA_ASSIGN_OR_RETURN(SetTensorRequest req, decode_set_tensor_request(p));
      STRATA_ASSIGN_OR_RETURN(uint8_t * dst, region_ptr(req.region, "SET_TENSOR region"));
      if (!req.data.empty()) std::memcpy(dst, req.data.data(), req.data.size());
      if ((req.flags & kSetCacheable) != 0 && !w_.options.cache_dir.empty()) cache_store(req.data);
      return out;
    }
    case Command::kSetTensors: {
      STRATA_ASSIGN_OR_RETURN(SetTensorsRequest req, decode_set_tensors_request(p));
      // Every region is checked before the first byte is written.
      std::vector<uint8_t*> dst(req.regions.size());
      for (size_t i = 0; i < req.regions.size(); ++i) {
        const std::string field = "SET_TENSORS region " + std::to_string(i);
        STRATA_ASSIGN_OR_RETURN(dst[i], region_ptr(req.regions[i], field.c_str()));
      }
      uint64_t off = 0;
      for (size_t i = 0; i < req.regions.size(); ++i) {
        const std::span<const uint8_t> d = req.data.subspan(off, req.regions[i].size);
        if (!d.empty()) std::memcpy(dst[i], d.data(), d.size());
        if ((req.flags & kSetCacheable) != 0 && !w_.options.cache_dir.empty()) cache_store(d);
        off += req.regions[i].size;
      }
      return out;
    }
    case Command::kSetTensorHash: {
      STRATA_ASSIGN_OR_RETURN(SetTensorHashRequest req, decode_set_tensor_hash_request(p));
      STRATA_ASSIGN_OR_RETURN(uint8_t * dst, region_ptr(req.region, "SET_TENSOR_HASH region"));
      SetTensorHashResponse resp;
      if (!w_.options.cache_dir.empty()) {
        namespace fs = std::filesystem;
        const fs::path path = fs::path(w_.options.cache_dir) / hash128_hex(req.hash);
        std::error_code ec;
        const uintmax_t size = fs::file_size(path, ec);
        if (!ec && size == req.region.size) {
          std::ifstream in(path, std::ios::binary);
          in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(req.region.size));
          // What was read must be what was asked: a corrupt blob is dropped, not used.
          if (in && hash128({dst, static_cast<size_t>(req.region.size)}) == req.hash) {
            resp.found = true;
          } else {
            fs::remove(path, ec);
          }
        }
      }
      encode(resp, &out.fixed);
      return out;
    }
    case Command::kGetTensor: {
      STRATA_ASSIGN_OR_RETURN(GetTensorRequest req, decode_get_tensor_request(p));
      STRATA_ASSIGN_OR_RETURN(uint8_t * src, region_ptr(req.region, "GET_TENSOR region"));
      out.data.push_back({src, static_cast<size_t>(req.region.size)});
      return out;
    }
    case Command::kGetTensors: {
      STRATA_ASSIGN_OR_RETURN(GetTensorsRequest req,
                              decode_get_tensors_request(p, kMaxMessageBytes));
      for (size_t i = 0; i < req.regions.size(); ++i) {
        const std::string field = "GET_TENSORS region " + std::to_string(i);
        STRATA_ASSIGN_OR_RETURN(uint8_t * src, region_ptr(req.regions[i], field.c_str()));
        out.data.push_back({src, static_cast<size_t>(req.regions[i].size)});
      }
      return out;
    }
    case Command::kCopyTensor: {
      STRATA_ASSIGN_OR_RETURN(CopyTensorRequest req, decode_copy_tensor_request(p));
      STRATA_ASSIGN_OR_RETURN(uint8_t * src, region_ptr(req.src, "COPY_TENSOR src"));
      STRATA_ASSIGN_OR_RETURN(uint8_t * dst, region_ptr(req.dst, "COPY_TENSOR dst"));
      if (req.src.size > 0) std::memmove(dst, src, static_cast<size_t>(req.src.size));
      return out;
    }
    case Command::kGraphCompute: {
      STRATA_ASSIGN_OR_RETURN(GraphComputeRequest req, decode_graph_compute_request(p));
      STRATA_ASSIGN_OR_RETURN(CachedGraph * g,
                              store_graph(req.graph_id, req.graph, "GRAPH_COMPUTE"));
      STRATA_RETURN_IF_ERROR(compute(*g));
      return out;
    }
    case Command::kGraphRecompute: {
      STRATA_ASSIGN_OR_RETURN(GraphRecomputeRequest req, decode_graph_recompute_request(p));
      STRATA_ASSIGN_OR_RETURN(CachedGraph * g, cached_graph(req.graph_id, "GRAPH_RECOMPUTE"));
      STRATA_RETURN_IF_ERROR(compute(*g));
      return out;
    }
    case Command::kSynchronize:
      if (!p.empty()) return invalid_argument("SYNCHRONIZE request: payload must be empty");
      return out;  // commands run in order: everything before this one has finished
    case Command::kHandoffTicket: {
      if (!p.empty()) return invalid_argument("HANDOFF_TICKET request: payload must be empty");
      STRATA_ASSIGN_OR_RETURN(HandoffTicketResponse ticket, handoff_.ticket());
      encode(ticket, &out.fixed);
      return out;
    }
    case Command::kHandoffConnect: {
      STRATA_ASSIGN_OR_RETURN(HandoffConnectRequest req, decode_handoff_connect_request(p));
      STRATA_RETURN_IF_ERROR(handoff_.connect(req));
      return out;
    }
    case Command::kHandoffAttach: {
      STRATA_ASSIGN_OR_RETURN(HandoffAttachRequest req, decode_handoff_attach_request(p));
      STRATA_RETURN_IF_ERROR(handoff_.attach(req, buffers_.empty() && graphs_.empty()));
      return out;
    }
    case Command::kHandoffData:  // a link's are delivered by serve()
      return invalid_argument("HANDOFF_DATA on a connection that is not a hand-off link");
    case Command::kHandoffCompute: {
      STRATA_ASSIGN_OR_RETURN(HandoffComputeRequest req, decode_handoff_compute_request(p));
      STRATA_RETURN_IF_ERROR(handoff_.compute(*this, req));
      return out;
    }
  }
  return invalid_argument("unknown command");
}

}  // namespace

void Worker::Impl::serve(Transport& t) {
  n_open.fetch_add(1);
  log("connection " + t.peer() + " opened");
  std::string why;
  {
    Session s(*this, t);
    if (s.handshake(&why)) why = s.serve();
    s.closed(why);
  }              // buffers and graphs are freed before the line is printed
  t.shutdown();  // the peer sees the close now, not when the thread is reaped
  n_open.fetch_sub(1);
  log("connection " + t.peer() + " closed: " + why);
}

void Worker::Impl::accept_loop() {
  for (;;) {
    Result<std::unique_ptr<Transport>> t = listener->accept(-1);
    if (!t) {
      if (t.status().kind() == ErrorKind::kUnavailable) return;  // shut down
      log("accept: " + t.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // e.g. out of descriptors
      continue;
    }
    (*t)->set_max_payload(max_payload);
    auto open = conns.lock();
    // Join the threads of connections that have ended.
    for (auto it = open->begin(); it != open->end();) {
      if (it->done.load()) {
        it->thread.join();
        it = open->erase(it);
      } else {
        ++it;
      }
    }
    Conn& c = open->emplace_back();
    c.transport = std::move(*t);
    c.thread = std::thread([this, &c] {
      serve(*c.transport);
      // Destroyed here rather than when the accept loop joins this thread: destroying a UCX
      // transport may wait for its peer (up to a second), which is this connection's wait, not
      // the next client's.
      std::shared_ptr<Transport> t;
      {
        auto open = conns.lock();  // stop() reads c.transport under it
        t = std::move(c.transport);
      }
      t.reset();
      c.done.store(true);
    });
  }
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Worker::~Worker() { stop(); }

Result<std::unique_ptr<Worker>> Worker::start(const WorkerOptions& options) {
  if (options.idle_timeout_ms < 0) {
    return invalid_argument("idle timeout: " + std::to_string(options.idle_timeout_ms) +
                            " ms is negative (0 means none)");
  }
  if (options.n_threads < 1 || options.n_threads > 1024) {
    return invalid_argument("threads: " + std::to_string(options.n_threads) + " outside [1, 1024]");
  }
  if (!options.cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.cache_dir, ec);
    if (ec) return io_error("cache directory '" + options.cache_dir + "': " + ec.message());
  }
  const uint64_t limit = options.memory_limit != 0 ? options.memory_limit : host_memory_available();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Listener> l, transport_listen(options.address));
  auto impl = std::make_unique<Impl>(options, std::move(l), limit);
  impl->caps = kCapAll & ~options.hide_caps;
  impl->device_caps = cpu_device_caps();
  impl->device_caps.ops &= ~options.hide_ops;
  impl->device_caps.weight_dtypes &= ~options.hide_weight_dtypes;
  // A worker posing as an older one (--hide-caps) refuses what the older one could not run.
  impl->device_caps.kv_planes = (impl->caps & kCapKvPlanes) != 0;
  impl->device_caps.kv_q8_0 = (impl->caps & kCapKvQ8_0) != 0;
  impl->max_payload = std::min(kMaxMessageBytes, limit > kMaxMessageBytes - kMessageSlackBytes
                                                     ? kMaxMessageBytes
                                                     : limit + kMessageSlackBytes);
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->accept_loop(); });
  return std::make_unique<Worker>(std::move(impl));
}

std::string Worker::address() const { return impl_->listener->address(); }
bool Worker::beyond_loopback() const { return impl_->listener->beyond_loopback(); }
uint64_t Worker::bytes_allocated() const { return impl_->budget.used(); }
int Worker::open_connections() const { return impl_->n_open.load(); }

void Worker::stop() {
  {
    auto stopped = impl_->stopped.lock();
    if (*stopped) return;
    *stopped = true;
  }
  impl_->listener->shutdown();
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  impl_->handoffs.close_all("the worker is stopping");
  std::list<Impl::Conn> conns;
  {
    auto open = impl_->conns.lock();
    for (Impl::Conn& c : *open) {
      if (c.transport) c.transport->shutdown();
    }
    conns.splice(conns.end(), *open);
  }
  for (Impl::Conn& c : conns) c.thread.join();
  impl_->stopped.notify_all();
}

void Worker::wait() {
  impl_->stopped.lock().wait([](bool stopped) { return stopped; });
}

}  // namespace strata::rpc
