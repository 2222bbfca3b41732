// The worker: serves this machine's CPU as a device to RPC clients (`strata worker`).
//
// Model-agnostic: it allocates buffers, stores tensors and runs the graphs it is sent. It
// trusts nothing: every handle, offset, size, count and graph edge in a message is checked
// before memory is touched or allocated, and a bad message fails that command (an error reply,
// or the sticky error of its stream for one-way commands) or closes that connection only.
//
// Each connection has its own thread, buffers and cached graphs, all freed when it closes; a
// handle of another connection does not resolve. Computations of all connections share one
// thread pool, one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "rpc/protocol.h"

namespace strata::rpc {

struct WorkerOptions {
  std::string address = "127.0.0.1:50052";  // "host:port" or "unix:/path"
  int n_threads = 1;
  uint64_t memory_limit = 0;  // bytes across all connections; 0: the machine's available memory
  std::string cache_dir;      // weight blobs by content hash; empty: no cache
  std::string auth_token;     // empty: no authentication
  uint64_t hide_caps = 0;     // capability bits not to advertise (compatibility tests)
  // Ops and weight dtypes neither to announce nor to run, to pose as an older worker (tests).
  OpSet hide_ops;
  DTypeSet hide_weight_dtypes;
  bool log = true;  // one line per connection on stderr
  // Where those lines go instead of stderr, when set (tests that report why a connection ended).
  // Called from the connections' threads, several at once.
  std::function<void(const std::string&)> log_to;
  int handshake_timeout_ms = 10000;
  // A session that sends nothing for this long is closed and its buffers freed, so that a
  // client that vanished without closing (a dead machine, a cut network) does not pin memory.
  // The same bound applies to a stall inside a message. 0: none. Clients of this version
  // keep an idle session open with a cheap request (see HelloResponse::idle_timeout_ms).
  int idle_timeout_ms = 600 * 1000;
  // The major protocol version the worker speaks. Only tests change it, to pose as a worker of
  // another version (`strata worker --protocol-major N`).
  uint16_t version_major = kVersionMajor;
};

// Per-connection bounds (denial of service): a client that wants more opens more connections,
// each of which costs it a handshake, and all of them share --mem.
constexpr uint32_t kMaxBuffersPerConnection = 1 << 16;
constexpr uint32_t kMaxCachedGraphs = 256;
constexpr uint64_t kMaxCachedGraphBytes = uint64_t{256} << 20;
// Streams of one connection holding an unreported error (each costs its error text, at most
// kMaxErrorBytes). A client has a few streams per context; one with more is broken or hostile.
constexpr uint32_t kMaxStreamErrors = 1024;

class Worker {
 public:
  // Binds the address and starts accepting.
  static Result<std::unique_ptr<Worker>> start(const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The bound address ("127.0.0.1:40123" when port 0 was asked).
  std::string address() const;
  // True when listening beyond loopback (the caller warns when there is no token).
  bool beyond_loopback() const;
  // Closes the listener and every connection, and joins their threads. Idempotent.
  void stop();
  // Blocks until stop() (from another thread or a signal handler's helper thread).
  void wait();

  // For tests and logs.
  uint64_t bytes_allocated() const;
  int open_connections() const;

  struct Impl;
  explicit Worker(std::unique_ptr<Impl> impl);  // use start()

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::rpc
