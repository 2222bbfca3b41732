// The relay over real loopback sockets: bytes arrive whole and in order through a delayed,
// rate-limited link, ends of stream pass through, a receiver that stops reading holds the
// sender back, and a dead target or a stop closes the client's connection. No timing is
// asserted: the link's times are the pure model's, tested in link_test.cc.
#include "net/proxy.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace strata::net {
namespace {

// The byte at stream offset i: a stream that is cheap to make and to check at any offset.
uint8_t byte_at(uint64_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// A socket closed at the end of its scope.
struct Sock {
  int fd = -1;
  explicit Sock(int f = -1) : fd(f) {}
  ~Sock() {
    if (fd >= 0) ::close(fd);
  }
  Sock(const Sock&) = delete;
  Sock& operator=(const Sock&) = delete;
};

sockaddr_in loopback_addr(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A listening socket on 127.0.0.1 with a free port; rcvbuf > 0 fixes its connections'
// receive buffer (no autotuning), so that the bytes the kernel can hold are known.
int listen_loopback(int* port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a = loopback_addr(0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 8) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int connect_loopback(int port, int sndbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sndbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  // A bound on every blocking call, so that a broken relay fails the test instead of hanging.
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a = loopback_addr(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Writes bytes [from, to) of the stream; false on an error.
bool write_stream(int fd, uint64_t from, uint64_t to) {
  std::vector<uint8_t> buf(64 * 1024);
  while (from < to) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), to - from));
    for (size_t i = 0; i < n; ++i) buf[i] = byte_at(from + i);
    size_t off = 0;
    while (off < n) {
      const ssize_t w = ::send(fd, buf.data() + off, n - off, MSG_NOSIGNAL);
      if (w <= 0) return false;
      off += static_cast<size_t>(w);
    }
    from += n;
  }
  return true;
}

// Reads until the end of the stream; returns how many bytes came, or -1 on an error or when
// a byte differs from the stream at its offset.
int64_t read_stream(int fd) {
  std::vector<uint8_t> buf(64 * 1024);
  uint64_t at = 0;
  for (;;) {
    const ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
    if (r == 0) return static_cast<int64_t>(at);
    if (r < 0) return -1;
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[static_cast<size_t>(i)] != byte_at(at + static_cast<uint64_t>(i))) return -1;
    }
    at += static_cast<uint64_t>(r);
  }
}

// Polls a condition until it holds, for at most ~30 s (a bound against hangs, not a timing).
template <typename F>
bool eventually(F f) {
  for (int i = 0; i < 3000; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

ProxyOptions options_to(int port) {
  ProxyOptions o;
  o.target = "127.0.0.1:" + std::to_string(port);
  o.log = false;
  return o;
}

TEST(Proxy, EchoThroughADelayedRateLimitedLinkKeepsEveryByteAndTheEnds) {
  int port = 0;
  Sock server(listen_loopback(&port));
  ASSERT_GE(server.fd, 0);
  // The echo server returns what it reads and closes when its client ends.
  std::thread echo([&] {
    Sock c(::accept(server.fd, nullptr, nullptr));
    std::vector<uint8_t> buf(32 * 1024);
    for (;;) {
      const ssize_t r = ::recv(c.fd, buf.data(), buf.size(), 0);
      if (r <= 0) break;
      if (::send(c.fd, buf.data(), static_cast<size_t>(r), MSG_NOSIGNAL) != r) break;
    }
  });
  ProxyOptions o = options_to(port);
  o.link = {1000000, 1000000000};  // 1 ms, 1000 Mbit/s
  o.max_held_bytes = 64 * 1024;    // far below what goes through: the cap is crossed often
  auto proxy = Proxy::start(o);
  ASSERT_TRUE(proxy.is_ok()) << proxy.status().message();
  Sock client(connect_loopback(port_of((*proxy)->address())));
  ASSERT_GE(client.fd, 0);

  const uint64_t total = 3 * 1024 * 1024 + 12345;
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    wrote = write_stream(client.fd, 0, total);
    ::shutdown(client.fd, SHUT_WR);  // the end must reach the echo server after every byte
  });
  EXPECT_EQ(read_stream(client.fd), static_cast<int64_t>(total));  // then the echo's end
  writer.join();
  echo.join();
  EXPECT_TRUE(wrote.load());
  EXPECT_TRUE(eventually([&] { return (*proxy)->open_connections() == 0; }));
}

TEST(Proxy, AReceiverThatStopsReadingHoldsTheSenderBack) {
  int port = 0;
  // Fixed small kernel buffers at both ends: what the sender can push without anyone reading
  // is bounded by the proxy's held bytes plus the kernel buffers of its two sockets (receive
  // autotuned up to tcp_rmem's maximum, 32 MiB here; send up to tcp_wmem's, 4 MiB). An
  // unbounded relay would take the whole stream.
  Sock server(listen_loopback(&port, 64 * 1024));
  ASSERT_GE(server.fd, 0);
  ProxyOptions o = options_to(port);
  o.max_held_bytes = 256 * 1024;
  auto proxy = Proxy::start(o);
  ASSERT_TRUE(proxy.is_ok()) << proxy.status().message();
  Sock client(connect_loopback(port_of((*proxy)->address()), 64 * 1024));
  ASSERT_GE(client.fd, 0);
  Sock target(::accept(server.fd, nullptr, nullptr));
  ASSERT_GE(target.fd, 0);

  // Write without blocking until the sender has been unable to write for a while.
  const uint64_t total = uint64_t{128} << 20;
  uint64_t sent = 0;
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    pollfd p{client.fd, POLLOUT, 0};
    if (::poll(&p, 1, 500) <= 0) break;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), total - sent));
    for (size_t i = 0; i < n; ++i) buf[i] = byte_at(sent + i);
    const ssize_t w = ::send(client.fd, buf.data(), n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) sent += static_cast<uint64_t>(w);
    ASSERT_LT(sent, total / 2) << "the relay took " << sent << " bytes nobody read";
  }
  EXPECT_GT(sent, 0u);

  // Once the receiver reads, the rest flows, whole and in order.
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    wrote = write_stream(client.fd, sent, total);
    ::shutdown(client.fd, SHUT_WR);
  });
  EXPECT_EQ(read_stream(target.fd), static_cast<int64_t>(total));
  writer.join();
  EXPECT_TRUE(wrote.load());
}

TEST(Proxy, ADeadTargetClosesTheClientsConnection) {
  int port = 0;
  { Sock gone(listen_loopback(&port)); }  // a port nobody listens on now
  auto proxy = Proxy::start(options_to(port));
  ASSERT_TRUE(proxy.is_ok()) << proxy.status().message();
  Sock client(connect_loopback(port_of((*proxy)->address())));
  ASSERT_GE(client.fd, 0);
  uint8_t b = 0;
  errno = 0;
  const ssize_t r = ::recv(client.fd, &b, 1, 0);
  EXPECT_TRUE(r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
      << "recv returned " << r << ": " << std::strerror(errno);
}

TEST(Proxy, StopClosesOpenConnections) {
  int port = 0;
  Sock server(listen_loopback(&port));
  ASSERT_GE(server.fd, 0);
  auto proxy = Proxy::start(options_to(port));
  ASSERT_TRUE(proxy.is_ok()) << proxy.status().message();
  Sock client(connect_loopback(port_of((*proxy)->address())));
  ASSERT_GE(client.fd, 0);
  Sock target(::accept(server.fd, nullptr, nullptr));
  ASSERT_GE(target.fd, 0);
  ASSERT_TRUE(eventually([&] { return (*proxy)->open_connections() == 1; }));
  (*proxy)->stop();
  EXPECT_EQ((*proxy)->open_connections(), 0);
  uint8_t b = 0;
  errno = 0;
  const ssize_t r = ::recv(client.fd, &b, 1, 0);
  EXPECT_TRUE(r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK));
  (*proxy)->stop();  // idempotent
}

TEST(Proxy, BadOptionsAreRefusedByName) {
  ProxyOptions o = options_to(1);
  o.target = "nohostport";
  auto bad_target = Proxy::start(o);
  ASSERT_FALSE(bad_target.is_ok());
  EXPECT_NE(bad_target.status().message().find("nohostport"), std::string::npos);
  o = options_to(1);
  o.max_held_bytes = 0;
  EXPECT_FALSE(Proxy::start(o).is_ok());
  o = options_to(1);
  o.listen = "127.0.0.1:99999";
  auto bad_port = Proxy::start(o);
  ASSERT_FALSE(bad_port.is_ok());
  EXPECT_NE(bad_port.status().message().find("99999"), std::string::npos);
}

}  // namespace
}  // namespace strata::net
