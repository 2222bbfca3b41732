// The UCX transport against a UCX peer that sends what a Transport never would: a broken
// header, a size that does not match, more than the ceiling, a rendezvous it never completes.
// Over UCX's TCP and its shared memory; skipped in a build without UCX.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "rpc/rpc_testing.h"
#include "rpc/transport.h"
#include "rpc/transport_kinds.h"
#include "rpc/transport_testing.h"
#include "rpc/ucx_worker.h"
#include "rpc/worker.h"

#if STRATA_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace strata::rpc {
namespace {

#if STRATA_HAVE_UCX

// One UCP context, worker and endpoint, progressed only when the test says so. Its calls that
// open or close sockets, or progress, hold the socket lock (rpc/ucx_worker.h) exclusively: the
// process has other workers.
class RawUcxPeer {
 public:
  RawUcxPeer() {
    UcxSocketHold hold;
    ucp_config_t* config = nullptr;
    ucp_config_read(nullptr, nullptr, &config);
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM;
    ok_ = ucp_init(&p, config, &ctx_) == UCS_OK;
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    ok_ = ok_ && ucp_worker_create(ctx_, &wp, &worker_) == UCS_OK;
  }
  ~RawUcxPeer() {
    UcxSocketHold hold;
    if (ep_ != nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      wait(ucp_ep_close_nbx(ep_, &p));
    }
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (ctx_ != nullptr) ucp_cleanup(ctx_);
  }
  bool ok() const { return ok_; }

  // To "ucx:127.0.0.1:PORT"; returns once connected.
  bool connect(const std::string& address) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    p.sockaddr.addrlen = sizeof(a);
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) {
      static_cast<RawUcxPeer*>(arg)->closed_.store(true);
    };
    p.err_handler.arg = this;
    if (ucx_serialized([&] { return ucp_ep_create(worker_, &p, &ep_); }) != UCS_OK) return false;
    ucp_request_param_t q{};
    return wait(ucp_ep_flush_nbx(ep_, &q)) == UCS_OK;
  }

  // One active message of strata's id; the request, not waited for (nullptr: done).
  ucs_status_ptr_t post(const std::vector<uint8_t>& head, const std::vector<uint8_t>& data,
                        bool rndv) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = rndv ? UCP_AM_SEND_FLAG_RNDV : 0;
    return ucp_am_send_nbx(ep_, kUcxAmId, head.data(), head.size(), data.data(), data.size(), &p);
  }
  ucs_status_t send(const std::vector<uint8_t>& head, const std::vector<uint8_t>& data) {
    return wait(post(head, data, false));
  }

  // Progresses for up to ms: true once the other end has closed the connection.
  bool closed_by_peer(int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!closed_.load() && std::chrono::steady_clock::now() < end) progress();
    return closed_.load();
  }

  ucs_status_t wait(ucs_status_ptr_t r) {
    if (r == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) progress();
    ucp_request_free(r);
    return s;
  }

 private:
  void progress() {
    ucx_serialized([this] { return ucp_worker_progress(worker_); });
  }

  bool ok_ = false;
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  std::atomic<bool> closed_{false};
};

std::vector<uint8_t> header_bytes(uint64_t payload_size, uint32_t magic = kMagic) {
  Header h;
  h.magic = magic;
  h.command = Command::kSetTensor;
  h.payload_size = payload_size;
  std::vector<uint8_t> b(kHeaderBytes);
  header_encode(h, b.data());
  return b;
}

// A listener, the raw peer connected to it, and the accepted transport.
class UcxRawPeerTest : public ::testing::TestWithParam<TestTransport> {
 protected:
  void SetUp() override {
    GetParam().use_env();
    auto l = transport_listen(GetParam().listen_address());
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    listener_ = std::move(*l);
    peer_ = std::make_unique<RawUcxPeer>();
    ASSERT_TRUE(peer_->ok());
    std::atomic<int> connected{0};
    std::thread connector([&] { connected.store(peer_->connect(listener_->address()) ? 1 : -1); });
    auto t = listener_->accept(kLongMs);
    // The connection completes while the accepted side progresses it.
    while (t.is_ok() && connected.load() == 0) (void)(*t)->try_recv(10, kLongMs);
    connector.join();
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    ASSERT_EQ(connected.load(), 1);
    t_ = std::move(*t);
  }

  // The transport refuses what came: an error containing `what`, the transport not used
  // again, and the peer sees the connection closed.
  // The peer is progressed meanwhile, as a real one is by its receiving thread.
  void expect_refused(const std::string& what) {
    bool closed = false;
    std::thread watcher([&] { closed = peer_->closed_by_peer(kLongMs); });
    auto m = t_->try_recv(kLongMs, kLongMs);
    watcher.join();
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.status().message().find(what), std::string::npos) << m.status().message();
    EXPECT_FALSE(t_->try_recv(10, 10).is_ok());
    EXPECT_TRUE(closed);
  }

  std::unique_ptr<Listener> listener_;
  std::unique_ptr<RawUcxPeer> peer_;
  std::unique_ptr<Transport> t_;
};

TEST_P(UcxRawPeerTest, AValidMessageArrives) {
  std::vector<uint8_t> head = header_bytes(3);
  head.insert(head.end(), {7, 8, 9});
  ASSERT_EQ(peer_->send(head, {}), UCS_OK);
  auto m = t_->recv(kLongMs);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->payload, (std::vector<uint8_t>{7, 8, 9}));
}

TEST_P(UcxRawPeerTest, ABadMagicIsRefused) {
  ASSERT_EQ(peer_->send(header_bytes(0, 0x12345678), {}), UCS_OK);
  expect_refused("magic");
}

TEST_P(UcxRawPeerTest, AHeaderTooShortIsRefused) {
  ASSERT_EQ(peer_->send({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {}), UCS_OK);
  expect_refused("holds no header");
}

// payload_size must be what the message carries: the lead in the header, the rest as data.
TEST_P(UcxRawPeerTest, ASizeThatDoesNotMatchIsRefused) {
  std::vector<uint8_t> head = header_bytes(100);
  head.resize(kHeaderBytes + 50);
  ASSERT_EQ(peer_->send(head, std::vector<uint8_t>(50)), UCS_OK);
  expect_refused("payload_size 100 but the message carries 50 + 50 bytes");
}

// Over the ceiling: refused from the header, before the rendezvous data is pulled.
TEST_P(UcxRawPeerTest, AnOversizedPayloadIsRefusedBeforeItsData) {
  t_->set_max_payload(1 << 20);
  const std::vector<uint8_t> data(2 << 20, 1);
  std::vector<uint8_t> head = header_bytes(kRecvLeadBytes + data.size());
  head.resize(kHeaderBytes + kRecvLeadBytes);
  ucs_status_ptr_t r = peer_->post(head, data, true);
  ASSERT_FALSE(UCS_PTR_IS_ERR(r));
  expect_refused("limit 1048576");
  peer_->wait(r);  // completes, refused or cancelled
}

// A peer that announces a rendezvous and never serves it: an error once nothing moved for the
// stall timeout (not a hang, and not the time the bytes would take at the slowest rate), and
// the destination is let go of before the receive returns.
TEST_P(UcxRawPeerTest, AStalledRendezvousIsAnError) {
  const std::vector<uint8_t> data(8 << 20, 2);
  std::vector<uint8_t> head = header_bytes(kRecvLeadBytes + data.size());
  head.resize(kHeaderBytes + kRecvLeadBytes);
  ucs_status_ptr_t r = peer_->post(head, data, true);  // and no progress from here on
  ASSERT_FALSE(UCS_PTR_IS_ERR(r));
  std::vector<uint8_t> dst(data.size());
  const auto start = std::chrono::steady_clock::now();
  auto m = t_->try_recv_into(kLongMs, 300, [&](const Header&, std::span<const uint8_t>) {
    return std::optional<Placement>(Placement{kRecvLeadBytes, {dst}});
  });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  if (m.is_ok()) {
    // A transport that pulls the data without the sender's help (a one-sided get) finishes
    // the message: then there is nothing to stall on.
    EXPECT_EQ(dst, data);
  } else {
    EXPECT_NE(m.status().message().find("stalled (nothing moved for 300 ms"), std::string::npos)
        << m.status().message();
    EXPECT_GE(ms, 300);
    EXPECT_FALSE(t_->try_recv(10, 10).is_ok());
  }
  peer_->wait(r);
}

// A worker of this process on the transport's address, with a 1 MiB ceiling.
Result<std::unique_ptr<Worker>> start_small_worker(const TestTransport& t) {
  WorkerOptions o;
  o.address = t.listen_address();
  o.log = false;
  o.memory_limit = 1 << 20;
  return Worker::start(o);
}

// HELLO over t, and the worker's answer.
Status say_hello(Transport& t) {
  HelloRequest hello;
  std::vector<uint8_t> p;
  encode(hello, &p);
  Header h;
  h.command = Command::kHello;
  STRATA_RETURN_IF_ERROR(send_message(t, h, p));
  STRATA_ASSIGN_OR_RETURN(const Message reply, t.recv(kLongMs));
  if (reply.header.status != 0) {
    return internal_error("HELLO answered with status " + std::to_string(reply.header.status));
  }
  return decode_hello_response(reply.payload).status();
}

// A worker refuses a broken message by closing only that connection.
TEST_P(UcxRawPeerTest, AWorkerClosesOnlyTheBrokenConnection) {
  auto w = start_small_worker(GetParam());
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  RawUcxPeer bad;
  ASSERT_TRUE(bad.connect((*w)->address()));
  ASSERT_EQ(bad.send(header_bytes(0, 0xdeadbeef), {}), UCS_OK);
  EXPECT_TRUE(bad.closed_by_peer(kLongMs));
  RawUcxPeer huge;
  ASSERT_TRUE(huge.connect((*w)->address()));
  std::vector<uint8_t> head = header_bytes(kMaxMessageBytes);  // past the --mem ceiling
  head.resize(kHeaderBytes + kRecvLeadBytes);
  ucs_status_ptr_t r = huge.post(head, std::vector<uint8_t>(1 << 16), true);
  EXPECT_TRUE(huge.closed_by_peer(kLongMs));
  huge.wait(r);
  // A proper client is served.
  auto c = transport_connect((*w)->address(), kLongMs);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const Status hello = say_hello(**c);
  EXPECT_TRUE(hello.is_ok()) << hello.message();
}

// Connections that close while others open, in one process, each with its own UCX worker: a
// worker serving one client after another, a server that reconnects. UCX 1.13 aborted such a
// process now and then, when a closing worker took a missed event of its freed socket number
// for the next connection's (the socket lock, rpc/ucx_worker.h). Two clients, one after another
// each, say hello and hang up; every one is answered and the process lives.
class UcxChurnTest : public ::testing::TestWithParam<TestTransport> {};

TEST_P(UcxChurnTest, ConnectionsClosingWhileOthersOpen) {
  GetParam().use_env();
  // UCX's keepalive, starved of CPU (three sanitizer shards on 2 cores), now and then declared a
  // shared-memory endpoint dead in mid-churn: an "Endpoint timeout", or a connect that never
  // completed. Measured: 3 of 8 runs of three shards at once lost 1 or 2 of the 300, none of 8
  // with it off. What this test guards (UCX 1.13's abort) does not need it: off here.
  const char* was = std::getenv("UCX_KEEPALIVE_INTERVAL");
  const std::string saved = was != nullptr ? was : "";
  ::setenv("UCX_KEEPALIVE_INTERVAL", "inf", 1);
  struct Restore {
    bool had;
    std::string value;
    ~Restore() {
      if (had) {
        ::setenv("UCX_KEEPALIVE_INTERVAL", value.c_str(), 1);
      } else {
        ::unsetenv("UCX_KEEPALIVE_INTERVAL");
      }
    }
  } restore{was != nullptr, saved};
  // The worker's side of each connection that ended otherwise than by the client's close.
  std::mutex log_mu;
  std::vector<std::string> worker_said;
  WorkerOptions o;
  o.address = GetParam().listen_address();
  o.memory_limit = 1 << 20;
  o.log_to = [&](const std::string& line) {
    const size_t at = line.find(" closed: ");
    if (at == std::string::npos || line.compare(at + 9, 14, "connection to ") == 0) return;
    std::lock_guard<std::mutex> lock(log_mu);
    worker_said.push_back(line);
  };
  auto w = Worker::start(o);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  // Even with it off, a CI run of the sanitized shards (ten processes on 2 cores) lost 1 of
  // the 300 about once in six: the client saw its connection closed before the answer. So a
  // failed attempt is tried once more, on a new connection, and at most kMaxFailed of them may
  // fail: the process living and the worker serving every client is what this test is for.
  constexpr int kClients = 2, kEach = 150, kMaxFailed = 3;
  std::atomic<int> answered{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        for (int attempt = 0; attempt < 2; ++attempt) {
          auto t = transport_connect((*w)->address(), kLongMs);
          const Status s = t.is_ok() ? say_hello(**t) : t.status().with_context("connect");
          if (s.is_ok()) {
            answered.fetch_add(1);
            break;
          }
          std::lock_guard<std::mutex> lock(failures_mu);
          failures.push_back("hello " + std::to_string(i) + ", attempt " +
                             std::to_string(attempt + 1) + ": " + s.message());
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  (*w)->stop();
  EXPECT_EQ(answered.load(), kClients * kEach);
  EXPECT_LE(failures.size(), size_t{kMaxFailed});
  // Said whether or not the test fails, so that a run that tolerated one shows what it was.
  for (const std::string& f : failures) std::fprintf(stderr, "failed: %s\n", f.c_str());
  for (const std::string& l : worker_said) std::fprintf(stderr, "worker: %s\n", l.c_str());
}

std::vector<TestTransport> ucx_transports() {
  std::vector<TestTransport> v;
  for (const TestTransport& t : test_transports()) {
    if (t.ucx()) v.push_back(t);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxRawPeerTest, ::testing::ValuesIn(ucx_transports()),
                         TestTransportName());
INSTANTIATE_TEST_SUITE_P(Ucx, UcxChurnTest, ::testing::ValuesIn(ucx_transports()),
                         TestTransportName());

#else

TEST(UcxRawPeerTest, NeedsUcx) { GTEST_SKIP() << "built without UCX (libucx-dev)"; }

#endif

}  // namespace
}  // namespace strata::rpc
