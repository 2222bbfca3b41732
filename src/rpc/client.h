// The client end of one connection to a worker, shared by every stream and buffer of a remote
// device (several contexts, several threads).
//
// Each message is handed whole to the transport, whose send is atomic, so two threads never
// interleave bytes on the wire. Responses are matched to requests by request_id on a receiver
// thread, which also bounds every wait: a request unanswered for timeout_ms, or a send stuck for
// as long, fails with an error naming the worker, and the connection is then closed so that
// everything after it fails at once instead of hanging. The client never aborts on what a
// worker sends or fails to send. When the worker closes idle sessions, a keepalive thread
// sends a DEVICE_INFO after a quarter of its idle timeout without any message, so that an
// idle server keeps its remote weights.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex_guarded.h"
#include "core/status.h"
#include "rpc/protocol.h"
#include "rpc/stats.h"
#include "rpc/transport.h"

namespace strata::rpc {

struct ClientOptions {
  std::string endpoint;    // "host:port" or "unix:/path"
  std::string name;        // "RPC0", for messages and stats
  std::string token;       // shared secret; empty: none
  uint64_t hide_caps = 0;  // capabilities this client pretends not to have
  int timeout_ms = 30000;  // the longest wait for a response (and for a stuck send)
  int connect_timeout_ms = 10000;
  uint16_t version_major = kVersionMajor;  // a test may pose as another version
  int stats_period_ms = 0;  // > 0: print the stats to stderr every period, and at close
  bool batched_get = true;  // false: every read is its own GET_TENSOR round trip (A/B runs)
  // The hidden state moves into a remote stage by asynchronous copy: the stage waits for the
  // previous stage's output on its own queue. false (A/B runs): the copy waits for it on the
  // caller's thread, and a stage that hands off is waited for before the next one starts, so
  // that every stage is done before the next one starts.
  bool async_copy = true;
  // Between two workers that can, the hidden state goes from one to the next directly
  // (Stream::handoff), not through this host. false: always through this host.
  bool handoff = true;
};

// Reads STRATA_RPC_TIMEOUT_MS, STRATA_RPC_HIDE_CAPS, STRATA_RPC_STATS(_MS),
// STRATA_RPC_NO_BATCHED_GET, STRATA_RPC_NO_ASYNC_COPY, STRATA_RPC_HANDOFF and
// STRATA_RPC_VERSION_MAJOR (tests) into `o`, once, when the remote devices are made; a
// malformed value is an error naming it.
Status client_options_from_env(ClientOptions* o);

// A request in flight. Completes exactly once: with the response, or with the error that
// ended it (an error response, the connection lost, the timeout).
class Pending {
 public:
  using Callback = std::function<void(const Result<Message>&)>;
  Pending(Command command, bool step) : command_(command), step_(step) {}
  // Blocks until complete. Never hangs: the receiver thread completes every request by its
  // deadline.
  const Result<Message>& wait();
  // Runs `fn` once complete (now, on this thread, if it already is; else on the receiver).
  void then(Callback fn);
  void complete(Result<Message> r);
  bool done() const { return state_.lock()->done; }
  Command command() const { return command_; }
  bool step() const { return step_; }

 private:
  struct State {
    bool completing = false;
    bool done = false;
    std::vector<Callback> callbacks;
  };
  const Command command_;
  const bool step_;
  MutexGuarded<State> state_;  // its condition variable wakes wait()
  // Set once, under the lock by the thread that marks the request completing, and never
  // changed after: that thread's callbacks, and whoever saw `done`, read it without the lock.
  Result<Message> result_ = Status(ErrorKind::kInternal, "pending");
};

class Connection {
 public:
  // Connects, says HELLO (version, capabilities, authentication) and reads DEVICE_INFO.
  static Result<std::shared_ptr<Connection>> open(const ClientOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Capabilities both sides have: optional commands are used only when their bit is here.
  uint64_t caps() const { return caps_; }
  bool has(uint64_t cap) const { return (caps_ & cap) != 0; }
  const DeviceInfo& device_info() const { return info_; }
  // The ops and weight dtypes the worker runs (from HELLO; the baseline for an older worker).
  const DeviceCaps& device_caps() const { return device_caps_; }
  const ClientOptions& options() const { return options_; }
  // "RPC0[127.0.0.1:50052]": how errors name the worker.
  const std::string& label() const { return label_; }
  RpcStats& stats() { return stats_; }
  // The error that closed the connection; ok while it is usable.
  Status broken() const;

  // Sends a one-way message (no response). `step`: sent by a stream while decoding (stats).
  // `stream`: the id of the sending stream (new_stream_id()), 0 for none; the worker keeps
  // the sticky error of a failed one-way command per stream when it has kCapStreams, else
  // per connection.
  Status send_one_way(Command c, std::span<const Piece> pieces, bool step, uint32_t stream = 0);
  // Sends a request; the response completes the returned Pending.
  std::shared_ptr<Pending> send_request(Command c, std::span<const Piece> pieces, bool step,
                                        uint32_t stream = 0);
  // A stream id no other stream of this connection has; never 0.
  uint32_t new_stream_id() { return next_stream_++; }
  // send_request and wait; an error response becomes the returned Status.
  Result<Message> call(Command c, std::span<const Piece> pieces);

 private:
  using Clock = std::chrono::steady_clock;
  explicit Connection(const ClientOptions& options);
  Status hello();
  Status send_locked_free(const Header& h, std::span<const Piece> pieces);
  void receive_loop();
  void report_loop();
  void keepalive_loop();
  void fail_all(const Status& s);

  const ClientOptions options_;
  std::string label_;
  std::unique_ptr<Transport> transport_;
  uint64_t caps_ = 0;
  DeviceInfo info_;
  DeviceCaps device_caps_;
  RpcStats stats_;

  std::atomic<uint32_t> next_id_{1};
  std::atomic<uint32_t> next_stream_{1};
  struct InFlight {
    std::shared_ptr<Pending> pending;
    Clock::time_point deadline;
  };
  struct State {
    std::map<uint32_t, InFlight> in_flight;
    std::map<uint64_t, Clock::time_point> sends;  // sends in progress: their deadlines
    uint64_t next_send = 0;
    Status broken;
    bool stopping = false;
  };
  // Its condition variable wakes the reporter and keepalive threads when the connection closes.
  MutexGuarded<State> state_;

  // The worker's idle timeout (0: none) and when the last message left, for keepalive_loop.
  uint64_t worker_idle_ms_ = 0;
  std::atomic<int64_t> last_send_ns_{0};

  std::thread receiver_;
  std::thread reporter_;
  std::thread keepalive_;
};

}  // namespace strata::rpc
