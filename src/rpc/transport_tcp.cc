// TCP: messages framed on the byte stream by the header's payload_size.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "rpc/transport_kinds.h"
#include "rpc/transport_socket.h"

namespace strata::rpc {
namespace {

// The most one sendmsg or readv is asked to take.
constexpr uint64_t kMaxSendCallBytes = uint64_t{1} << 30;

class TcpTransport final : public SocketTransport {
 public:
  TcpTransport(Fd fd, std::string peer)
      : SocketTransport(std::move(fd), std::move(peer), kMaxSendCallBytes, false) {
    const int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }

  Result<std::optional<Message>> try_recv_into(int start_timeout_ms, int stall_timeout_ms,
                                               const Placer& place) override {
    STRATA_ASSIGN_OR_RETURN(bool ready, wait_start(start_timeout_ms));
    if (!ready) return std::optional<Message>();
    // The socket is readable: a message (or the end of the connection) has started.
    uint8_t head[kHeaderBytes];
    STRATA_RETURN_IF_ERROR(
        read_exact(head, kHeaderBytes, stall_timeout_ms, false, 0, kHeaderBytes));
    STRATA_ASSIGN_OR_RETURN(Header h, header_decode(head, max_payload_));
    const uint64_t total = kHeaderBytes + h.payload_size;
    uint8_t lead[kRecvLeadBytes];
    const size_t n_lead = static_cast<size_t>(std::min<uint64_t>(h.payload_size, kRecvLeadBytes));
    STRATA_RETURN_IF_ERROR(read_exact(lead, n_lead, stall_timeout_ms, true, kHeaderBytes, total));
    Message m;
    m.header = h;
    Result<PayloadWriter> started = PayloadWriter::start(h, {lead, n_lead}, place, &m);
    if (!started) return out_of_step(started.status());
    PayloadWriter& w = *started;
    while (w.remaining() > 0) {
      iovec iov[64];
      size_t n_iov = 0;
      w.fill(iov, 64, kMaxSendCallBytes, &n_iov);
      STRATA_ASSIGN_OR_RETURN(bool more,
                              wait_fd(fd_.get(), POLLIN, stall_timeout_ms, recv_what().c_str()));
      if (!more) return stalled(stall_timeout_ms, total - w.remaining(), total);
      const ssize_t r = ::readv(fd_.get(), iov, static_cast<int>(n_iov));
      if (r == 0) {
        return unavailable("connection to " + peer_ + " closed in the middle of a message");
      }
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return unavailable(errno_text(recv_what().c_str()));
      }
      w.advance(static_cast<size_t>(r));
    }
    return std::optional<Message>(std::move(m));
  }

 private:
  // Reads exactly n bytes from the stream; `started` tells whether a message began (the
  // caller saw the socket readable, or read part of the message). `before` bytes of the
  // message were read by earlier calls and `total` is its size, for the stall message.
  Status read_exact(uint8_t* dst, size_t n, int stall_timeout_ms, bool started, uint64_t before,
                    uint64_t total) {
    size_t got = 0;
    while (got < n) {
      STRATA_ASSIGN_OR_RETURN(bool ready,
                              wait_fd(fd_.get(), POLLIN, stall_timeout_ms, recv_what().c_str()));
      if (!ready) return stalled(stall_timeout_ms, before + got, total);
      const ssize_t r = ::recv(fd_.get(), dst + got, n - got, 0);
      if (r == 0) {
        return started || before + got > 0
                   ? unavailable("connection to " + peer_ + " closed in the middle of a message")
                   : closed_error();
      }
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return unavailable(errno_text(recv_what().c_str()));
      }
      got += static_cast<size_t>(r);
    }
    return Status::ok();
  }
};

}  // namespace

Result<std::unique_ptr<Listener>> tcp_listen(const std::string& address, const std::string& where) {
  STRATA_ASSIGN_OR_RETURN(ListeningSocket l, tcp_listen_socket(address, where));
  STRATA_ASSIGN_OR_RETURN(auto wake, make_pipe());
  auto wrap = [](Fd c, const sockaddr* peer) -> std::unique_ptr<Transport> {
    return std::make_unique<TcpTransport>(std::move(c), "tcp:" + sockaddr_text(peer));
  };
  return std::unique_ptr<Listener>(std::make_unique<SocketListener>(
      std::move(l.fd), std::move(wake.first), std::move(wake.second), wrap, l.address,
      l.beyond_loopback, ""));
}

Result<std::unique_ptr<Transport>> tcp_connect(const std::string& address, const std::string& where,
                                               int timeout_ms) {
  STRATA_ASSIGN_OR_RETURN(ConnectedSocket c,
                          tcp_connect_socket(address, where, timeout_ms, "tcp:"));
  return std::unique_ptr<Transport>(std::make_unique<TcpTransport>(std::move(c.fd), c.peer));
}

}  // namespace strata::rpc
