// A TCP relay that behaves like a network link (`strata proxy`): every connection accepted on
// the listening address opens one to the target, and each direction's bytes are held and
// passed on when a link of the given delay and rate would deliver them (net/link.h).
//
// For benchmarks of real links on one machine: put one in front of each worker and point the
// client at the proxies. Byte order is kept; nothing is lost or reordered. Each direction
// holds at most max_held_bytes and stops reading its source when full, so that the sender is
// held back by TCP's flow control, as by a slow link, and memory stays bounded. An end of
// stream is passed on (as a half-close) once the bytes before it are delivered; a reset or an
// error on either side closes both at once.
//
// Non-goals: a secure relay (it listens on loopback by default and authenticates nobody; the
// worker's token still applies end to end), loss, jitter, UDP.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/link.h"

namespace strata::net {

struct ProxyOptions {
  std::string listen = "127.0.0.1:0";  // "host:port"; port 0 picks a free one
  std::string target;                  // "host:port"
  LinkShape link;                      // applied to each direction on its own
  size_t max_held_bytes = size_t{4} << 20;
  int connect_timeout_ms = 10000;
  bool log = true;  // one line per connection on stderr
};

// Concurrent connections at most (each has a thread and up to 2 x max_held_bytes); more are
// refused by closing them, so a runaway client cannot exhaust threads or memory.
constexpr int kMaxProxyConnections = 256;
// The largest max_held_bytes accepted: a direction's ring is allocated when its connection
// opens.
constexpr size_t kMaxHeldBytesLimit = size_t{1} << 30;

class Proxy {
 public:
  // Binds the listening address (checking the options) and starts accepting.
  static Result<std::unique_ptr<Proxy>> start(const ProxyOptions& options);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // The bound address ("127.0.0.1:40123" when port 0 was asked).
  std::string address() const;
  // True when listening beyond loopback.
  bool beyond_loopback() const;
  // Closes the listener and every connection (held bytes are dropped) and joins their
  // threads. Idempotent; thread-safe.
  void stop();
  // Blocks until stop() has been called.
  void wait();
  // Connections being relayed now (tests).
  int open_connections() const;

  struct Impl;
  explicit Proxy(std::unique_ptr<Impl> impl);  // use start()

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::net
