// Unix SOCK_SEQPACKET: a message as datagrams of at most kSeqpacketChunkBytes, joined again by
// recv (transport.h).
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rpc/transport_kinds.h"
#include "rpc/transport_socket.h"

namespace strata::rpc {
namespace {

class SeqpacketTransport final : public SocketTransport {
 public:
  SeqpacketTransport(Fd fd, std::string peer)
      : SocketTransport(std::move(fd), std::move(peer), kSeqpacketChunkBytes, true) {}

  Result<std::optional<Message>> try_recv_into(int start_timeout_ms, int stall_timeout_ms,
                                               const Placer& place) override {
    STRATA_ASSIGN_OR_RETURN(bool ready, wait_start(start_timeout_ms));
    if (!ready) return std::optional<Message>();
    // The first datagrams, up to the end of the lead, are staged; the rest of the payload is
    // received straight into its destination.
    std::vector<uint8_t> staged(kSeqpacketChunkBytes);
    iovec first{staged.data(), staged.size()};
    STRATA_ASSIGN_OR_RETURN(size_t n, recv_datagram(&first, 1, stall_timeout_ms, false, 0, 0));
    if (n < kHeaderBytes) {
      return invalid_argument("recv from " + peer_ + ": first datagram of " + std::to_string(n) +
                              " bytes holds no header");
    }
    STRATA_ASSIGN_OR_RETURN(Header h, header_decode({staged.data(), kHeaderBytes}, max_payload_));
    const uint64_t total = kHeaderBytes + h.payload_size;
    const size_t n_lead = static_cast<size_t>(std::min<uint64_t>(h.payload_size, kRecvLeadBytes));
    while (n < kHeaderBytes + n_lead) {
      const uint64_t cap = std::min<uint64_t>(total - n, kSeqpacketChunkBytes);
      staged.resize(n + static_cast<size_t>(cap));
      iovec next{staged.data() + n, static_cast<size_t>(cap)};
      STRATA_ASSIGN_OR_RETURN(size_t r, recv_datagram(&next, 1, stall_timeout_ms, true, n, total));
      n += r;
    }
    if (n > total) {
      return invalid_argument("recv from " + peer_ + ": datagram carries more than payload_size " +
                              std::to_string(h.payload_size));
    }
    Message m;
    m.header = h;
    const std::span<const uint8_t> got(staged.data() + kHeaderBytes, n - kHeaderBytes);
    Result<PayloadWriter> started = PayloadWriter::start(h, got.first(n_lead), place, &m);
    if (!started) return out_of_step(started.status());
    PayloadWriter& w = *started;
    w.write(got.subspan(n_lead));
    while (w.remaining() > 0) {
      // A datagram must land whole: when the destinations of its bytes are more pieces than
      // the iovecs hold (many small regions), it is staged and scattered instead.
      iovec iov[64];
      size_t n_iov = 0;
      const uint64_t next = std::min<uint64_t>(w.remaining(), kSeqpacketChunkBytes);
      if (w.fill(iov, 64, next, &n_iov) < next) {
        iovec bounce{staged.data(), static_cast<size_t>(next)};
        STRATA_ASSIGN_OR_RETURN(size_t r, recv_datagram(&bounce, 1, stall_timeout_ms, true,
                                                        total - w.remaining(), total));
        w.write({staged.data(), r});
        continue;
      }
      STRATA_ASSIGN_OR_RETURN(size_t r, recv_datagram(iov, n_iov, stall_timeout_ms, true,
                                                      total - w.remaining(), total));
      w.advance(r);
    }
    return std::optional<Message>(std::move(m));
  }

 private:
  // One datagram into iov; a datagram longer than the iovecs is an error. The first datagram
  // of a message is already waiting; the later ones are waited for, each for at most
  // stall_timeout_ms. got_before and total count the message's bytes, for the stall message.
  Result<size_t> recv_datagram(iovec* iov, size_t n_iov, int stall_timeout_ms, bool started,
                               uint64_t got_before, uint64_t total) {
    size_t cap = 0;
    for (size_t i = 0; i < n_iov; ++i) cap += iov[i].iov_len;
    for (;;) {
      if (started) {
        STRATA_ASSIGN_OR_RETURN(bool ready,
                                wait_fd(fd_.get(), POLLIN, stall_timeout_ms, recv_what().c_str()));
        if (!ready) return stalled(stall_timeout_ms, got_before, total);
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n_iov;
      const ssize_t r = ::recvmsg(fd_.get(), &msg, 0);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return unavailable(errno_text(recv_what().c_str()));
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
};

Result<sockaddr_un> unix_addr(const std::string& address, const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(a.sun_path)) {
    return invalid_argument("address '" + address + "': path empty or longer than " +
                            std::to_string(sizeof(a.sun_path) - 1) + " bytes");
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

}  // namespace

Result<std::unique_ptr<Listener>> seqpacket_listen(const std::string& address,
                                                   const std::string& where) {
  STRATA_ASSIGN_OR_RETURN(sockaddr_un a, unix_addr(address, where));
  struct stat st {};
  if (::lstat(where.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return invalid_argument("listen " + address + ": the path exists and is not a socket");
    }
    ::unlink(where.c_str());
  }
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return io_error(errno_text("socket"));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return io_error(errno_text(("bind " + address).c_str()));
  }
  if (::listen(fd.get(), 64) != 0) return io_error(errno_text("listen"));
  STRATA_ASSIGN_OR_RETURN(auto wake, make_pipe());
  auto wrap = [address](Fd c, const sockaddr*) -> std::unique_ptr<Transport> {
    return std::make_unique<SeqpacketTransport>(std::move(c), address);
  };
  return std::unique_ptr<Listener>(std::make_unique<SocketListener>(
      std::move(fd), std::move(wake.first), std::move(wake.second), wrap, address, false, where));
}

Result<std::unique_ptr<Transport>> seqpacket_connect(const std::string& address,
                                                     const std::string& where, int timeout_ms) {
  STRATA_ASSIGN_OR_RETURN(sockaddr_un a, unix_addr(address, where));
  STRATA_ASSIGN_OR_RETURN(
      Fd fd, socket_connect(AF_UNIX, SOCK_SEQPACKET, reinterpret_cast<sockaddr*>(&a), sizeof(a),
                            timeout_ms, address));
  return std::unique_ptr<Transport>(std::make_unique<SeqpacketTransport>(std::move(fd), address));
}

}  // namespace strata::rpc
