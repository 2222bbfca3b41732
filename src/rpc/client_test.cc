// The client's connection against a fake worker on a plain socket, which can pause in the
// middle of a response as a slow network does.
#include "rpc/client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "unit/engine_testing.h"

namespace strata::rpc {
namespace {

// Accepts one TCP connection on 127.0.0.1 and answers HELLO and DEVICE_INFO like a worker;
// other requests go to `answer`, which writes the response bytes itself.
class SlowWorker {
 public:
  using Answer = std::function<void(int fd, const Header& request)>;
  explicit SlowWorker(Answer answer) : answer_(std::move(answer)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listen_fd_, 1) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen";
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~SlowWorker() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
    if (fd_ >= 0) ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Writes a response header announcing `payload_size` bytes (the caller writes them).
  static void send_header(int fd, const Header& request, uint64_t payload_size) {
    Header h;
    h.command = request.command;
    h.flags = kFlagResponse;
    h.request_id = request.request_id;
    h.payload_size = payload_size;
    uint8_t b[kHeaderBytes];
    header_encode(h, b);
    send_all(fd, b, kHeaderBytes);
  }
  static void send_all(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
      if (r <= 0) return;
      p += r;
      n -= static_cast<size_t>(r);
    }
  }

 private:
  bool recv_all(uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  void serve() {
    fd_ = ::accept(listen_fd_, nullptr, nullptr);
    if (fd_ < 0) return;
    for (;;) {
      uint8_t head[kHeaderBytes];
      if (!recv_all(head, kHeaderBytes)) return;
      Result<Header> h = header_decode(head, uint64_t{1} << 20);
      if (!h.is_ok()) return;
      std::vector<uint8_t> payload(h->payload_size);
      if (!recv_all(payload.data(), payload.size())) return;
      if ((h->flags & kFlagOneWay) != 0) continue;
      std::vector<uint8_t> out;
      if (h->command == Command::kHello) {
        HelloResponse r;
        r.caps = kCapAll;
        encode(r, &out);
      } else if (h->command == Command::kDeviceInfo) {
        DeviceInfo info;
        info.name = "slow";
        encode(info, &out);
      } else {
        answer_(fd_, *h);
        continue;
      }
      send_header(fd_, *h, out.size());
      send_all(fd_, out.data(), out.size());
    }
  }

  Answer answer_;
  int listen_fd_ = -1;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

ClientOptions options(const std::string& endpoint, int timeout_ms) {
  ClientOptions o;
  o.endpoint = endpoint;
  o.name = "RPC0";
  o.timeout_ms = timeout_ms;
  o.connect_timeout_ms = 5000;
  return o;
}

// A response that pauses in its middle for longer than the receiver's idle poll (100 ms) but
// less than the request timeout arrives whole: the pause is not read as "no message", which
// would leave the rest of the response to be parsed as a header.
TEST(RpcClient, AResponseThatPausesInItsMiddleArrivesWhole) {
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 11 + 1);
  SlowWorker w([&](int fd, const Header& request) {
    SlowWorker::send_header(fd, request, data.size());
    SlowWorker::send_all(fd, data.data(), 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    SlowWorker::send_all(fd, data.data() + 1000, data.size() - 1000);
  });
  auto c = Connection::open(options(w.address(), 20000));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  for (int i = 0; i < 2; ++i) {
    // Let the receiver settle into its idle poll, as it is between decode steps.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Result<Message> m = (*c)->call(Command::kGetTensor, {});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ(m->payload, data);
  }
  EXPECT_TRUE((*c)->broken().is_ok());
}

// A response that stops in its middle for longer than the timeout fails the request and
// closes the connection, with an error that says what happened.
TEST(RpcClient, AResponseThatStallsInItsMiddleBreaksTheConnection) {
  std::atomic<bool> release{false};
  SlowWorker w([&](int fd, const Header& request) {
    SlowWorker::send_header(fd, request, 100);
    const uint8_t part[10] = {};
    SlowWorker::send_all(fd, part, sizeof(part));
    // Bounded, so that a failed assertion below cannot leave the fake worker waiting forever.
    for (int i = 0; i < 1000 && !release.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  {
    auto c = Connection::open(options(w.address(), 300));
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    Result<Message> m = (*c)->call(Command::kGetTensor, {});
    ASSERT_FALSE(m.is_ok());
    EXPECT_EQ(m.status().kind(), ErrorKind::kUnavailable);
    EXPECT_NE(m.status().message().find(w.address()), std::string::npos) << m.status().message();
    EXPECT_FALSE((*c)->broken().is_ok());
    EXPECT_FALSE((*c)->call(Command::kDeviceInfo, {}).is_ok());
  }
  release.store(true);
}

// The environment's switches are read into the options once, where the remote devices are made;
// a value that is not one the switch takes is an error naming it, not a silent default.
TEST(RpcClient, OptionsFromTheEnvironment) {
  ClientOptions o;
  ASSERT_TRUE(client_options_from_env(&o).is_ok());
  EXPECT_TRUE(o.async_copy);
  EXPECT_TRUE(o.handoff);
  {
    testing::ScopedEnv sync("STRATA_RPC_NO_ASYNC_COPY", "1");
    testing::ScopedEnv star("STRATA_RPC_HANDOFF", "0");
    ClientOptions off;
    ASSERT_TRUE(client_options_from_env(&off).is_ok());
    EXPECT_FALSE(off.async_copy);
    EXPECT_FALSE(off.handoff);
  }
  {
    testing::ScopedEnv bad("STRATA_RPC_HANDOFF", "no");
    ClientOptions b;
    Status s = client_options_from_env(&b);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("STRATA_RPC_HANDOFF='no'"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace strata::rpc
