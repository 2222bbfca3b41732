// TCP and Unix SOCK_SEQPACKET transports over one socket file descriptor each.
#include "rpc/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace strata::rpc {
namespace {

// The receive buffer grows by at most this much per step, so a header that announces a huge
// payload costs only the memory of the bytes that actually arrive.
constexpr uint64_t kGrowBytes = uint64_t{16} << 20;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on fd: true when ready, false when timeout_ms passed first.
Result<bool> wait_fd(int fd, short events, int timeout_ms, const char* what) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return io_error(errno_text(what));
  }
}

// Walks the bytes of [header, pieces...] as one sequence, handing out iovecs.
class GatherCursor {
 public:
  GatherCursor(const uint8_t* header, std::span<const Piece> pieces) {
    parts_.push_back(Piece(header, kHeaderBytes));
    for (const Piece& p : pieces) {
      if (!p.empty()) parts_.push_back(p);
    }
  }
  bool done() const { return part_ == parts_.size(); }
  // Up to `max_bytes` (and at most 64 iovecs) from the current position.
  size_t fill(iovec* iov, size_t max_iov, uint64_t max_bytes, size_t* n_iov) const {
    size_t total = 0;
    size_t k = 0;
    size_t off = offset_;
    for (size_t i = part_; i < parts_.size() && k < max_iov && total < max_bytes; ++i) {
      const size_t take =
          static_cast<size_t>(std::min<uint64_t>(parts_[i].size() - off, max_bytes - total));
      iov[k].iov_base = const_cast<uint8_t*>(parts_[i].data() + off);
      iov[k].iov_len = take;
      ++k;
      total += take;
      off = 0;
    }
    *n_iov = k;
    return total;
  }
  void advance(size_t n) {
    while (n > 0 && part_ < parts_.size()) {
      const size_t left = parts_[part_].size() - offset_;
      if (n < left) {
        offset_ += n;
        return;
      }
      n -= left;
      ++part_;
      offset_ = 0;
    }
  }

 private:
  std::vector<Piece> parts_;
  size_t part_ = 0;
  size_t offset_ = 0;
};

class SocketTransport : public Transport {
 public:
  SocketTransport(Fd fd, bool seqpacket, std::string peer)
      : fd_(std::move(fd)), seqpacket_(seqpacket), peer_(std::move(peer)) {}

  Status send(const Header& header, std::span<const Piece> pieces) override {
    Header h = header;
    h.payload_size = 0;
    for (const Piece& p : pieces) {
      if (__builtin_add_overflow(h.payload_size, uint64_t{p.size()}, &h.payload_size)) {
        return internal_error("send: payload size wraps");
      }
    }
    if (h.payload_size > kMaxMessageBytes) {
      return out_of_range(std::string("send ") + command_name(h.command) + ": payload " +
                          std::to_string(h.payload_size) + " bytes, limit " +
                          std::to_string(kMaxMessageBytes));
    }
    uint8_t head[kHeaderBytes];
    header_encode(h, head);
    GatherCursor cur(head, pieces);
    std::lock_guard<std::mutex> lock(send_mutex_);
    if (closed_.load()) return unavailable("send to " + peer_ + ": connection shut down");
    iovec iov[64];
    while (!cur.done()) {
      size_t n_iov = 0;
      const uint64_t max = seqpacket_ ? kSeqpacketChunkBytes : (uint64_t{1} << 30);
      const size_t want = cur.fill(iov, 64, max, &n_iov);
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n_iov;
      const ssize_t r = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
      if (r < 0) {
        if (errno == EINTR) continue;
        return unavailable(errno_text(("send to " + peer_).c_str()));
      }
      // A datagram goes whole or not at all; a stream may take part of it.
      if (seqpacket_ && static_cast<size_t>(r) != want) {
        return io_error("send to " + peer_ + ": datagram cut");
      }
      cur.advance(static_cast<size_t>(r));
    }
    return Status::ok();
  }

  Result<std::optional<Message>> try_recv(int start_timeout_ms, int stall_timeout_ms) override {
    if (!poisoned_.is_ok()) return poisoned_;
    if (closed_.load()) return closed_error();
    STRATA_ASSIGN_OR_RETURN(
        bool ready, wait_fd(fd_.get(), POLLIN, start_timeout_ms, ("recv from " + peer_).c_str()));
    if (!ready) return std::optional<Message>();
    Result<Message> m =
        seqpacket_ ? recv_seqpacket(stall_timeout_ms) : recv_stream(stall_timeout_ms);
    if (!m.is_ok()) return m.status();
    return std::optional<Message>(std::move(m).value());
  }

  void shutdown() override {
    closed_.store(true);
    ::shutdown(fd_.get(), SHUT_RDWR);
  }

  std::string peer() const override { return peer_; }

 private:
  Status closed_error() const { return unavailable("connection to " + peer_ + " closed"); }

  // Once a message has started, the stream is out of step if it stops: shut it down so that
  // nothing reads the rest of this message as the start of the next.
  Status stalled(int timeout_ms, uint64_t got, uint64_t want) {
    poisoned_ =
        unavailable("recv from " + peer_ + ": the peer stalled for " + std::to_string(timeout_ms) +
                    " ms inside a message (" + std::to_string(got) + " of " + std::to_string(want) +
                    " bytes); the connection is out of step and closed");
    shutdown();
    return poisoned_;
  }

  // Reads exactly n bytes from the stream; `started` tells whether a message began (the
  // caller saw the socket readable, or read part of the message). `before` bytes of the
  // message were read by earlier calls and `total` is its size, for the stall message.
  Status read_exact(uint8_t* dst, size_t n, int stall_timeout_ms, bool started, uint64_t before,
                    uint64_t total) {
    size_t got = 0;
    while (got < n) {
      STRATA_ASSIGN_OR_RETURN(
          bool ready, wait_fd(fd_.get(), POLLIN, stall_timeout_ms, ("recv from " + peer_).c_str()));
      if (!ready) return stalled(stall_timeout_ms, before + got, total);
      const ssize_t r = ::recv(fd_.get(), dst + got, n - got, 0);
      if (r == 0) {
        return started || before + got > 0
                   ? unavailable("connection to " + peer_ + " closed in the middle of a message")
                   : closed_error();
      }
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return unavailable(errno_text(("recv from " + peer_).c_str()));
      }
      got += static_cast<size_t>(r);
    }
    return Status::ok();
  }

  // The socket is readable: a message (or the end of the connection) has started.
  Result<Message> recv_stream(int stall_timeout_ms) {
    uint8_t head[kHeaderBytes];
    STRATA_RETURN_IF_ERROR(
        read_exact(head, kHeaderBytes, stall_timeout_ms, false, 0, kHeaderBytes));
    STRATA_ASSIGN_OR_RETURN(Header h, header_decode(head, max_payload_));
    Message m;
    m.header = h;
    uint64_t got = 0;
    while (got < h.payload_size) {
      const uint64_t step = std::min(h.payload_size - got, kGrowBytes);
      m.payload.resize(static_cast<size_t>(got + step));
      STRATA_RETURN_IF_ERROR(read_exact(m.payload.data() + got, static_cast<size_t>(step),
                                        stall_timeout_ms, true, kHeaderBytes + got,
                                        kHeaderBytes + h.payload_size));
      got += step;
    }
    return m;
  }

  // One datagram into dst (capacity cap); a datagram longer than cap is an error. The first
  // datagram of a message is already waiting; the later ones are waited for, each for at most
  // stall_timeout_ms.
  Result<size_t> recv_datagram(uint8_t* dst, size_t cap, int stall_timeout_ms, bool started,
                               uint64_t got_before, uint64_t total) {
    for (;;) {
      if (started) {
        STRATA_ASSIGN_OR_RETURN(bool ready, wait_fd(fd_.get(), POLLIN, stall_timeout_ms,
                                                    ("recv from " + peer_).c_str()));
        if (!ready) return stalled(stall_timeout_ms, got_before, total);
      }
      iovec iov{dst, cap};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      const ssize_t r = ::recvmsg(fd_.get(), &msg, 0);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return unavailable(errno_text(("recv from " + peer_).c_str()));
      }
      if (r == 0) {
        return started
                   ? unavailable("connection to " + peer_ + " closed in the middle of a message")
                   : closed_error();
      }
      if ((msg.msg_flags & MSG_TRUNC) != 0) {
        return invalid_argument("recv from " + peer_ + ": datagram longer than the " +
                                std::to_string(cap) + " bytes the message has left");
      }
      return static_cast<size_t>(r);
    }
  }

  Result<Message> recv_seqpacket(int stall_timeout_ms) {
    std::vector<uint8_t> first(kSeqpacketChunkBytes);
    STRATA_ASSIGN_OR_RETURN(
        size_t n, recv_datagram(first.data(), first.size(), stall_timeout_ms, false, 0, 0));
    if (n < kHeaderBytes) {
      return invalid_argument("recv from " + peer_ + ": first datagram of " + std::to_string(n) +
                              " bytes holds no header");
    }
    STRATA_ASSIGN_OR_RETURN(Header h, header_decode({first.data(), kHeaderBytes}, max_payload_));
    const uint64_t in_first = n - kHeaderBytes;
    if (in_first > h.payload_size) {
      return invalid_argument("recv from " + peer_ + ": datagram carries more than payload_size " +
                              std::to_string(h.payload_size));
    }
    Message m;
    m.header = h;
    m.payload.assign(first.begin() + kHeaderBytes, first.begin() + static_cast<ptrdiff_t>(n));
    uint64_t got = in_first;
    while (got < h.payload_size) {
      const uint64_t cap = std::min<uint64_t>(h.payload_size - got, kSeqpacketChunkBytes);
      m.payload.resize(static_cast<size_t>(got + cap));
      STRATA_ASSIGN_OR_RETURN(
          size_t r,
          recv_datagram(m.payload.data() + got, static_cast<size_t>(cap), stall_timeout_ms, true,
                        kHeaderBytes + got, kHeaderBytes + h.payload_size));
      got += r;
      m.payload.resize(static_cast<size_t>(got));
    }
    return m;
  }

  Fd fd_;
  bool seqpacket_;
  std::string peer_;
  std::mutex send_mutex_;
  std::atomic<bool> closed_{false};
  Status poisoned_;  // set by the receiving thread only
};

struct HostPort {
  std::string host;
  std::string port;
};

Result<HostPort> split_host_port(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return invalid_argument("address '" + address + "': expected host:port or unix:/path");
  }
  HostPort hp{address.substr(0, colon), address.substr(colon + 1)};
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  for (char c : hp.port) {
    if (c < '0' || c > '9') return invalid_argument("address '" + address + "': bad port");
  }
  if (hp.port.size() > 5 || std::stoul(hp.port) > 65535) {
    return invalid_argument("address '" + address + "': port above 65535");
  }
  return hp;
}

bool is_unix(const std::string& address) { return address.rfind("unix:", 0) == 0; }

Result<sockaddr_un> unix_addr(const std::string& address) {
  const std::string path = address.substr(5);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(a.sun_path)) {
    return invalid_argument("address '" + address + "': path empty or longer than " +
                            std::to_string(sizeof(a.sun_path) - 1) + " bytes");
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

std::string sockaddr_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

class SocketListener : public Listener {
 public:
  SocketListener(Fd fd, Fd wake_read, Fd wake_write, bool seqpacket, std::string address,
                 bool beyond_loopback, std::string unix_path)
      : fd_(std::move(fd)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        seqpacket_(seqpacket),
        address_(std::move(address)),
        beyond_loopback_(beyond_loopback),
        unix_path_(std::move(unix_path)) {}
  ~SocketListener() override {
    if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
  }

  Result<std::unique_ptr<Transport>> accept(int timeout_ms) override {
    for (;;) {
      if (closed_.load()) return unavailable("listener " + address_ + " shut down");
      pollfd p[2] = {{fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
      const int r = ::poll(p, 2, timeout_ms);
      if (r == 0) return unavailable("accept on " + address_ + ": timed out");
      if (r < 0) {
        if (errno == EINTR) continue;
        return io_error(errno_text("poll"));
      }
      if (p[1].revents != 0) return unavailable("listener " + address_ + " shut down");
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      Fd c(::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC));
      if (c.get() < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
        return io_error(errno_text("accept"));
      }
      std::string peer;
      if (seqpacket_) {
        peer = address_;
      } else {
        const int one = 1;
        ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        peer = "tcp:" + sockaddr_text(reinterpret_cast<sockaddr*>(&ss));
      }
      return std::unique_ptr<Transport>(
          std::make_unique<SocketTransport>(std::move(c), seqpacket_, std::move(peer)));
    }
  }

  std::string address() const override { return address_; }
  bool beyond_loopback() const override { return beyond_loopback_; }

  void shutdown() override {
    closed_.store(true);
    const uint8_t b = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_write_.get(), &b, 1);
  }

 private:
  Fd fd_;
  Fd wake_read_;
  Fd wake_write_;
  bool seqpacket_;
  std::string address_;
  bool beyond_loopback_;
  std::string unix_path_;
  std::atomic<bool> closed_{false};
};

Result<std::pair<Fd, Fd>> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return io_error(errno_text("pipe"));
  return std::make_pair(Fd(p[0]), Fd(p[1]));
}

Result<std::unique_ptr<Listener>> listen_unix(const std::string& address) {
  STRATA_ASSIGN_OR_RETURN(sockaddr_un a, unix_addr(address));
  const std::string path = address.substr(5);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return invalid_argument("listen " + address + ": the path exists and is not a socket");
    }
    ::unlink(path.c_str());
  }
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return io_error(errno_text("socket"));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return io_error(errno_text(("bind " + address).c_str()));
  }
  if (::listen(fd.get(), 64) != 0) return io_error(errno_text("listen"));
  STRATA_ASSIGN_OR_RETURN(auto wake, make_pipe());
  return std::unique_ptr<Listener>(std::make_unique<SocketListener>(
      std::move(fd), std::move(wake.first), std::move(wake.second), true, address, false, path));
}

bool loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  }
  return false;
}

Result<std::unique_ptr<Listener>> listen_tcp(const std::string& address) {
  STRATA_ASSIGN_OR_RETURN(HostPort hp, split_host_port(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int gai =
      ::getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), hp.port.c_str(), &hints, &res);
  if (gai != 0) return invalid_argument("listen " + address + ": " + ::gai_strerror(gai));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
  Status last = io_error("listen " + address + ": no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) continue;
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
      last = io_error(errno_text(("listen " + address).c_str()));
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    const sockaddr* sa = reinterpret_cast<const sockaddr*>(&ss);
    STRATA_ASSIGN_OR_RETURN(auto wake, make_pipe());
    return std::unique_ptr<Listener>(std::make_unique<SocketListener>(
        std::move(fd), std::move(wake.first), std::move(wake.second), false, sockaddr_text(sa),
        !loopback(sa), ""));
  }
  return last;
}

Result<std::unique_ptr<Transport>> connect_fd(int family, int type, const sockaddr* sa,
                                              socklen_t len, int timeout_ms,
                                              const std::string& peer) {
  Fd fd(::socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return io_error(errno_text("socket"));
  if (::connect(fd.get(), sa, len) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      return unavailable(errno_text(("connect " + peer).c_str()));
    }
    STRATA_ASSIGN_OR_RETURN(bool ready,
                            wait_fd(fd.get(), POLLOUT, timeout_ms, ("connect " + peer).c_str()));
    if (!ready) {
      return unavailable("connect " + peer + ": timed out after " + std::to_string(timeout_ms) +
                         " ms");
    }
    int err = 0;
    socklen_t el = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) return unavailable("connect " + peer + ": " + std::strerror(err));
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  const bool seqpacket = type == SOCK_SEQPACKET;
  if (!seqpacket) {
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return std::unique_ptr<Transport>(
      std::make_unique<SocketTransport>(std::move(fd), seqpacket, peer));
}

}  // namespace

Result<std::unique_ptr<Transport>> transport_connect(const std::string& address, int timeout_ms) {
  if (is_unix(address)) {
    STRATA_ASSIGN_OR_RETURN(sockaddr_un a, unix_addr(address));
    return connect_fd(AF_UNIX, SOCK_SEQPACKET, reinterpret_cast<sockaddr*>(&a), sizeof(a),
                      timeout_ms, address);
  }
  STRATA_ASSIGN_OR_RETURN(HostPort hp, split_host_port(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &res);
  if (gai != 0) return unavailable("connect " + address + ": " + ::gai_strerror(gai));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
  Status last = unavailable("connect " + address + ": no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    auto t = connect_fd(ai->ai_family, SOCK_STREAM, ai->ai_addr, ai->ai_addrlen, timeout_ms,
                        "tcp:" + sockaddr_text(ai->ai_addr));
    if (t) return t;
    last = t.status();
  }
  return last;
}

Result<std::unique_ptr<Listener>> transport_listen(const std::string& address) {
  return is_unix(address) ? listen_unix(address) : listen_tcp(address);
}

Result<Message> Transport::recv(int timeout_ms) {
  STRATA_ASSIGN_OR_RETURN(std::optional<Message> m, try_recv(timeout_ms, timeout_ms));
  if (!m) {
    return unavailable("recv from " + peer() + ": no message within " + std::to_string(timeout_ms) +
                       " ms");
  }
  return std::move(*m);
}

Status send_message(Transport& t, const Header& header, std::span<const uint8_t> payload) {
  const Piece piece = payload;
  return t.send(header, std::span<const Piece>(&piece, payload.empty() ? 0 : 1));
}

}  // namespace strata::rpc
