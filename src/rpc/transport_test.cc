// The transports against a peer on a plain socket, which can send what a Transport never
// would: half a message, then nothing.
#include "rpc/transport.h"

#include "rpc/rpc_testing.h"
#include "rpc/transport_testing.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace strata::rpc {
namespace {

// A connected plain socket, closed at the end of the test.
class RawSocket {
 public:
  RawSocket(const std::string& address, bool seqpacket) {
    if (seqpacket) {
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      const std::string path = address.substr(5);
      std::memcpy(a.sun_path, path.data(), path.size());
      fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) close();
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) close();
    }
  }
  ~RawSocket() { close(); }
  bool ok() const { return fd_ >= 0; }
  // One write: one datagram on seqpacket.
  bool send(const std::vector<uint8_t>& b) {
    return ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  // True when the other end has closed (a read sees the end, or a reset).
  bool closed_by_peer() {
    uint8_t byte;
    return ::recv(fd_, &byte, 1, 0) <= 0;
  }

 private:
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

// The bytes of a SET_TENSOR-like message: header, then `n` payload bytes 0, 1, 2...
std::vector<uint8_t> message_bytes(uint64_t n) {
  Header h;
  h.command = Command::kSetTensor;
  h.request_id = 7;
  h.payload_size = n;
  std::vector<uint8_t> b(kHeaderBytes);
  header_encode(h, b.data());
  for (uint64_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

class TransportTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const std::string address = GetParam() ? "unix:" + (std::filesystem::temp_directory_path() /
                                                        ("strata-tt-" + std::to_string(::getpid())))
                                                           .string()
                                           : "127.0.0.1:0";
    auto l = transport_listen(address);
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    listener_ = std::move(l).value();
    peer_ = std::make_unique<RawSocket>(listener_->address(), GetParam());
    ASSERT_TRUE(peer_->ok());
    auto t = listener_->accept(kLongMs);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    t_ = std::move(t).value();
  }

  std::unique_ptr<Listener> listener_;
  std::unique_ptr<RawSocket> peer_;
  std::unique_ptr<Transport> t_;
};

// No byte before the timeout: no message, no error, and the connection is still in step.
TEST_P(TransportTest, NothingStartedIsNoMessageAndTheConnectionStaysUsable) {
  Result<std::optional<Message>> none = t_->try_recv(20, kLongMs);
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  EXPECT_FALSE(none->has_value());
  // recv() says so as an error, and that does not break the connection either.
  EXPECT_FALSE(t_->recv(20).is_ok());
  ASSERT_TRUE(peer_->send(message_bytes(100)));
  Result<std::optional<Message>> m = t_->try_recv(kLongMs, kLongMs);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->header.request_id, 7u);
  ASSERT_EQ((*m)->payload.size(), 100u);
  EXPECT_EQ((*m)->payload[99], 99);
}

// Half a message, then a stall: an error (not "no message"), and the transport is poisoned:
// the rest of the message, when it comes, is never read as the start of another.
TEST_P(TransportTest, AStallInsideAMessageClosesTheConnection) {
  const std::vector<uint8_t> whole = message_bytes(100);
  ASSERT_TRUE(peer_->send({whole.begin(), whole.begin() + kHeaderBytes + 10}));
  Result<std::optional<Message>> m = t_->try_recv(kLongMs, 50);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kUnavailable);
  EXPECT_NE(m.status().message().find("34 of 124 bytes"), std::string::npos)
      << m.status().message();
  // (A seqpacket send fails already: the receiver has shut the socket down.)
  (void)peer_->send({whole.begin() + kHeaderBytes + 10, whole.end()});
  EXPECT_FALSE(t_->try_recv(kLongMs, kLongMs).is_ok());
  EXPECT_FALSE(t_->try_recv(kLongMs, kLongMs).is_ok());
  EXPECT_TRUE(peer_->closed_by_peer());
}

// A stall inside the header itself is inside a message too (TCP only: a datagram is whole).
TEST_P(TransportTest, AStallInsideTheHeaderClosesTheConnection) {
  if (GetParam()) GTEST_SKIP() << "a seqpacket datagram arrives whole";
  const std::vector<uint8_t> whole = message_bytes(4);
  ASSERT_TRUE(peer_->send({whole.begin(), whole.begin() + 5}));
  Result<std::optional<Message>> m = t_->try_recv(kLongMs, 50);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("stalled"), std::string::npos) << m.status().message();
  EXPECT_TRUE(peer_->closed_by_peer());
}

// A connected pair of transports of one kind: near_ connected to far_, accepted.
class TransportPairTest : public ::testing::TestWithParam<TestTransport> {
 protected:
  void SetUp() override {
    GetParam().use_env();
    auto l = transport_listen(GetParam().listen_address());
    if (!l.is_ok() && l.status().kind() == ErrorKind::kUnsupported) {
      GTEST_SKIP() << l.status().message();
    }
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    listener_ = std::move(l).value();
    // A UCX connect completes only while the accepting side progresses its connection (as a
    // worker's session does, waiting for HELLO): accept, and wait for a message meanwhile.
    Result<std::unique_ptr<Transport>> c = Status(ErrorKind::kInternal, "not run");
    std::atomic<bool> connected{false};
    std::thread connector([&] {
      c = transport_connect(listener_->address(), kLongMs);
      connected.store(true);
    });
    auto a = listener_->accept(kLongMs);
    while (a.is_ok() && !connected.load()) {
      auto none = (*a)->try_recv(10, kLongMs);
      ASSERT_TRUE(none.is_ok()) << none.status().message();
      ASSERT_FALSE(none->has_value());
    }
    connector.join();
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    near_ = std::move(c).value();
    far_ = std::move(a).value();
  }

  void TearDown() override {
    if (near_) near_->shutdown();
    if (far_) far_->shutdown();
    sent();
  }

  // Sends `payload` from near_ as the given pieces (cut at `cuts`), on a thread of its own: a
  // large UCX send completes only once the receiver has taken it.
  // `must_go`: the send must succeed (not when the receiver breaks the connection midway).
  void send(const std::vector<uint8_t>& payload, std::vector<size_t> cuts = {},
            bool must_go = true) {
    senders_.emplace_back([this, payload, cuts, must_go]() mutable {
      Header h;
      h.command = Command::kSetTensors;
      h.request_id = 11;
      std::vector<Piece> pieces;
      size_t at = 0;
      cuts.push_back(payload.size());
      for (size_t c : cuts) {
        pieces.push_back(Piece(payload.data() + at, c - at));
        at = c;
      }
      Status s = near_->send(h, pieces);
      if (must_go) {
        EXPECT_TRUE(s) << s.message();
      }
    });
  }
  // Waits for the sends to finish.
  void sent() {
    for (std::thread& t : senders_) t.join();
    senders_.clear();
  }

  std::vector<std::thread> senders_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Transport> near_;
  std::unique_ptr<Transport> far_;
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed + (i >> 9));
  return v;
}

// The payload past the kept bytes lands in the caller's spans, in order, whatever the pieces
// it was sent as; the message keeps only its first bytes.
TEST_P(TransportPairTest, APlacedPayloadLandsInTheCallersSpans) {
  for (const size_t n : {size_t{200}, kRecvLeadBytes, 3 * kSeqpacketChunkBytes + 123}) {
    const std::vector<uint8_t> payload = pattern(n, static_cast<uint8_t>(n));
    send(payload, {n / 3, n / 2});
    const size_t keep = 40;
    std::vector<uint8_t> a((n - keep) / 4), b(0), c(n - keep - a.size());
    std::vector<uint8_t> seen_lead;
    auto m =
        far_->try_recv_into(kLongMs, kLongMs, [&](const Header& h, std::span<const uint8_t> lead) {
          EXPECT_EQ(h.request_id, 11u);
          EXPECT_EQ(h.payload_size, n);
          seen_lead.assign(lead.begin(), lead.end());
          return std::optional<Placement>(Placement{keep, {a, b, c}});
        });
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    ASSERT_TRUE(m->has_value());
    EXPECT_TRUE((*m)->placed);
    EXPECT_EQ((*m)->payload, std::vector<uint8_t>(payload.begin(), payload.begin() + keep));
    EXPECT_EQ(seen_lead,
              std::vector<uint8_t>(payload.begin(), payload.begin() + std::min(n, kRecvLeadBytes)));
    std::vector<uint8_t> joined(payload.begin(), payload.begin() + keep);
    joined.insert(joined.end(), a.begin(), a.end());
    joined.insert(joined.end(), c.begin(), c.end());
    EXPECT_EQ(joined, payload) << n;
  }
}

// Many small destinations: more pieces per datagram (seqpacket) than a receive call takes.
TEST_P(TransportPairTest, APayloadPlacedInManySmallPiecesLandsWhole) {
  const size_t n = 300000;
  const std::vector<uint8_t> payload = pattern(n, 5);
  send(payload);
  const size_t keep = 8;
  std::vector<uint8_t> dst(n - keep);
  Placement p;
  p.keep = keep;
  for (size_t at = 0; at < dst.size(); at += 37) {
    p.into.push_back(std::span<uint8_t>(dst).subspan(at, std::min<size_t>(37, dst.size() - at)));
  }
  auto m = far_->try_recv_into(kLongMs, kLongMs, [&](const Header&, std::span<const uint8_t>) {
    return std::optional<Placement>(p);
  });
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(std::vector<uint8_t>(payload.begin() + keep, payload.end()), dst);
}

// A message larger than the steps the receive buffer grows by arrives whole.
TEST_P(TransportPairTest, AMessageLargerThanAGrowthStepArrivesWhole) {
  const std::vector<uint8_t> payload = pattern((40 << 20) + 12345, 8);
  send(payload);
  auto m = far_->recv(kLongMs);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_TRUE(m->payload == payload);
}

// A placer that declines gets the whole message, as try_recv would; one whose spans do not
// add up to the payload is a bug, reported as an error, not a write out of bounds.
TEST_P(TransportPairTest, ADeclinedPayloadArrivesWholeAndABadPlacementIsAnError) {
  const std::vector<uint8_t> payload = pattern(100000, 1);
  send(payload);
  auto m = far_->try_recv_into(kLongMs, kLongMs, [](const Header&, std::span<const uint8_t>) {
    return std::optional<Placement>();
  });
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_TRUE(m->has_value());
  EXPECT_FALSE((*m)->placed);
  EXPECT_EQ((*m)->payload, payload);
  send(payload, {}, /*must_go=*/false);
  std::vector<uint8_t> small(10);
  auto bad = far_->try_recv_into(kLongMs, kLongMs, [&](const Header&, std::span<const uint8_t>) {
    return std::optional<Placement>(Placement{0, {small}});
  });
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::kInternal) << bad.status().message();
}

// No message before the timeout is no message and no error; then one arrives.
TEST_P(TransportPairTest, NothingStartedIsNoMessage) {
  auto none = far_->try_recv(20, kLongMs);
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(far_->recv(20).is_ok());
  send(pattern(10, 3));
  auto m = far_->recv(kLongMs);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->payload, pattern(10, 3));
  EXPECT_EQ(m->header.command, Command::kSetTensors);
}

// Messages of every size, sent as any number of pieces, arrive whole and in order, from
// several threads at once.
TEST_P(TransportPairTest, ConcurrentSendsArriveWholeAndInOrderPerThread) {
  const std::vector<size_t> sizes = {0, 1, kRecvLeadBytes - 1, kRecvLeadBytes, 70000, 3 << 20};
  std::vector<std::thread> senders;
  for (uint32_t t = 0; t < 3; ++t) {
    senders.emplace_back([&, t] {
      for (uint32_t i = 0; i < sizes.size(); ++i) {
        Header h;
        h.command = Command::kSetTensor;
        h.stream = t;
        h.request_id = i;
        const std::vector<uint8_t> p = pattern(sizes[i], static_cast<uint8_t>(t * 16 + i));
        const Piece pieces[3] = {Piece(p).first(p.size() / 3),
                                 Piece(p).subspan(p.size() / 3, p.size() / 3),
                                 Piece(p).subspan(2 * (p.size() / 3))};
        EXPECT_TRUE(near_->send(h, pieces));
      }
    });
  }
  std::vector<uint32_t> next(3, 0);
  for (size_t k = 0; k < 3 * sizes.size(); ++k) {
    auto m = far_->recv(kLongMs);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    const uint32_t t = m->header.stream;
    ASSERT_LT(t, 3u);
    const uint32_t i = m->header.request_id;
    EXPECT_EQ(i, next[t]++);
    ASSERT_LT(i, sizes.size());
    EXPECT_EQ(m->payload, pattern(sizes[i], static_cast<uint8_t>(t * 16 + i)));
  }
  for (std::thread& t : senders) t.join();
}

// A payload over the receiver's ceiling is an error naming the limit, before it is received.
TEST_P(TransportPairTest, AnOversizedPayloadIsAnError) {
  far_->set_max_payload(1000);
  send(pattern(1001, 0));
  auto m = far_->try_recv(kLongMs, kLongMs);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kOutOfRange) << m.status().message();
  EXPECT_NE(m.status().message().find("1001"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("1000"), std::string::npos) << m.status().message();
}

// shutdown() wakes a receive blocked without a timeout, and later calls fail.
TEST_P(TransportPairTest, ShutdownWakesABlockedReceive) {
  Result<std::optional<Message>> r = std::optional<Message>();
  std::atomic<pid_t> tid{0};
  std::thread receiver([&] {
    tid.store(::gettid());
    r = far_->try_recv(-1, -1);
  });
  // Shut down only once the receiver sleeps in the kernel (/proc's state S): blocked in its
  // receive, not yet to start it.
  auto blocked = [&] {
    if (tid.load() == 0) return false;
    std::ifstream f("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
    const std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t end = stat.rfind(')');
    return end != std::string::npos && end + 2 < stat.size() && stat[end + 2] == 'S';
  };
  for (int i = 0; i < 10000 && !blocked(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool was_blocked = blocked();
  far_->shutdown();
  receiver.join();
  ASSERT_TRUE(was_blocked) << "the receiver never blocked";
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnavailable) << r.status().message();
  EXPECT_FALSE(far_->try_recv(-1, -1).is_ok());
  EXPECT_FALSE(far_->send(Header{}, {}).is_ok());
}

// The peer closing is seen as the connection closed, after the messages it sent before.
TEST_P(TransportPairTest, APeerThatLeavesIsAnErrorAfterItsMessages) {
  send(pattern(500, 9));
  sent();
  near_.reset();
  auto m = far_->recv(kLongMs);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->payload, pattern(500, 9));
  auto gone = far_->recv(kLongMs);
  ASSERT_FALSE(gone.is_ok());
  EXPECT_EQ(gone.status().kind(), ErrorKind::kUnavailable) << gone.status().message();
  EXPECT_FALSE(far_->peer().empty());
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportPairTest, ::testing::ValuesIn(test_transports()),
                         TestTransportName());

// The scheme picks the transport; "scheme://" reads as "scheme:", and no scheme is TCP.
TEST(TransportSchemes, TheAddressSchemeChoosesTheTransport) {
  for (const std::string prefix : {"", "tcp:", "tcp://"}) {
    auto l = transport_listen(prefix + "127.0.0.1:0");
    ASSERT_TRUE(l.is_ok()) << prefix << ": " << l.status().message();
    const std::string port = (*l)->address().substr((*l)->address().rfind(':') + 1);
    auto t = transport_connect(prefix + "127.0.0.1:" + port, kLongMs);
    ASSERT_TRUE(t.is_ok()) << prefix << ": " << t.status().message();
    EXPECT_EQ((*t)->peer(), "tcp:127.0.0.1:" + port);
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / ("strata-ts-" + std::to_string(::getpid())))
          .string();
  auto l = transport_listen("unix://" + path);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  auto t = transport_connect("unix:" + path, kLongMs);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ((*t)->peer(), "unix:" + path);
  Result<std::unique_ptr<Transport>> bad = transport_connect("tcp:nowhere", kLongMs);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'tcp:nowhere'"), std::string::npos)
      << bad.status().message();
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Seqpacket" : "Tcp";
                         });

}  // namespace
}  // namespace strata::rpc
