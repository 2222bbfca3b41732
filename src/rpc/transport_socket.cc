#include "rpc/transport_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace strata::rpc {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Result<bool> wait_fd(int fd, short events, int timeout_ms, const char* what, int wake) {
  pollfd p[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
  for (;;) {
    const int r = ::poll(p, wake >= 0 ? 2 : 1, timeout_ms);
    if (r > 0 && wake >= 0 && p[1].revents != 0) {
      return unavailable(std::string(what) + ": stopping");
    }
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return io_error(errno_text(what));
  }
}

GatherCursor::GatherCursor(const uint8_t* header, std::span<const Piece> pieces) {
  parts_.push_back(Piece(header, kHeaderBytes));
  for (const Piece& p : pieces) {
    if (!p.empty()) parts_.push_back(p);
  }
}

size_t GatherCursor::fill(iovec* iov, size_t max_iov, uint64_t max_bytes, size_t* n_iov) const {
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

void GatherCursor::advance(size_t n) {
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

Status socket_send(int fd, const Header& header, std::span<const Piece> pieces,
                   uint64_t max_per_call, bool whole, const std::string& peer) {
  Header h = header;
  STRATA_RETURN_IF_ERROR(set_payload_size(&h, pieces));
  uint8_t head[kHeaderBytes];
  header_encode(h, head);
  GatherCursor cur(head, pieces);
  iovec iov[64];
  while (!cur.done()) {
    size_t n_iov = 0;
    const size_t want = cur.fill(iov, 64, max_per_call, &n_iov);
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    const ssize_t r = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return unavailable(errno_text(("send to " + peer).c_str()));
    }
    // A datagram goes whole or not at all; a stream may take part of it.
    if (whole && static_cast<size_t>(r) != want) {
      return io_error("send to " + peer + ": datagram cut");
    }
    cur.advance(static_cast<size_t>(r));
  }
  return Status::ok();
}

Result<HostPort> split_host_port(const std::string& address, const std::string& where) {
  const size_t colon = where.rfind(':');
  if (colon == std::string::npos || colon + 1 == where.size()) {
    return invalid_argument("address '" + address + "': expected host:port or unix:/path");
  }
  HostPort hp{where.substr(0, colon), where.substr(colon + 1)};
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

std::string sockaddr_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return "?";
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

Result<std::pair<Fd, Fd>> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return io_error(errno_text("pipe"));
  return std::make_pair(Fd(p[0]), Fd(p[1]));
}

SocketListener::SocketListener(Fd fd, Fd wake_read, Fd wake_write, Wrap wrap, std::string address,
                               bool beyond_loopback, std::string unix_path)
    : fd_(std::move(fd)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      wrap_(std::move(wrap)),
      address_(std::move(address)),
      beyond_loopback_(beyond_loopback),
      unix_path_(std::move(unix_path)) {}

SocketListener::~SocketListener() {
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

Result<std::unique_ptr<Transport>> SocketListener::accept(int timeout_ms) {
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
    return wrap_(std::move(c), reinterpret_cast<const sockaddr*>(&ss));
  }
}

void SocketListener::shutdown() {
  closed_.store(true);
  const uint8_t b = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_write_.get(), &b, 1);
}

Result<Fd> socket_connect(int family, int type, const sockaddr* sa, socklen_t len, int timeout_ms,
                          const std::string& peer, int wake) {
  Fd fd(::socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return io_error(errno_text("socket"));
  if (::connect(fd.get(), sa, len) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      return unavailable(errno_text(("connect " + peer).c_str()));
    }
    STRATA_ASSIGN_OR_RETURN(
        bool ready, wait_fd(fd.get(), POLLOUT, timeout_ms, ("connect " + peer).c_str(), wake));
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
  return fd;
}

Result<AddressList> resolve_stream(const std::string& address, const std::string& where,
                                   bool listen) {
  STRATA_ASSIGN_OR_RETURN(HostPort hp, split_host_port(address, where));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = listen ? AI_PASSIVE : 0;
  const char* host = listen && hp.host.empty() ? nullptr : hp.host.c_str();
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host, hp.port.c_str(), &hints, &res);
  if (gai != 0) {
    const std::string what =
        (listen ? "listen " : "connect ") + address + ": " + ::gai_strerror(gai);
    return listen ? invalid_argument(what) : unavailable(what);
  }
  return AddressList(res, ::freeaddrinfo);
}

Result<ListeningSocket> tcp_listen_socket(const std::string& address, const std::string& where) {
  STRATA_ASSIGN_OR_RETURN(AddressList list, resolve_stream(address, where, true));
  Status last = io_error("listen " + address + ": no address");
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
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
    const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
    return ListeningSocket{std::move(fd), sockaddr_text(sa), !loopback(sa)};
  }
  return last;
}

Result<ConnectedSocket> tcp_connect_socket(const std::string& address, const std::string& where,
                                           int timeout_ms, const std::string& scheme, int wake) {
  STRATA_ASSIGN_OR_RETURN(AddressList list, resolve_stream(address, where, false));
  Status last = unavailable("connect " + address + ": no address");
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    const std::string peer = scheme + sockaddr_text(ai->ai_addr);
    Result<Fd> fd = socket_connect(ai->ai_family, SOCK_STREAM, ai->ai_addr, ai->ai_addrlen,
                                   timeout_ms, peer, wake);
    if (fd) return ConnectedSocket{std::move(*fd), peer};
    last = fd.status();
  }
  return last;
}

Status SocketTransport::send(const Header& header, std::span<const Piece> pieces) {
  std::lock_guard<std::mutex> lock(send_mutex_);
  if (closed_.load()) return unavailable("send to " + peer_ + ": connection shut down");
  return socket_send(fd_.get(), header, pieces, max_per_call_, datagrams_, peer_);
}

void SocketTransport::shutdown() {
  closed_.store(true);
  ::shutdown(fd_.get(), SHUT_RDWR);
}

Result<bool> SocketTransport::wait_start(int start_timeout_ms) {
  if (!poisoned_.is_ok()) return poisoned_;
  if (closed_.load()) return closed_error();
  return wait_fd(fd_.get(), POLLIN, start_timeout_ms, recv_what().c_str());
}

Status SocketTransport::out_of_step(const Status& s) {
  poisoned_ = s;
  shutdown();
  return s;
}

Status SocketTransport::stalled(int timeout_ms, uint64_t got, uint64_t want) {
  return out_of_step(unavailable(recv_what() + ": the peer stalled for " +
                                 std::to_string(timeout_ms) + " ms inside a message (" +
                                 std::to_string(got) + " of " + std::to_string(want) +
                                 " bytes); the connection is out of step and closed"));
}

}  // namespace strata::rpc
