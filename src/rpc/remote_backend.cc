#include "rpc/remote_backend.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <utility>

#include "core/check.h"
#include "core/mutex_guarded.h"
#include "graph/serialize.h"
#include "rpc/handoff_links.h"

namespace strata::rpc {
namespace {

// What a device's buffers and streams share; outlives the device if they do.
//
// The connection can be replaced (a worker that came back: remote_device_set_connection), so
// every buffer and stream keeps the connection it was made on: a handle names a buffer of one
// connection only, and must never reach a new one, where it could name another buffer.
struct Shared {
  std::shared_ptr<Connection> conn() const { return *current.lock(); }
  void set_conn(std::shared_ptr<Connection> c) { *current.lock() = std::move(c); }
  MutexGuarded<std::shared_ptr<Connection>> current;
  std::atomic<uint64_t> allocated{0};
  std::atomic<uint32_t> next_graph_id{1};
  HandoffLinks links;                         // to the next stages' workers, as a sender
  std::atomic<uint64_t> next_handoff_seq{1};  // steps handed off to this worker, as a receiver
};

// One hand-off, shared by the sender's and the receiver's streams (of one thread) until both
// computations are queued.
struct HandoffState {
  bool sent = false;  // the sender's computation left with its send
  Status cancelled;   // the sender's computation was dropped: why
};

// The first error of a stream's queued work; set by the caller's thread and by the receiver.
struct StreamError {
  MutexGuarded<Status> status;
  void set(const Status& s) {
    auto st = status.lock();
    if (st->is_ok()) *st = s;
  }
  Status get() const { return *status.lock(); }
  Status take() {
    auto st = status.lock();
    Status s = std::move(*st);
    *st = Status::ok();
    return s;
  }
};

Region region_of(const TensorRef& t, size_t size) { return Region{t.buffer, t.offset, size}; }

// A request of one encoded message, waited for.
template <typename Req>
Result<Message> call_encoded(Connection& conn, Command c, const Req& req) {
  std::vector<uint8_t> payload;
  encode(req, &payload);
  const Piece piece(payload.data(), payload.size());
  return conn.call(c, std::span<const Piece>(&piece, 1));
}

class RemoteBuffer : public Buffer {
 public:
  RemoteBuffer(std::shared_ptr<Shared> shared, std::shared_ptr<Connection> conn, uint64_t handle,
               uint64_t size)
      : shared_(std::move(shared)), conn_(std::move(conn)), handle_(handle), size_(size) {}
  ~RemoteBuffer() override {
    shared_->allocated -= size_;
    if (!conn_->broken().is_ok()) return;
    std::vector<uint8_t> payload;
    encode(FreeBufferRequest{handle_}, &payload);
    const Piece piece(payload.data(), payload.size());
    // Not waited for: a failure closes the connection, which frees the buffer anyway.
    (void)conn_->send_request(Command::kFreeBuffer, std::span<const Piece>(&piece, 1), false);
  }
  uint64_t handle() const override { return handle_; }
  uint64_t size() const override { return size_; }
  // BUFFER_CLEAR, waited for: the worker's memset has mapped the pages when this returns.
  Status clear(uint8_t value) override {
    auto m = call_encoded(*conn_, Command::kBufferClear, BufferClearRequest{handle_, value});
    return m.is_ok() ? Status::ok() : m.status().with_context("BUFFER_CLEAR");
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Connection> conn_;  // the connection the handle belongs to
  uint64_t handle_;
  uint64_t size_;
};

class RemoteStream : public Stream {
 public:
  explicit RemoteStream(std::shared_ptr<Shared> shared)
      : shared_(std::move(shared)),
        session_(shared_->conn()),
        conn_(*session_),
        graph_id_(shared_->next_graph_id++),
        stream_id_(conn_.new_stream_id()),
        error_(std::make_shared<StreamError>()) {}

  ~RemoteStream() override { (void)synchronize(); }

  void set_tensor(const TensorRef& dst, const void* data, size_t size) override {
    const auto* p = static_cast<const uint8_t*>(data);
    queue_write(region_of(dst, size), nullptr, arena_.size());
    arena_.insert(arena_.end(), p, p + size);
  }

  void set_tensor_after(const TensorRef& dst, const void* data, size_t size,
                        const Event& after) override {
    if (!conn_.options().async_copy) {
      Stream::set_tensor_after(dst, data, size, after);  // waits here, on the caller's thread
      return;
    }
    wait_event(after);
    queue_write(region_of(dst, size), static_cast<const uint8_t*>(data), 0);
  }

  void set_tensor_weights(const TensorRef& dst, const void* data, size_t size) override {
    loading_ = true;
    const auto* p = static_cast<const uint8_t*>(data);
    if (size < kHashMinBytes) {
      // Small tensors (norms, small projections) sit side by side in the weight buffer: pack
      // neighbours, with their alignment gaps zeroed, into one blob that is offered by hash
      // like a large tensor, so that a cached start sends none of their bytes either.
      const uint64_t end = group_region_.offset + group_.size();
      if (!group_.empty() &&
          (dst.buffer != group_region_.buffer || dst.offset < end || dst.offset - end > kMaxGap)) {
        flush_group();
      }
      if (group_.empty()) group_region_ = Region{dst.buffer, dst.offset, 0};
      group_.resize(dst.offset - group_region_.offset, 0);
      group_.insert(group_.end(), p, p + size);
      if (group_.size() >= kHashMinBytes) flush_group();
      return;
    }
    // What was queued before goes first; the probes in flight stay in flight.
    flush_group();
    flush_writes();
    flush_reads();
    for (uint64_t off = 0; off < size; off += kWeightChunkBytes) {
      const uint64_t n = std::min<uint64_t>(kWeightChunkBytes, size - off);
      upload_chunk(Region{dst.buffer, dst.offset + off, n}, p + off);
    }
  }

  void get_tensor(const TensorRef& src, void* dst, size_t size) override {
    resolve_probes(0);                     // a read sees the weights written before it
    if (!writes_.empty()) flush_writes();  // and the writes queued before it
    reads_.push_back({region_of(src, size), static_cast<uint8_t*>(dst)});
  }

  void compute(std::shared_ptr<const Graph> graph) override {
    flush();
    wait_events();
    if (dropping()) {
      settle_handoffs(error_->get());
      return;
    }
    // The graph the worker holds under graph_id_, when it is this one (Context reuses a step's
    // graph): neither serialised nor compared again.
    const bool same = graph == last_sent_ && !last_graph_.empty();
    if (send_ || wait_) {
      const bool sends = send_.has_value();
      compute_handoff(graph, same);
      // Without asynchronous copies every stage is done before the next one starts: one that
      // hands off is waited for here, as the next stage's copy through this host would wait.
      if (sends && !conn_.options().async_copy) {
        if (std::shared_ptr<Pending> p = fence()) (void)p->wait();
      }
      return;
    }
    std::vector<uint8_t> bytes = same ? std::vector<uint8_t>() : graph_serialize(*graph);
    std::vector<uint8_t> head;
    Status s;
    if (conn_.has(kCapGraphRecompute) && (same || bytes == last_graph_)) {
      encode(GraphRecomputeRequest{graph_id_}, &head);
      const Piece piece(head.data(), head.size());
      s = conn_.send_one_way(Command::kGraphRecompute, std::span<const Piece>(&piece, 1), true,
                             stream_id_);
    } else {
      if (same) bytes = last_graph_;
      encode(GraphComputeRequest{graph_id_, {}}, &head);
      const Piece pieces[2] = {Piece(head.data(), head.size()), Piece(bytes.data(), bytes.size())};
      s = conn_.send_one_way(Command::kGraphCompute, pieces, true, stream_id_);
      last_graph_ = std::move(bytes);
    }
    last_sent_ = std::move(graph);
    sent_one_way(s);
  }

  Event record() override {
    flush();
    wait_events();
    auto state = event_state_new();
    std::shared_ptr<Pending> p = fence();
    if (!p) {
      event_state_complete(*state, error_->get());
      return Event(state);
    }
    p->then([state, err = error_](const Result<Message>& r) {
      Status s = err->get();
      event_state_complete(*state, s.is_ok() ? r.status() : s);
    });
    return Event(state);
  }

  void wait_event(const Event& event) override { waits_.push_back(event); }

  // Both workers must offer hand-off and reach each other (the link opens on first use), and
  // neither connection have it turned off (ClientOptions::handoff); the receiver's sequence
  // numbers are its connection's, so that pipeline groups sharing it never collide.
  bool handoff(Stream& to, const TensorRef& src, const TensorRef& dst, size_t size) override {
    auto* next = dynamic_cast<RemoteStream*>(&to);
    if (next == nullptr || next->shared_ == shared_ || send_ || next->wait_) return false;
    if (!conn_.options().handoff || !next->conn_.options().handoff) return false;
    if (!conn_.has(kCapHandoff) || !next->conn_.has(kCapHandoff)) return false;
    std::optional<uint32_t> link = shared_->links.link(session_, next->session_);
    if (!link) return false;
    auto state = std::make_shared<HandoffState>();
    const uint64_t seq = next->shared_->next_handoff_seq++;
    send_ = PendingSend{*link, seq, region_of(src, size), region_of(dst, size), state};
    next->wait_ = PendingWait{seq, region_of(dst, size), state};
    return true;
  }

  Status synchronize() override {
    settle_handoffs(unavailable("the step ended before the computation of its hand-off"));
    flush();
    wait_events();
    std::shared_ptr<Pending> p = fence();
    for (const std::shared_ptr<Pending>& q : outstanding_) (void)q->wait();
    outstanding_.clear();
    last_request_.reset();
    return error_->take();
  }

  void flush() override {
    flush_group();
    resolve_probes(0);
    flush_writes();
    flush_reads();
  }

 private:
  struct Write {
    Region region;
    const uint8_t* ptr;  // external data, read at flush time; nullptr: at arena_offset
    size_t arena_offset;
  };
  struct Read {
    Region region;
    uint8_t* dst;
  };

  // A computation with the hand-off parts queued for it, as one HANDOFF_COMPUTE: its wait
  // names the step its input comes from, its send where its output goes.
  void compute_handoff(const std::shared_ptr<const Graph>& graph, bool same) {
    std::vector<uint8_t> bytes = same ? std::vector<uint8_t>() : graph_serialize(*graph);
    HandoffComputeRequest req;
    req.graph_id = graph_id_;
    req.flags = same || bytes == last_graph_ ? kHandoffRecompute : kHandoffGraph;
    req.timeout_ms = handoff_timeout_ms(conn_.options());
    if (wait_) {
      if (!wait_->state->cancelled.is_ok()) {
        // The previous stage never sent its computation: this one has no input.
        Status why = wait_->state->cancelled.with_context("the input of this stage never left");
        wait_.reset();
        error_->set(why);
        settle_handoffs(why);
        return;
      }
      req.flags |= kHandoffWait;
      req.wait_seq = wait_->seq;
      req.wait_dst = wait_->dst;
    }
    if (send_) {
      req.flags |= kHandoffSend;
      req.link = send_->link;
      req.send_seq = send_->seq;
      req.send_src = send_->src;
      req.send_dst = send_->dst;
    }
    std::vector<uint8_t> head;
    encode(req, &head);
    const bool graph_bytes = (req.flags & kHandoffGraph) != 0;
    const Piece pieces[2] = {Piece(head.data(), head.size()), Piece(bytes.data(), bytes.size())};
    Status s =
        conn_.send_one_way(Command::kHandoffCompute,
                           std::span<const Piece>(pieces, graph_bytes ? 2 : 1), true, stream_id_);
    if (graph_bytes) last_graph_ = std::move(bytes);
    last_sent_ = graph;
    if (send_) {
      if (s.is_ok()) {
        send_->state->sent = true;
        conn_.stats().on_handoff(send_->src.size);
      } else {
        send_->state->cancelled = s;
      }
      send_.reset();
    }
    wait_.reset();
    sent_one_way(s);
  }

  // Hand-offs whose computation will not be queued: a send is cancelled (the receiver then
  // fails its step instead of waiting), a wait whose input was sent is still taken, with
  // nothing to run, so that the worker does not hold it.
  void settle_handoffs(const Status& why) {
    if (send_) {
      send_->state->cancelled = why.is_ok() ? unavailable("the computation was dropped") : why;
      send_.reset();
    }
    if (wait_) {
      if (wait_->state->sent) {
        HandoffComputeRequest req;
        req.flags = kHandoffWait;
        req.timeout_ms = handoff_timeout_ms(conn_.options());
        req.wait_seq = wait_->seq;
        req.wait_dst = wait_->dst;
        std::vector<uint8_t> head;
        encode(req, &head);
        const Piece piece(head.data(), head.size());
        sent_one_way(conn_.send_one_way(Command::kHandoffCompute, std::span<const Piece>(&piece, 1),
                                        false, stream_id_));
      }
      wait_.reset();
    }
  }

  // Work queued behind an error is dropped until synchronize() reports it.
  bool dropping() { return !error_->get().is_ok(); }

  void sent_one_way(const Status& s) {
    if (!s.is_ok()) error_->set(s);
    sent_since_request_ = true;
  }

  // A stream that is never synchronised (a middle stage, with asynchronous copies) keeps only
  // the requests still in flight: their errors already went to error_.
  void track(std::shared_ptr<Pending> p) {
    last_request_ = p;
    sent_since_request_ = false;
    std::erase_if(outstanding_, [](const std::shared_ptr<Pending>& q) { return q->done(); });
    outstanding_.push_back(std::move(p));
  }

  // The request whose completion marks everything sent so far as done: the last request, or a
  // new SYNCHRONIZE when one-way messages followed it. nullptr when nothing was ever sent.
  std::shared_ptr<Pending> fence() {
    if (last_request_ && !sent_since_request_) return last_request_;
    if (!last_request_ && !sent_since_request_) return nullptr;
    if (dropping()) return nullptr;
    std::shared_ptr<Pending> p =
        conn_.send_request(Command::kSynchronize, {}, !loading_, stream_id_);
    p->then([err = error_](const Result<Message>& r) {
      if (!r.is_ok()) err->set(r.status());
    });
    track(p);
    return p;
  }

  // Events of other streams that must complete before anything queued after them is sent.
  void wait_events() {
    for (const Event& e : waits_) {
      Status s = e.wait();
      if (!s.is_ok()) error_->set(s);
    }
    waits_.clear();
  }

  void queue_write(const Region& r, const uint8_t* ptr, size_t arena_offset) {
    resolve_probes(0);                   // a write lands after the weights written before it
    if (!reads_.empty()) flush_reads();  // reads queued before a write see the old bytes
    writes_.push_back({r, ptr, arena_offset});
  }

  void flush_writes() {
    if (writes_.empty()) return;
    wait_events();
    if (dropping()) {
      writes_.clear();
      arena_.clear();
      return;
    }
    auto data = [&](const Write& w) {
      return Piece(w.ptr ? w.ptr : arena_.data() + w.arena_offset, w.region.size);
    };
    if (conn_.has(kCapBatched) && writes_.size() > 1) {
      SetTensorsRequest req;
      for (const Write& w : writes_) req.regions.push_back(w.region);
      std::vector<uint8_t> head;
      encode(req, &head);
      std::vector<Piece> pieces = {Piece(head.data(), head.size())};
      for (const Write& w : writes_) pieces.push_back(data(w));
      sent_one_way(conn_.send_one_way(Command::kSetTensors, pieces, !loading_, stream_id_));
    } else {
      for (const Write& w : writes_) {
        SetTensorRequest req;
        req.region = w.region;
        std::vector<uint8_t> head;
        encode(req, &head);
        const Piece pieces[2] = {Piece(head.data(), head.size()), data(w)};
        sent_one_way(conn_.send_one_way(Command::kSetTensor, pieces, !loading_, stream_id_));
      }
    }
    writes_.clear();
    arena_.clear();
  }

  void flush_reads() {
    if (reads_.empty()) return;
    wait_events();
    if (dropping()) {
      reads_.clear();
      return;
    }
    if (conn_.has(kCapBatched) && conn_.options().batched_get) {
      GetTensorsRequest req;
      for (const Read& r : reads_) req.regions.push_back(r.region);
      send_read(Command::kGetTensors, req, reads_);
    } else {
      for (const Read& r : reads_) send_read(Command::kGetTensor, GetTensorRequest{r.region}, {r});
    }
    reads_.clear();
  }

  // Sends a read; its response is scattered into the destinations on the receiver thread. The
  // worker's answer is untrusted: its size must be exactly what was asked.
  template <typename Req>
  void send_read(Command c, const Req& req, std::vector<Read> reads) {
    std::vector<uint8_t> payload;
    encode(req, &payload);
    const Piece piece(payload.data(), payload.size());
    std::shared_ptr<Pending> p =
        conn_.send_request(c, std::span<const Piece>(&piece, 1), true, stream_id_);
    p->then([reads = std::move(reads), err = error_, label = conn_.label(),
             c](const Result<Message>& r) {
      if (!r.is_ok()) {
        err->set(r.status());
        return;
      }
      uint64_t want = 0;
      for (const Read& rd : reads) want += rd.region.size;
      if (r->payload.size() != want) {
        err->set(invalid_argument("worker " + label + ": " + command_name(c) + " answered " +
                                  std::to_string(r->payload.size()) + " bytes for " +
                                  std::to_string(want) + " asked"));
        return;
      }
      uint64_t off = 0;
      for (const Read& rd : reads) {
        std::memcpy(rd.dst, r->payload.data() + off, rd.region.size);
        off += rd.region.size;
      }
    });
    track(std::move(p));
  }

  void flush_group() {
    if (group_.empty()) return;
    group_region_.size = group_.size();
    // The probe keeps the bytes: group_ is refilled before its answer is read.
    upload_chunk(group_region_, nullptr, std::exchange(group_, {}));
  }

  // One chunk of weights: by hash when the worker may have it (chunks of >= 1 MiB, and packed
  // groups of small tensors), else the bytes (from the caller's memory, no copy), marked
  // cacheable. Probes are pipelined: up to kMaxProbesInFlight are sent before the oldest
  // answer is read, so a model of N blobs costs about N / kMaxProbesInFlight round trips, and
  // the worker reads its cache while the client hashes the next blobs.
  void upload_chunk(const Region& region, const uint8_t* data, std::vector<uint8_t> owned = {}) {
    if (dropping()) return;
    const bool group = !owned.empty();
    if (group) data = owned.data();
    const bool large = region.size >= kHashMinBytes;
    if (!(large || group) || !conn_.has(kCapSetTensorHash)) {
      send_weights(region, data, large);
      return;
    }
    // A probe answered "found" writes its region when the worker reads it: a region that
    // overlaps one still waiting must not overtake it.
    for (const Probe& q : probes_) {
      if (q.region.buffer == region.buffer && q.region.offset < region.offset + region.size &&
          region.offset < q.region.offset + q.region.size) {
        resolve_probes(0);
        break;
      }
    }
    SetTensorHashRequest req;
    req.region = region;
    req.hash = hash128(std::span<const uint8_t>(data, region.size));
    std::vector<uint8_t> payload;
    encode(req, &payload);
    const Piece piece(payload.data(), payload.size());
    Probe probe{region, data, std::move(owned), large,
                conn_.send_request(Command::kSetTensorHash, std::span<const Piece>(&piece, 1),
                                   false, stream_id_)};
    probes_.push_back(std::move(probe));
    resolve_probes(kMaxProbesInFlight - 1);
  }

  // Reads the answers of the oldest probes until at most `keep` are in flight, and sends the
  // bytes of each blob the worker did not have.
  void resolve_probes(size_t keep) {
    while (probes_.size() > keep) {
      Probe q = std::move(probes_.front());
      probes_.pop_front();
      const Result<Message>& r = q.pending->wait();
      if (dropping()) continue;  // an earlier probe failed: the rest are dropped unread
      if (!r.is_ok()) {
        error_->set(r.status());
        continue;
      }
      auto found = decode_set_tensor_hash_response(r->payload);
      if (!found.is_ok()) {
        error_->set(found.status().with_context("worker " + conn_.label() + ": SET_TENSOR_HASH"));
        continue;
      }
      if (found->found) {
        conn_.stats().on_weights(0, q.region.size, q.large);
        continue;
      }
      send_weights(q.region, q.data, q.large);
    }
  }

  void send_weights(const Region& region, const uint8_t* data, bool large) {
    SetTensorRequest req;
    req.region = region;
    req.flags = kSetCacheable;
    std::vector<uint8_t> head;
    encode(req, &head);
    const Piece pieces[2] = {Piece(head.data(), head.size()), Piece(data, region.size)};
    conn_.stats().on_weights(region.size, 0, large);
    Status s = conn_.send_one_way(Command::kSetTensor, pieces, false, stream_id_);
    if (!s.is_ok()) error_->set(s);
    sent_since_request_ = true;
  }

  std::shared_ptr<Shared> shared_;
  // The connection the stream was made on, for its life: its graph ids and buffer handles
  // mean nothing on another.
  const std::shared_ptr<Connection> session_;
  Connection& conn_;
  const uint32_t graph_id_;
  // The worker keeps this stream's sticky error apart from other streams' (kCapStreams).
  const uint32_t stream_id_;
  std::shared_ptr<StreamError> error_;

  std::vector<Write> writes_;
  std::vector<uint8_t> arena_;  // copies of set_tensor data until they leave
  std::vector<Read> reads_;
  std::vector<Event> waits_;
  std::vector<uint8_t> last_graph_;
  // The graph whose bytes last_graph_ holds (the worker's graph graph_id_), held so that its
  // address names it.
  std::shared_ptr<const Graph> last_sent_;
  std::shared_ptr<Pending> last_request_;
  bool sent_since_request_ = false;
  std::vector<std::shared_ptr<Pending>> outstanding_;
  // Weight blobs offered by hash whose answers are not read yet, oldest first.
  struct Probe {
    Region region;
    const uint8_t* data;         // the blob: the caller's memory, or owned.data()
    std::vector<uint8_t> owned;  // a packed group's bytes
    bool large;
    std::shared_ptr<Pending> pending;
  };
  static constexpr size_t kMaxProbesInFlight = 64;
  std::deque<Probe> probes_;
  // Small weights packed for one upload, and where they go.
  static constexpr uint64_t kMaxGap = 4096;
  std::vector<uint8_t> group_;
  Region group_region_;
  // A stream that uploads weights: its messages are the load, not decode steps (stats).
  bool loading_ = false;
  // Hand-off parts of the next computation (handoff()): where its output goes, where its input
  // comes from.
  struct PendingSend {
    uint32_t link;
    uint64_t seq;
    Region src, dst;
    std::shared_ptr<HandoffState> state;
  };
  struct PendingWait {
    uint64_t seq;
    Region dst;
    std::shared_ptr<HandoffState> state;
  };
  std::optional<PendingSend> send_;
  std::optional<PendingWait> wait_;
};

class RemoteDevice : public Device {
 public:
  explicit RemoteDevice(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  DeviceInfo info() const override {
    const std::shared_ptr<Connection> conn = shared_->conn();
    DeviceInfo info = conn->device_info();
    const std::string remote =
        info.name + (info.description.empty() ? "" : ", " + info.description);
    info.name = conn->label();
    info.description = "worker " + conn->options().endpoint + ": " + remote;
    const uint64_t used = shared_->allocated.load();
    info.memory_free = info.memory_free > used ? info.memory_free - used : 0;
    return info;
  }

  Result<std::unique_ptr<Buffer>> alloc_buffer(uint64_t size) override {
    std::shared_ptr<Connection> conn = shared_->conn();
    auto m = call_encoded(*conn, Command::kAllocBuffer, AllocBufferRequest{size});
    if (!m.is_ok()) return m.status();
    auto r = decode_alloc_buffer_response(m->payload);
    if (!r.is_ok()) return r.status().with_context("worker " + conn->label());
    if (r->handle == 0 || r->size < size) {
      return invalid_argument("worker " + conn->label() + ": ALLOC_BUFFER of " +
                              std::to_string(size) + " bytes answered handle " +
                              std::to_string(r->handle) + " of " + std::to_string(r->size) +
                              " bytes");
    }
    shared_->allocated += size;
    return std::unique_ptr<Buffer>(
        std::make_unique<RemoteBuffer>(shared_, std::move(conn), r->handle, size));
  }

  std::unique_ptr<Stream> create_stream() override {
    return std::make_unique<RemoteStream>(shared_);
  }

  DeviceCaps caps() const override { return shared_->conn()->device_caps(); }

  std::shared_ptr<Connection> connection() const { return shared_->conn(); }
  Shared& shared() { return *shared_; }

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace

Result<std::unique_ptr<Device>> remote_device_new(const ClientOptions& options) {
  auto shared = std::make_shared<Shared>();
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Connection> conn, Connection::open(options));
  shared->set_conn(std::move(conn));
  return std::unique_ptr<Device>(std::make_unique<RemoteDevice>(std::move(shared)));
}

std::shared_ptr<Connection> remote_device_connection(Device& device) {
  auto* remote = dynamic_cast<RemoteDevice*>(&device);
  return remote ? remote->connection() : nullptr;
}

Status remote_device_set_connection(Device& device, std::shared_ptr<Connection> conn) {
  auto* remote = dynamic_cast<RemoteDevice*>(&device);
  STRATA_CHECK(remote != nullptr && conn != nullptr, "a remote device and a connection");
  const std::shared_ptr<Connection> old = remote->connection();
  // The layers placed on the device were checked against what its worker ran: a worker that
  // comes back as an older build must not take them.
  const std::string missing = caps_missing(old->device_caps(), conn->device_caps());
  if (!missing.empty()) {
    return unsupported("worker " + conn->label() + " came back unable to run what it ran before: " +
                       missing + " (update its worker)");
  }
  remote->shared().set_conn(std::move(conn));
  return Status::ok();
}

}  // namespace strata::rpc
