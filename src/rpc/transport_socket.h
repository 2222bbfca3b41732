// What the socket transports (TCP, Unix seqpacket) share: descriptors, waits, gathered sends,
// a listener that a shutdown wakes, and a connect with a timeout. Internal to src/rpc.
#pragma once

#include <netdb.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rpc/transport.h"

namespace strata::rpc {

std::string errno_text(const char* what);

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on fd: true when ready, false when timeout_ms passed first. With a `wake`
// descriptor, its becoming readable ends the wait with an error ("stopping").
Result<bool> wait_fd(int fd, short events, int timeout_ms, const char* what, int wake = -1);

// Walks the bytes of [header, pieces...] as one sequence, handing out iovecs.
class GatherCursor {
 public:
  GatherCursor(const uint8_t* header, std::span<const Piece> pieces);
  bool done() const { return part_ == parts_.size(); }
  // Up to `max_bytes` (and at most max_iov iovecs) from the current position.
  size_t fill(iovec* iov, size_t max_iov, uint64_t max_bytes, size_t* n_iov) const;
  void advance(size_t n);

 private:
  std::vector<Piece> parts_;
  size_t part_ = 0;
  size_t offset_ = 0;
};

// Sends header + pieces on fd with sendmsg calls of at most max_per_call bytes each. `whole`:
// each call is a datagram that must go whole (seqpacket). header.payload_size is set here.
Status socket_send(int fd, const Header& header, std::span<const Piece> pieces,
                   uint64_t max_per_call, bool whole, const std::string& peer);

struct HostPort {
  std::string host;  // without the brackets of "[::1]:5"
  std::string port;
};
// Splits `where` ("host:port", "[v6]:port"); `address` names it in errors.
Result<HostPort> split_host_port(const std::string& address, const std::string& where);
// "1.2.3.4:5678" or "[::1]:5678".
std::string sockaddr_text(const sockaddr* sa);
bool loopback(const sockaddr* sa);

Result<std::pair<Fd, Fd>> make_pipe();

// What a transport over one connected socket keeps, whatever frames its messages: the
// descriptor, the peer's name, one sender at a time, and the state of a connection that was
// shut down or fell out of step. try_recv_into is the framing's.
class SocketTransport : public Transport {
 public:
  Status send(const Header& header, std::span<const Piece> pieces) final;
  void shutdown() final;
  std::string peer() const final { return peer_; }

 protected:
  // Sends go in calls of at most max_per_call bytes; `datagrams`: each call is one datagram
  // that must go whole (socket_send).
  SocketTransport(Fd fd, std::string peer, uint64_t max_per_call, bool datagrams)
      : fd_(std::move(fd)),
        peer_(std::move(peer)),
        max_per_call_(max_per_call),
        datagrams_(datagrams) {}

  // The start of a receive: the error of a connection out of step or shut down; else whether
  // a message (or the end of the connection) started within start_timeout_ms.
  Result<bool> wait_start(int start_timeout_ms);
  Status closed_error() const { return unavailable("connection to " + peer_ + " closed"); }
  // An error inside a message: the rest of it would be read as the next one, so the connection
  // is shut down and every later receive returns `s`.
  Status out_of_step(const Status& s);
  // The rest of a started message did not come within timeout_ms (`got` of `want` bytes).
  Status stalled(int timeout_ms, uint64_t got, uint64_t want);
  std::string recv_what() const { return "recv from " + peer_; }

  Fd fd_;
  const std::string peer_;

 private:
  const uint64_t max_per_call_;
  const bool datagrams_;
  // Guards no data: it keeps one message's bytes from interleaving with another's on the
  // socket.
  std::mutex send_mutex_;
  std::atomic<bool> closed_{false};
  Status poisoned_;  // set by the receiving thread only
};

// Accepts on a listening socket until shut down; `wrap` turns an accepted descriptor and the
// peer's address into a transport.
class SocketListener : public Listener {
 public:
  using Wrap = std::function<std::unique_ptr<Transport>(Fd fd, const sockaddr* peer)>;
  SocketListener(Fd fd, Fd wake_read, Fd wake_write, Wrap wrap, std::string address,
                 bool beyond_loopback, std::string unix_path);
  ~SocketListener() override;

  Result<std::unique_ptr<Transport>> accept(int timeout_ms) override;
  std::string address() const override { return address_; }
  bool beyond_loopback() const override { return beyond_loopback_; }
  void shutdown() override;

 private:
  Fd fd_;
  Fd wake_read_;
  Fd wake_write_;
  Wrap wrap_;
  std::string address_;
  bool beyond_loopback_;
  std::string unix_path_;  // removed with the listener
  std::atomic<bool> closed_{false};
};

// Connects a socket of `family` and `type` to sa within timeout_ms (or until `wake` is
// readable); the descriptor is returned in blocking mode.
Result<Fd> socket_connect(int family, int type, const sockaddr* sa, socklen_t len, int timeout_ms,
                          const std::string& peer, int wake = -1);

// The addresses of `where` ("host:port") for a stream socket, first to try first; `address`
// names it in errors. `listen`: addresses to listen on (an empty host: every interface), and a
// failure is a bad argument; else addresses to connect to, and a failure leaves the peer
// unavailable.
using AddressList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
Result<AddressList> resolve_stream(const std::string& address, const std::string& where,
                                   bool listen);

// A TCP socket listening on `where` ("host:port"; an empty host: every interface; port 0: a
// free one); `address` names it in errors. `address` of the result is where it listens.
struct ListeningSocket {
  Fd fd;
  std::string address;
  bool beyond_loopback = false;
};
Result<ListeningSocket> tcp_listen_socket(const std::string& address, const std::string& where);

// A TCP connection to the first address of `where` that answers within
// timeout_ms (or until `wake` is readable); `address` names it in errors. `peer` of the result
// is the address reached, after `scheme` ("tcp:"), as errors about it name it.
struct ConnectedSocket {
  Fd fd;
  std::string peer;
};
Result<ConnectedSocket> tcp_connect_socket(const std::string& address, const std::string& where,
                                           int timeout_ms, const std::string& scheme,
                                           int wake = -1);

}  // namespace strata::rpc
