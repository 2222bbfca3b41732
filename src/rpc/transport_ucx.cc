// UCX: messages as UCP active messages, over whatever UCX finds (InfiniBand or RoCE verbs on a
// cluster, shared memory or TCP elsewhere; UCX_TLS chooses). Addresses "ucx:host:port" and
// "ucx://host:port"; the port is a UCP listener's (a TCP socket that UCX's connection manager
// accepts on, then moves the connection to the transports both ends have).
//
// Why active messages: one ucp_am_send_nbx is one callback at the receiver, which is this
// interface's "one send = one receive", and the callback gets a user header before the data,
// delivered eagerly when small or, for a large message, as a rendezvous that the receiver
// completes into buffers of its choice (ucp_am_recv_data_nbx; on RDMA, a get straight into
// them). That is try_recv_into's header-first receive without a second copy. The tag API would
// need a probe and a second message to learn the header first; the stream API is a byte stream.
//
// A message is one active message: its user header is the protocol header and the payload's
// lead (the first min(payload_size, kRecvLeadBytes) bytes), its data the rest of the payload.
// Payloads whose rest is at least kRndvFromBytes go by rendezvous, so that they are never
// staged whole in UCX's buffers. UCP delivers a connection's active messages in order (one
// lane carries them).
//
// Each connection has its own UCP worker (so that one connection's traffic never lands in
// another's queue while its thread computes), used from several threads (UCS_THREAD_MODE_MULTI):
// the thread that waits progresses it, one at a time; the others wait on a condition variable
// and are woken after each round.
//
// Every wait ends by a deadline, looked at at least every kPollSliceMs, whatever UCX does: a
// round of progress is cut at a slice even when UCX always has more to do. A large message is
// one UCX operation whose bytes we do not see move, so a stall inside it is counted from the
// last time the connection's worker did anything: as long as it moves, a slow transfer (a
// loaded machine, a slow link) goes on; a transfer that moves slower than kSlowestBytesPerMs on
// average is a stall too. A send waits until UCX is done with the caller's memory: until the
// receiver has taken the message, the connection fails, or shutdown(), whose forced close
// cancels it; a request that UCX keeps past kCancelMs after the connection ended is reported
// as an error naming the peer, never waited for longer.
//
// shutdown() closes the endpoint with UCX's flushing close, which takes both ends: over TCP the
// peer first acknowledges what it has read, and only then is it told that the connection is
// closed; each end does its part only while it progresses its worker. A peer that is not waiting
// on the connection (its thread busy elsewhere, or a client between two calls) answers when it
// next does, perhaps long after shutdown() returned; so a thread of ours (closer_) goes on
// progressing this end until the close completes, for at most kCloseLingerMs, and the peer's
// next receive fails at once, as over TCP, instead of running into its timeout. Destroying the
// transport gives the close what is left of kCloseFlushMs from shutdown(), then cuts the
// connection with the worker (the peer then sees it lost rather than closed).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/mutex_guarded.h"
#include "rpc/transport_kinds.h"
#include "rpc/transport_socket.h"
#include "rpc/ucx_worker.h"

namespace strata::rpc {

#if STRATA_HAVE_UCX

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kAmId = kUcxAmId;
// Data of a message from this size on goes by rendezvous: the receiver pulls it into place.
constexpr size_t kRndvFromBytes = size_t{64} << 10;
// Messages and eager bytes that may wait in a connection's queue. The queue fills only while
// this end progresses the worker without reading (while it sends, say a large reply); a peer
// that sends more than this ahead of us is not a client of the protocol (DoS bound: the eager
// data is held by UCX until read).
constexpr size_t kMaxQueuedMessages = 4096;
constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;
// How long a shutdown lets messages already sent reach the peer before the transport's
// destruction may cut the connection.
constexpr int kCloseFlushMs = 1000;
// How long a closing connection's worker is progressed for a peer that does not answer its
// close: one that comes back within it is told at once; after it, the peer learns of the close
// only when this end is destroyed. Costs a thread that sleeps between wake-ups.
constexpr int kCloseLingerMs = 60 * 1000;
// A rendezvous transfer is one operation: besides a stall (no progress on the connection for
// the stall timeout), it fails once it has taken the stall timeout plus the time its bytes take
// at this rate, the slowest average we wait for (8 Mbit/s: a link or a loaded machine that is
// slower than this is stalled).
constexpr uint64_t kSlowestBytesPerMs = 1000;
// How long UCX may take to give back a request that a forced close cancelled (it does at once;
// this bounds the wait should it not).
constexpr int kCancelMs = 5000;
// How long a waiting thread polls the worker before it sleeps on its event descriptor.
constexpr int kSpinUs = 50;
// The longest a waiting thread sleeps without looking at the worker again.
constexpr int kPollSliceMs = 100;

Clock::time_point deadline_after(int timeout_ms) {
  return timeout_ms < 0 ? Clock::time_point::max()
                        : Clock::now() + std::chrono::milliseconds(timeout_ms);
}

int64_t ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

// A received active message that try_recv_into has not taken yet.
struct Arrival {
  std::vector<uint8_t> head;  // the user header: protocol header and lead
  void* data = nullptr;       // UCX's descriptor of the rest, held until received or released
  std::vector<uint8_t> copy;  // the rest, when UCX would not hold it (data is then nullptr)
  size_t length = 0;
  bool rndv = false;
};

class UcxTransport : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxContext> ctx, ucp_worker_h worker, Fd wake, std::string peer)
      : ctx_(std::move(ctx)), worker_(worker), wake_(std::move(wake)), peer_(std::move(peer)) {}

  ~UcxTransport() override {
    shutdown();
    if (closer_.joinable()) {
      state_.lock()->cut = true;
      kick();
      state_.notify_all();
      closer_.join();
    }
    ucx_worker_destroy(worker_, abandoned_.load());
  }

  // A worker with the message handler, before any endpoint can deliver to it.
  static Result<std::unique_ptr<UcxTransport>> make(std::shared_ptr<UcxContext> ctx,
                                                    std::string peer) {
    STRATA_ASSIGN_OR_RETURN(ucp_worker_h worker, ctx->new_worker());
    Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wake.get() < 0) {
      ucx_worker_destroy(worker, 0);
      return io_error(errno_text("eventfd"));
    }
    auto t =
        std::make_unique<UcxTransport>(std::move(ctx), worker, std::move(wake), std::move(peer));
    ucp_am_handler_param_t h{};
    h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    h.id = kAmId;
    h.cb = on_message;
    h.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
    h.arg = t.get();
    ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &h);
    if (s != UCS_OK) return unavailable("ucx: setting the message handler: " + ucs_text(s));
    s = ucp_worker_get_efd(worker, &t->efd_);
    if (s != UCS_OK) return unavailable("ucx: ucp_worker_get_efd: " + ucs_text(s));
    return t;
  }

  // Creates the endpoint: to a listener's address (client) or from a connection request.
  Status open_endpoint(const sockaddr* to, socklen_t to_len, ucp_conn_request_h request) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_error;
    p.err_handler.arg = this;
    if (request != nullptr) {
      p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
      p.conn_request = request;
    } else {
      p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
      p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
      p.sockaddr.addr = to;
      p.sockaddr.addrlen = to_len;
    }
    auto ep = ep_.lock();
    const ucs_status_t s = ucx_serialized([&] { return ucp_ep_create(worker_, &p, &*ep); });
    if (s != UCS_OK) {
      *ep = nullptr;
      return unavailable("connect " + peer_ + ": " + ucs_text(s));
    }
    return Status::ok();
  }

  // Waits until the endpoint is connected (a flush completes once it is).
  Status wait_connected(int timeout_ms) {
    ucs_status_ptr_t r;
    {
      auto ep = ep_.lock();
      ucp_request_param_t p{};
      r = ucp_ep_flush_nbx(*ep, &p);
      ++in_flight_;
    }
    const ucs_status_t s = wait_request(r, deadline_after(timeout_ms));
    if (s == UCS_INPROGRESS) {
      stray_ = r;  // in flight still: the forced close cancels it
      return unavailable("connect " + peer_ + ": timed out after " + std::to_string(timeout_ms) +
                         " ms");
    }
    --in_flight_;
    if (s != UCS_OK) return unavailable("connect " + peer_ + ": " + ucs_text(s));
    return Status::ok();
  }

  Status send(const Header& header, std::span<const Piece> pieces) override {
    Header h = header;
    STRATA_RETURN_IF_ERROR(set_payload_size(&h, pieces));
    // The user header: the protocol header, then the lead gathered from the pieces.
    const size_t n_lead = static_cast<size_t>(std::min<uint64_t>(h.payload_size, kRecvLeadBytes));
    std::vector<uint8_t> head(kHeaderBytes + n_lead);
    header_encode(h, head.data());
    std::vector<ucp_dt_iov_t> rest;
    size_t at = kHeaderBytes;
    for (const Piece& p : pieces) {
      const size_t to_head = std::min(p.size(), head.size() - at);
      if (to_head > 0) std::memcpy(head.data() + at, p.data(), to_head);
      at += to_head;
      if (p.size() > to_head) {
        rest.push_back({const_cast<uint8_t*>(p.data() + to_head), p.size() - to_head});
      }
    }
    const uint64_t rest_bytes = h.payload_size - n_lead;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = rest_bytes >= kRndvFromBytes ? UCP_AM_SEND_FLAG_RNDV : 0;
    const void* buffer = nullptr;
    size_t count = 0;
    if (rest.size() <= 1) {
      p.datatype = ucp_dt_make_contig(1);
      if (!rest.empty()) {
        buffer = rest[0].buffer;
        count = rest[0].length;
      }
    } else {
      p.datatype = ucp_dt_make_iov();
      buffer = rest.data();
      count = rest.size();
    }
    // One message at a time: each waits until UCX is done with the caller's memory.
    std::lock_guard<std::mutex> send_lock(send_mutex_);
    ucs_status_ptr_t r;
    {
      auto ep = ep_.lock();
      if (*ep == nullptr) return unavailable("send to " + peer_ + ": connection shut down");
      r = ucp_am_send_nbx(*ep, kAmId, head.data(), head.size(), buffer, count, &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) ++in_flight_;
    }
    if (UCS_PTR_IS_ERR(r)) {
      return unavailable("send to " + peer_ + ": " + ucs_text(UCS_PTR_STATUS(r)));
    }
    if (r == nullptr) return Status::ok();
    kick();
    // Until the receiver has taken it; a connection that ended cancels it.
    const ucs_status_t s = wait_request(r, Clock::time_point::max(), [](const State& st) {
      return st.ended_at != Clock::time_point::max() &&
             Clock::now() - st.ended_at >= std::chrono::milliseconds(kCancelMs);
    });
    --in_flight_;
    if (s == UCS_INPROGRESS) {
      abandon(r);
      return unavailable("send to " + peer_ + ": the connection ended, and UCX still held the " +
                         "message " + std::to_string(kCancelMs) + " ms later");
    }
    if (s != UCS_OK) return unavailable("send to " + peer_ + ": " + ucs_text(s));
    return Status::ok();
  }

  Result<std::optional<Message>> try_recv_into(int start_timeout_ms, int stall_timeout_ms,
                                               const Placer& place) override {
    if (!poisoned_.is_ok()) return poisoned_;
    Arrival a;
    {
      auto st = state_.lock();
      const bool any = wait(st, deadline_after(start_timeout_ms), [&st] {
        return !st->arrivals.empty() || st->closed || !st->failed.is_ok();
      });
      // Messages that arrived before the peer left are still delivered.
      if (st->arrivals.empty()) {
        if (st->closed) return unavailable("connection to " + peer_ + " closed");
        if (!st->failed.is_ok()) return st->failed;
        if (!any) return std::optional<Message>();
      }
      a = std::move(st->arrivals.front());
      st->arrivals.pop_front();
      if (!a.rndv) st->queued_bytes -= a.length;
    }
    Result<Message> m = receive(a, stall_timeout_ms, place);
    if (!m) return m.status();
    return std::optional<Message>(std::move(*m));
  }

  void shutdown() override {
    {
      auto st = state_.lock();
      if (st->closed) return;
      st->closed = true;
      st->ended_at = std::min(st->ended_at, Clock::now());
    }
    kick();
    state_.notify_all();
    // The messages nobody will read go back to UCX.
    std::deque<Arrival> left;
    {
      auto st = state_.lock();
      left.swap(st->arrivals);
      st->queued_bytes = 0;
    }
    for (Arrival& a : left) release(a);
    // Let what was sent reach the peer, then tell it that the connection is closed.
    close_endpoint(true);
  }

  std::string peer() const override { return peer_; }

 private:
  static ucs_status_t on_message(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
    auto* t = static_cast<UcxTransport*>(arg);
    Arrival a;
    const auto* h = static_cast<const uint8_t*>(header);
    a.head.assign(h, h + header_length);
    a.length = length;
    a.rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    auto st = t->state_.lock();
    // After a shutdown nobody reads it, and after an overflow nothing more is read: UCX drops
    // it. Messages that come after the peer's error are still read (they were sent before).
    if (st->closed || st->overflowed) return UCS_OK;
    if (st->arrivals.size() >= kMaxQueuedMessages ||
        (!a.rndv && st->queued_bytes + length > kMaxQueuedBytes)) {
      st->overflowed = true;
      st->failed = unavailable("recv from " + t->peer_ + ": the peer sent more than " +
                               std::to_string(kMaxQueuedMessages) + " messages or " +
                               std::to_string(kMaxQueuedBytes) +
                               " bytes ahead of what was read; the connection is closed");
      t->state_.notify_all();
      return UCS_OK;
    }
    if (length == 0) {
      // Nothing to hold (UCX may still hand over a descriptor: it goes back at once).
    } else if (a.rndv || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0) {
      a.data = data;
    } else {
      const auto* d = static_cast<const uint8_t*>(data);
      a.copy.assign(d, d + length);
    }
    if (!a.rndv) st->queued_bytes += length;
    const bool held = a.data != nullptr;
    st->arrivals.push_back(std::move(a));
    return held ? UCS_INPROGRESS : UCS_OK;  // held until received or released
  }

  static void on_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* t = static_cast<UcxTransport*>(arg);
    t->closing_.store(true);
    {
      auto st = t->state_.lock();
      if (st->failed.is_ok()) {
        // A reset is how a peer's close arrives; anything else is a failure.
        st->failed = status == UCS_ERR_CONNECTION_RESET
                         ? unavailable("connection to " + t->peer_ + " closed")
                         : unavailable("connection to " + t->peer_ + " lost: " + ucs_text(status));
      }
      st->ended_at = std::min(st->ended_at, Clock::now());
    }
    t->state_.notify_all();
  }

  // The rest of an arrival's message: checked, then received where the placer says.
  Result<Message> receive(Arrival& a, int stall_timeout_ms, const Placer& place) {
    if (a.head.size() < kHeaderBytes) {
      release(a);
      return out_of_step(invalid_argument("recv from " + peer_ + ": a message of " +
                                          std::to_string(a.head.size()) +
                                          " header bytes holds no header"));
    }
    Result<Header> h = header_decode({a.head.data(), kHeaderBytes}, max_payload_);
    if (!h) {
      release(a);
      return out_of_step(h.status());
    }
    const uint64_t n_lead = std::min<uint64_t>(h->payload_size, kRecvLeadBytes);
    if (a.head.size() - kHeaderBytes != n_lead || a.length != h->payload_size - n_lead) {
      release(a);
      return out_of_step(invalid_argument(
          "recv from " + peer_ + ": payload_size " + std::to_string(h->payload_size) +
          " but the message carries " + std::to_string(a.head.size() - kHeaderBytes) + " + " +
          std::to_string(a.length) + " bytes"));
    }
    Message m;
    m.header = *h;
    const std::span<const uint8_t> lead(a.head.data() + kHeaderBytes, n_lead);
    Result<PayloadWriter> w = PayloadWriter::start(*h, lead, place, &m);
    if (!w) {
      release(a);
      return out_of_step(w.status());
    }
    if (a.length == 0) {
      release(a);
      return m;
    }
    if (!a.rndv) {
      w->write(a.data != nullptr
                   ? std::span<const uint8_t>(static_cast<const uint8_t*>(a.data), a.length)
                   : std::span<const uint8_t>(a.copy));
      release(a);
      return m;
    }
    // Rendezvous: the data comes straight into the message's destination.
    std::vector<ucp_dt_iov_t> iov;
    while (w->remaining() > 0) {
      iovec chunk[64];
      size_t n_iov = 0;
      w->fill(chunk, 64, w->remaining(), &n_iov, /*whole_rest=*/true);
      size_t got = 0;
      for (size_t i = 0; i < n_iov; ++i) {
        iov.push_back({chunk[i].iov_base, chunk[i].iov_len});
        got += chunk[i].iov_len;
      }
      w->advance(got);
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = ucp_dt_make_iov();
    ucs_status_ptr_t r = nullptr;
    bool shut = false;
    {
      auto ep = ep_.lock();
      shut = *ep == nullptr;
      if (!shut) {
        r = ucp_am_recv_data_nbx(worker_, a.data, iov.data(), iov.size(), &p);
        if (r != nullptr && !UCS_PTR_IS_ERR(r)) ++in_flight_;
      }
    }
    // Outside the endpoint's lock: out_of_step closes the endpoint, which takes it.
    if (shut) {
      release(a);
      return out_of_step(unavailable("connection to " + peer_ + " shut down"));
    }
    if (UCS_PTR_IS_ERR(r)) {
      return out_of_step(unavailable("recv from " + peer_ + ": " + ucs_text(UCS_PTR_STATUS(r))));
    }
    if (r == nullptr) return m;
    struct Landed {  // the receive is over, whatever happens below
      std::atomic<int>& n;
      ~Landed() { --n; }
    } landed{in_flight_};
    // Until nothing moved on the connection for the stall timeout, or the slowest rate's time.
    const Clock::time_point start = Clock::now();
    const auto stall = std::chrono::milliseconds(stall_timeout_ms);
    const Clock::time_point ceiling =
        stall_timeout_ms < 0
            ? Clock::time_point::max()
            : start + stall + std::chrono::milliseconds(a.length / kSlowestBytesPerMs);
    const ucs_status_t s = wait_request(r, ceiling, [&](const State& st) {
      return stall_timeout_ms >= 0 && Clock::now() - std::max(start, st.last_progress) >= stall;
    });
    if (s == UCS_INPROGRESS) {
      const Clock::time_point now = Clock::now();
      std::string what =
          "recv from " + peer_ + ": a message of " +
          std::to_string(kHeaderBytes + h->payload_size) + " bytes stalled (" +
          (now >= ceiling ? "slower than " + std::to_string(kSlowestBytesPerMs) + " bytes/ms"
                          : "nothing moved for " + std::to_string(stall_timeout_ms) + " ms") +
          ", " + std::to_string(ms_between(start, now)) +
          " ms after it started); the connection is closed";
      // Cut the connection: UCX then lets go of the destination (bounded, should it not).
      close_endpoint(false);
      if (wait_request(r, deadline_after(kCancelMs)) == UCS_INPROGRESS) {
        abandon(r);
        what +=
            "; UCX did not give the destination back within " + std::to_string(kCancelMs) + " ms";
      }
      return out_of_step(unavailable(what));
    }
    if (s != UCS_OK) {
      return out_of_step(unavailable("connection to " + peer_ +
                                     " closed in the middle of a message: " + ucs_text(s)));
    }
    return m;
  }

  // An error inside a message: the connection is not used again.
  Status out_of_step(const Status& s) {
    poisoned_ = s;
    shutdown();
    return s;
  }

  // Gives an arrival's data back to UCX unread.
  void release(Arrival& a) {
    if (a.data != nullptr) ucp_am_data_release(worker_, a.data);
    a.data = nullptr;
  }

  // Closes the endpoint, once (UCX refuses a second close). A flushing close delivers what
  // was sent and then tells the peer (its error handler sees the connection reset), on
  // closer_'s thread (the header comment). It is used only when no send or receive of ours is
  // in flight: one that is (a peer that stopped reading or sending) needs the forced close,
  // which completes it as cancelled at once, so that UCX is done with the caller's memory
  // before the call returns. A failed endpoint is closed by force too, as UCX requires.
  void close_endpoint(bool flush) {
    closing_.store(true);
    ucp_ep_h ep;
    {
      auto current = ep_.lock();
      ep = *current;
      *current = nullptr;
      flush = flush && in_flight_ == 0;
    }
    if (ep == nullptr) return;
    flush = flush && state_.lock()->failed.is_ok();
    ucp_request_param_t p{};
    if (flush) {
      // Its sockets close at once when the close completes (or fails) in the call, else in a
      // later progress, which looks at the missed events itself.
      const ucs_status_ptr_t r =
          ucx_close_and_look(worker_, [&] { return ucp_ep_close_nbx(ep, &p); });
      if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
      {
        auto st = state_.lock();
        const Clock::time_point now = Clock::now();
        st->flush_until = now + std::chrono::milliseconds(kCloseFlushMs);
        st->linger_until = now + std::chrono::milliseconds(kCloseLingerMs);
      }
      closer_ = std::thread([this, r] {
        const ucs_status_t s = wait_request(r, Clock::time_point::max(), [](const State& st) {
          const Clock::time_point now = Clock::now();
          return now >= st.linger_until || (st.cut && now >= st.flush_until);
        });
        if (s == UCS_INPROGRESS) abandon(r);
      });
      return;
    }
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    // A forced close closes the sockets at once.
    const ucs_status_ptr_t r =
        ucx_close_and_look(worker_, [&] { return ucp_ep_close_nbx(ep, &p); });
    if (wait_request(r, deadline_after(kCancelMs)) == UCS_INPROGRESS) abandon(r);
    // The connect's flush, cancelled by the close.
    if (wait_request(stray_, deadline_after(kCancelMs)) == UCS_INPROGRESS) abandon(stray_);
    stray_ = nullptr;
  }

  // Leaves a request that did not complete in time to UCX, which ends it or drops it with the
  // worker.
  void abandon(ucs_status_ptr_t r) {
    ucx_request_free(r);
    ++abandoned_;
  }

  // Waits for a request (nullptr: done at once) and frees it; UCS_INPROGRESS if the deadline
  // passed, or stop(state) held, first (the request is then still live). stop is looked at
  // after each round of progress and at least every kPollSliceMs.
  template <typename Stop>
  ucs_status_t wait_request(ucs_status_ptr_t r, Clock::time_point deadline, Stop stop) {
    if (r == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s = UCS_INPROGRESS;
    {
      auto st = state_.lock();
      wait(st, deadline, [&] {
        s = ucp_request_check_status(r);
        return s != UCS_INPROGRESS || stop(*st);
      });
    }
    if (s != UCS_INPROGRESS) ucx_request_free(r);
    return s;
  }
  ucs_status_t wait_request(ucs_status_ptr_t r, Clock::time_point deadline) {
    return wait_request(r, deadline, [](const State&) { return false; });
  }

  struct State {
    bool progressing = false;  // a thread progresses the worker (wait())
    bool closed = false;
    bool overflowed = false;
    Status failed;  // the endpoint's error, or the queue overflowing
    std::deque<Arrival> arrivals;
    uint64_t queued_bytes = 0;        // eager data in arrivals
    Clock::time_point last_progress;  // when a round of progress last did something
    // When the connection ended (shutdown, or the endpoint's error): what is in flight then is
    // cancelled by UCX.
    Clock::time_point ended_at = Clock::time_point::max();
    // A flushing close (closer_): until when it may go on once the destructor is to cut the
    // connection (`cut`), and until when closer_ waits for it otherwise.
    Clock::time_point flush_until = Clock::time_point::max();
    Clock::time_point linger_until = Clock::time_point::max();
    bool cut = false;
  };
  using LockedState = MutexGuarded<State>::Locked<State>;

  // Progresses the worker until done() (called with the state locked) or the deadline: true if
  // done. One thread progresses at a time, with the lock released (the UCX callbacks that the
  // progress runs take it); the others wait for its round to end. done() and the deadline are
  // looked at after each round, which lasts at most kPollSliceMs.
  template <typename Done>
  bool wait(LockedState& st, Clock::time_point deadline, Done done) {
    for (;;) {
      if (done()) return true;
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return false;
      if (st->progressing) {
        st.wait_until(std::min(deadline, now + std::chrono::milliseconds(kPollSliceMs)));
        continue;
      }
      st->progressing = true;
      // What UCX has to do now, but no longer than a slice: it may always have more.
      const Clock::time_point round_end =
          std::min(deadline, now + std::chrono::milliseconds(kPollSliceMs));
      const bool moved = st.unlocked([this, round_end] {
        return ucx_progress_round([this] { return progress_once(); }, round_end);
      });
      if (moved) st->last_progress = Clock::now();
      state_.notify_all();  // what this round completed may be what another thread waits for
      // An answer often comes within microseconds: look again for a moment before sleeping.
      for (const Clock::time_point spin_end = Clock::now() + std::chrono::microseconds(kSpinUs);
           !done() && Clock::now() < spin_end;) {
        const unsigned n = st.unlocked([this] { return progress_once(); });
        if (n != 0) {
          st->last_progress = Clock::now();
          state_.notify_all();
        }
      }
      if (!done()) {
        // Armed unlocked: UCX takes its worker lock to arm, and holds it while its callbacks
        // take ours. Nothing arrives meanwhile, as only this thread progresses.
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        const int slice =
            static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), kPollSliceMs)));
        st.unlocked([this, slice] {
          if (arm() != UCS_OK) return;
          pollfd p[2] = {{efd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
          if (::poll(p, 2, slice) > 0 && p[1].revents != 0) {
            uint64_t n;
            [[maybe_unused]] ssize_t r = ::read(wake_.get(), &n, sizeof(n));
          }
        });
      }
      st->progressing = false;
      state_.notify_all();
    }
  }

  // One ucp_worker_progress, or ucp_worker_arm, under the socket lock (ucx_worker.h): shared
  // while the connection is up, exclusive once it closes, as its sockets then close.
  template <typename Call>
  auto held(Call call) {
    return closing_.load() ? ucx_serialized(call) : ucx_shared(call);
  }
  unsigned progress_once() {
    return held([this] { return ucp_worker_progress(worker_); });
  }
  ucs_status_t arm() {
    return held([this] { return ucp_worker_arm(worker_); });
  }

  // Wakes the thread that progresses the worker: there is something new to progress or see.
  void kick() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_.get(), &one, sizeof(one));
  }

  std::shared_ptr<UcxContext> ctx_;  // outlives the worker
  ucp_worker_h worker_;
  int efd_ = -1;  // the worker's, not ours to close
  Fd wake_;       // an eventfd: kick()
  std::string peer_;

  // The endpoint: sends, and the close that ends them. Its lock also orders the counting of a
  // send or receive in in_flight_ before a close that looks at the count.
  MutexGuarded<ucp_ep_h> ep_{nullptr};
  std::atomic<int> in_flight_{0};     // our sends and rendezvous receives not complete yet
  ucs_status_ptr_t stray_ = nullptr;  // the connect's flush, when it timed out
  std::atomic<int> abandoned_{0};     // requests left to UCX (ucx_worker_destroy)
  // Set when the endpoint is closed or fails: its sockets close in the progress that follows.
  std::atomic<bool> closing_{false};
  // Sees a flushing close through (close_endpoint); set once, by the thread that closes the
  // endpoint, and joined by the destructor.
  std::thread closer_;
  // Guards no data: it keeps one send at a time in UCX, each until UCX is done with the
  // caller's memory.
  std::mutex send_mutex_;

  // The UCX callbacks take its lock. Its condition variable wakes the threads that wait for
  // another's round of progress.
  MutexGuarded<State> state_;

  Status poisoned_;  // set by the receiving thread only
};

class UcxListener : public Listener {
 public:
  UcxListener(std::shared_ptr<UcxContext> ctx, ucp_worker_h worker, Fd wake)
      : ctx_(std::move(ctx)), worker_(worker), wake_(std::move(wake)) {}
  ~UcxListener() override {
    UcxSocketHold hold;
    if (listener_ != nullptr) {
      for (ucp_conn_request_h r : requests_) ucp_listener_reject(listener_, r);
      ucp_listener_destroy(listener_);
    }
    ucp_worker_destroy(worker_);
  }

  static Result<std::unique_ptr<Listener>> create(const std::string& address,
                                                  const std::string& where) {
    STRATA_ASSIGN_OR_RETURN(AddressList list, resolve_stream(address, where, true));
    const addrinfo* res = list.get();
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<UcxContext> ctx, UcxContext::create());
    STRATA_ASSIGN_OR_RETURN(ucp_worker_h worker, ctx->new_worker());
    Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    auto l = std::make_unique<UcxListener>(ctx, worker, std::move(wake));
    if (l->wake_.get() < 0) return io_error(errno_text("eventfd"));
    ucs_status_t s = ucp_worker_get_efd(worker, &l->efd_);
    if (s != UCS_OK) return unavailable("ucx: ucp_worker_get_efd: " + ucs_text(s));
    ucp_listener_params_t p{};
    p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    p.sockaddr.addr = res->ai_addr;
    p.sockaddr.addrlen = res->ai_addrlen;
    p.conn_handler.cb = on_request;
    p.conn_handler.arg = l.get();
    s = ucx_serialized([&] { return ucp_listener_create(worker, &p, &l->listener_); });
    if (s != UCS_OK) {
      l->listener_ = nullptr;
      return io_error("listen " + address + ": " + ucs_text(s));
    }
    ucp_listener_attr_t a{};
    a.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    s = ucp_listener_query(l->listener_, &a);
    if (s != UCS_OK) return io_error("listen " + address + ": " + ucs_text(s));
    const sockaddr* sa = reinterpret_cast<const sockaddr*>(&a.sockaddr);
    l->address_ = "ucx:" + sockaddr_text(sa);
    l->beyond_loopback_ = !loopback(sa);
    return std::unique_ptr<Listener>(std::move(l));
  }

  Result<std::unique_ptr<Transport>> accept(int timeout_ms) override {
    const Clock::time_point deadline = deadline_after(timeout_ms);
    for (;;) {
      if (closed_.load()) return unavailable("listener " + address_ + " shut down");
      ucx_progress_round(
          [this] { return ucx_serialized([this] { return ucp_worker_progress(worker_); }); },
          std::min(deadline, Clock::now() + std::chrono::milliseconds(kPollSliceMs)));
      if (!requests_.empty()) {
        ucp_conn_request_h r = requests_.front();
        requests_.pop_front();
        Result<std::unique_ptr<Transport>> t = accept_one(r);
        if (t) return t;
        continue;  // that client is gone or refused; wait for the next
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return unavailable("accept on " + address_ + ": timed out");
      if (ucx_serialized([this] { return ucp_worker_arm(worker_); }) != UCS_OK) continue;
      const int slice = static_cast<int>(std::min<int64_t>(
          kPollSliceMs,
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()));
      pollfd p[2] = {{efd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      ::poll(p, 2, slice);
    }
  }

  std::string address() const override { return address_; }
  bool beyond_loopback() const override { return beyond_loopback_; }

  void shutdown() override {
    closed_.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_.get(), &one, sizeof(one));
  }

 private:
  static void on_request(ucp_conn_request_h r, void* arg) {
    static_cast<UcxListener*>(arg)->requests_.push_back(r);
  }

  Result<std::unique_ptr<Transport>> accept_one(ucp_conn_request_h r) {
    ucp_conn_request_attr_t a{};
    a.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    std::string peer = "ucx:?";
    if (ucp_conn_request_query(r, &a) == UCS_OK) {
      peer = "ucx:" + sockaddr_text(reinterpret_cast<const sockaddr*>(&a.client_address));
    }
    Result<std::unique_ptr<UcxTransport>> t = UcxTransport::make(ctx_, peer);
    if (!t) {
      ucx_close_and_look(worker_, [&] { return ucp_listener_reject(listener_, r); });
      return t.status();
    }
    STRATA_RETURN_IF_ERROR((*t)->open_endpoint(nullptr, 0, r));
    return std::unique_ptr<Transport>(std::move(*t));
  }

  std::shared_ptr<UcxContext> ctx_;
  ucp_worker_h worker_;
  int efd_ = -1;
  Fd wake_;
  ucp_listener_h listener_ = nullptr;
  std::deque<ucp_conn_request_h> requests_;  // accept()'s thread only (its progress fills it)
  std::string address_;
  bool beyond_loopback_ = false;
  std::atomic<bool> closed_{false};
};

}  // namespace

Result<std::unique_ptr<Transport>> ucx_connect(const std::string& address, const std::string& where,
                                               int timeout_ms) {
  STRATA_ASSIGN_OR_RETURN(AddressList list, resolve_stream(address, where, false));
  const addrinfo* res = list.get();
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<UcxContext> ctx, UcxContext::create());
  const std::string peer = "ucx:" + sockaddr_text(res->ai_addr);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> t, UcxTransport::make(ctx, peer));
  STRATA_RETURN_IF_ERROR(t->open_endpoint(res->ai_addr, res->ai_addrlen, nullptr));
  STRATA_RETURN_IF_ERROR(t->wait_connected(timeout_ms));
  return std::unique_ptr<Transport>(std::move(t));
}

Result<std::unique_ptr<Listener>> ucx_listen(const std::string& address, const std::string& where) {
  return UcxListener::create(address, where);
}

#else  // !STRATA_HAVE_UCX

namespace {

Status no_ucx(const std::string& address) {
  return unsupported("address '" + address +
                     "': this strata was built without UCX (the 'ucx' transport needs libucx-dev, "
                     "found by pkg-config as 'ucx' when CMake configures the build)");
}

}  // namespace

Result<std::unique_ptr<Transport>> ucx_connect(const std::string& address, const std::string&,
                                               int) {
  return no_ucx(address);
}

Result<std::unique_ptr<Listener>> ucx_listen(const std::string& address, const std::string&) {
  return no_ucx(address);
}

#endif

}  // namespace strata::rpc
