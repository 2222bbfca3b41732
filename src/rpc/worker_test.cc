// Starts a Worker in-process and talks raw protocol to it, over TCP and over Unix seqpacket.
#include "rpc/worker.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backend/cpu_backend.h"
#include "graph/graph_testing.h"
#include "graph/serialize.h"
#include "rpc/auth.h"
#include "rpc/protocol.h"
#include "rpc/rpc_testing.h"
#include "rpc/transport.h"
#include "rpc/transport_testing.h"

namespace strata::rpc {
namespace {

constexpr int kTimeoutMs = 20000;

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A client that speaks the protocol byte by byte, without the remote backend.
class RawClient {
 public:
  explicit RawClient(std::unique_ptr<Transport> t) : t_(std::move(t)) {}

  static std::unique_ptr<RawClient> connect(const std::string& address) {
    Result<std::unique_ptr<Transport>> t = transport_connect(address, kTimeoutMs);
    EXPECT_TRUE(t) << t.status().message();
    return t ? std::make_unique<RawClient>(std::move(*t)) : nullptr;
  }

  // HELLO (with the token's answer when challenged); the server's final response or error.
  Result<HelloResponse> hello(const std::string& token = "", uint16_t major = kVersionMajor,
                              uint64_t caps = kCapAll) {
    HelloRequest req;
    req.major = major;
    req.caps = caps;
    req.client_nonce[0] = 42;
    Result<Message> m = call(Command::kHello, payload(req));
    if (!m) return m.status();
    STRATA_ASSIGN_OR_RETURN(HelloResponse r, decode_hello_response(m->payload));
    if (r.auth != kAuthChallenge) return r;
    req.step = 1;
    req.mac = auth_client_mac(token, r.server_nonce, req.client_nonce);
    Result<Message> m2 = call(Command::kHello, payload(req));
    if (!m2) return m2.status();
    STRATA_ASSIGN_OR_RETURN(HelloResponse r2, decode_hello_response(m2->payload));
    if (r2.auth != kAuthAccepted ||
        !auth_mac_equal(r2.server_mac, auth_server_mac(token, req.client_nonce, r.server_nonce))) {
      return unavailable("server did not prove the token");
    }
    return r2;
  }

  // Sends a request and returns the response payload, or the error it carries.
  Result<Message> call(Command c, const std::vector<uint8_t>& p,
                       const std::vector<uint8_t>& data = {}) {
    Header h;
    h.command = c;
    h.request_id = ++id_;
    h.stream = stream_;
    const Piece pieces[2] = {p, data};
    STRATA_RETURN_IF_ERROR(t_->send(h, pieces));
    STRATA_ASSIGN_OR_RETURN(Message m, t_->recv(kTimeoutMs));
    if (m.header.request_id != h.request_id || m.header.command != c ||
        (m.header.flags & kFlagResponse) == 0) {
      return internal_error("response does not match the request");
    }
    if (m.header.status != 0) {
      last_status_ = m.header.status;
      return status_from_wire(
          m.header.status,
          std::string_view(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    }
    return m;
  }

  Status one_way(Command c, const std::vector<uint8_t>& p, const std::vector<uint8_t>& data = {}) {
    Header h;
    h.command = c;
    h.flags = kFlagOneWay;
    h.request_id = ++id_;
    h.stream = stream_;
    const Piece pieces[2] = {p, data};
    return t_->send(h, pieces);
  }

  uint64_t alloc(uint64_t size) {
    Result<Message> m = call(Command::kAllocBuffer, payload(AllocBufferRequest{size}));
    EXPECT_TRUE(m) << m.status().message();
    if (!m) return 0;
    return decode_alloc_buffer_response(m->payload)->handle;
  }
  Status set(uint64_t buffer, uint64_t offset, const std::vector<uint8_t>& data,
             uint32_t flags = 0) {
    SetTensorRequest req;
    req.region = {buffer, offset, data.size()};
    req.flags = flags;
    return one_way(Command::kSetTensor, payload(req), data);
  }
  Result<std::vector<uint8_t>> get(uint64_t buffer, uint64_t offset, uint64_t size) {
    STRATA_ASSIGN_OR_RETURN(
        Message m, call(Command::kGetTensor, payload(GetTensorRequest{{buffer, offset, size}})));
    return std::move(m.payload);
  }
  Status sync() { return call(Command::kSynchronize, {}).status(); }

  Transport& transport() { return *t_; }
  uint16_t last_status() const { return last_status_; }
  // The header's stream id of the messages sent from now on.
  void set_stream(uint32_t s) { stream_ = s; }

 private:
  std::unique_ptr<Transport> t_;
  uint32_t id_ = 0;
  uint32_t stream_ = 0;
  uint16_t last_status_ = 0;
};

// A plain socket to the worker, for bytes the transport would never send.
int raw_connect(const std::string& address, bool seqpacket) {
  if (seqpacket) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string path = address.substr(5);
    std::memcpy(a.sun_path, path.data(), path.size());
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
    return fd;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  return fd;
}

class WorkerTest : public ::testing::TestWithParam<TestTransport> {
 protected:
  void SetUp() override {
    GetParam().use_env();
    if (GetParam().ucx()) {
      auto l = transport_listen(GetParam().listen_address());
      if (!l && l.status().kind() == ErrorKind::kUnsupported) GTEST_SKIP() << l.status().message();
    }
  }
  std::unique_ptr<Worker> start(WorkerOptions o = {}) {
    o.address = GetParam().listen_address();
    o.log = false;
    if (o.memory_limit == 0) o.memory_limit = 64 << 20;
    Result<std::unique_ptr<Worker>> w = Worker::start(o);
    EXPECT_TRUE(w) << w.status().message();
    return w ? std::move(*w) : nullptr;
  }
  // Bytes no transport would send go on a plain socket; for UCX, see transport_ucx_test.cc.
  bool raw_sockets() const { return !GetParam().ucx(); }
  std::unique_ptr<RawClient> client(Worker& w, const std::string& token = "") {
    auto c = RawClient::connect(w.address());
    if (c == nullptr) return nullptr;
    Result<HelloResponse> h = c->hello(token);
    EXPECT_TRUE(h) << h.status().message();
    return h ? std::move(c) : nullptr;
  }
  // The worker serves a new client correctly: a full write/read round trip.
  void expect_serves(Worker& w, const std::string& token = "") {
    auto c = client(w, token);
    ASSERT_NE(c, nullptr);
    const uint64_t b = c->alloc(16);
    ASSERT_TRUE(c->set(b, 4, {9, 8, 7}));
    Result<std::vector<uint8_t>> got = c->get(b, 3, 5);
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_EQ(*got, (std::vector<uint8_t>{0, 9, 8, 7, 0}));
  }
  // Waits (bounded) until the worker has seen every connection close.
  static void wait_closed(Worker& w) {
    for (int i = 0; i < 2000 && w.open_connections() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};

TEST_P(WorkerTest, BuffersRoundTrip) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  Result<Message> info = c->call(Command::kDeviceInfo, {});
  ASSERT_TRUE(info);
  Result<DeviceInfo> di = decode_device_info_response(info->payload);
  ASSERT_TRUE(di);
  EXPECT_EQ(di->memory_total, uint64_t{64} << 20);

  const uint64_t a = c->alloc(64);
  const uint64_t b = c->alloc(64);
  ASSERT_NE(a, b);
  EXPECT_EQ(w->bytes_allocated(), 128u);
  // Batched write of two regions, batched read of three.
  SetTensorsRequest st;
  st.regions = {{a, 0, 4}, {b, 60, 4}};
  ASSERT_TRUE(c->one_way(Command::kSetTensors, payload(st), {1, 2, 3, 4, 5, 6, 7, 8}));
  GetTensorsRequest gt;
  gt.regions = {{b, 60, 4}, {a, 0, 2}, {a, 10, 1}};
  Result<Message> got = c->call(Command::kGetTensors, payload(gt));
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(got->payload, (std::vector<uint8_t>{5, 6, 7, 8, 1, 2, 0}));
  // Copy, clear.
  ASSERT_TRUE(c->call(Command::kCopyTensor, payload(CopyTensorRequest{{a, 0, 4}, {b, 0, 4}})));
  EXPECT_EQ(*c->get(b, 0, 4), (std::vector<uint8_t>{1, 2, 3, 4}));
  ASSERT_TRUE(c->call(Command::kBufferClear, payload(BufferClearRequest{a, 0x5a})));
  EXPECT_EQ(*c->get(a, 62, 2), (std::vector<uint8_t>{0x5a, 0x5a}));
  ASSERT_TRUE(c->call(Command::kFreeBuffer, payload(FreeBufferRequest{a})));
  EXPECT_EQ(w->bytes_allocated(), 64u);
  EXPECT_FALSE(c->get(a, 0, 1));  // freed
  EXPECT_TRUE(c->sync());
  c.reset();
  wait_closed(*w);
  EXPECT_EQ(w->bytes_allocated(), 0u);  // the connection's buffers went with it
}

TEST_P(WorkerTest, LargeMessagesArriveWhole) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const size_t n = 3 * kSeqpacketChunkBytes + 123;  // several datagrams on seqpacket
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint64_t b = c->alloc(n);
  ASSERT_TRUE(c->set(b, 0, data));
  Result<std::vector<uint8_t>> got = c->get(b, 0, n);
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(*got, data);
}

// Writes from 64 KiB on are received straight into the buffers: the bytes land where the
// regions say, over two buffers and with the fixed part cut from the data at any point.
TEST_P(WorkerTest, LargeWritesLandInTheirRegions) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const size_t n = 2 * kSeqpacketChunkBytes + 77;
  const uint64_t a = c->alloc(n + 16);
  const uint64_t b = c->alloc(n);
  std::vector<uint8_t> data(2 * n - 100);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 5 + (i >> 8));
  SetTensorsRequest st;
  st.regions = {{a, 16, n}, {b, 0, 50}, {b, 100, n - 150}};
  ASSERT_TRUE(c->one_way(Command::kSetTensors, payload(st), data));
  EXPECT_EQ(*c->get(a, 16, n), std::vector<uint8_t>(data.begin(), data.begin() + n));
  EXPECT_EQ(*c->get(a, 0, 16), std::vector<uint8_t>(16, 0));
  EXPECT_EQ(*c->get(b, 0, 50), std::vector<uint8_t>(data.begin() + n, data.begin() + n + 50));
  EXPECT_EQ(*c->get(b, 50, 50), std::vector<uint8_t>(50, 0));
  EXPECT_EQ(*c->get(b, 100, n - 150), std::vector<uint8_t>(data.begin() + n + 50, data.end()));
  // One SET_TENSOR as well.
  const std::vector<uint8_t> one(data.begin(), data.begin() + n);
  ASSERT_TRUE(c->set(b, 0, one));
  EXPECT_EQ(*c->get(b, 0, n), one);
}

// A large write that would not run is not received into place either: one with a bad region
// writes nothing and fails, and one behind its stream's sticky error is skipped.
TEST_P(WorkerTest, LargeWritesThatDoNotRunWriteNothing) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const size_t n = 100000;
  const uint64_t b = c->alloc(n);
  const std::vector<uint8_t> ones(n, 1);
  SetTensorsRequest st;
  st.regions = {{b, 0, n / 2}, {b, n / 2 + 1, n / 2}};  // the second ends one byte past
  ASSERT_TRUE(c->one_way(Command::kSetTensors, payload(st), ones));
  ASSERT_TRUE(c->set(b, 0, ones));  // skipped: behind the sticky error
  Result<std::vector<uint8_t>> r = c->get(b, 0, n);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("past the end"), std::string::npos) << r.status().message();
  EXPECT_EQ(*c->get(b, 0, n), std::vector<uint8_t>(n, 0));
  // A write whose regions do not add up to its data.
  st.regions = {{b, 0, n / 2}};
  ASSERT_TRUE(c->one_way(Command::kSetTensors, payload(st), ones));
  EXPECT_FALSE(c->sync());
  EXPECT_EQ(*c->get(b, 0, n), std::vector<uint8_t>(n, 0));
  ASSERT_TRUE(c->set(b, 0, ones));
  EXPECT_EQ(*c->get(b, 0, n), ones);
}

// y = a + b, then GRAPH_RECOMPUTE after new inputs.
TEST_P(WorkerTest, GraphComputeAndRecompute) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const uint64_t buf = c->alloc(3 * 32);
  Graph g = testing::add_graph(buf, 8);
  std::vector<float> x(8), y(8);
  for (int i = 0; i < 8; ++i) {
    x[i] = 0.5f * i;
    y[i] = 10.0f - i;
  }
  ASSERT_TRUE(c->set(buf, 0, bytes_of(x)));
  ASSERT_TRUE(c->set(buf, 32, bytes_of(y)));
  ASSERT_TRUE(
      c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{5, {}}), graph_serialize(g)));
  Result<std::vector<uint8_t>> out = c->get(buf, 64, 32);
  ASSERT_TRUE(out) << out.status().message();
  std::vector<float> sum(8);
  std::memcpy(sum.data(), out->data(), 32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sum[i], x[i] + y[i]);
  ASSERT_TRUE(c->set(buf, 0, bytes_of(y)));
  ASSERT_TRUE(c->one_way(Command::kGraphRecompute, payload(GraphRecomputeRequest{5})));
  out = c->get(buf, 64, 32);
  ASSERT_TRUE(out);
  std::memcpy(sum.data(), out->data(), 32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sum[i], 2 * y[i]);
  // An unknown graph id is an error reported by the next synchronisation.
  ASSERT_TRUE(c->one_way(Command::kGraphRecompute, payload(GraphRecomputeRequest{6})));
  Status s = c->sync();
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("no graph 6"), std::string::npos) << s.message();
  EXPECT_TRUE(c->sync());  // reported once
}

TEST_P(WorkerTest, BadGraphsAreErrors) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const uint64_t buf = c->alloc(64);
  Graph g;
  g.tensors = {make_tensor(buf, 0, DType::kF32, 8), make_tensor(buf, 32, DType::kF32, 8)};
  Node n;
  n.op = Op::kAdd;
  n.src[0] = 0;
  n.src[1] = 7;  // dangling
  n.out = 1;
  g.nodes.push_back(n);
  ASSERT_TRUE(
      c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{1, {}}), graph_serialize(g)));
  Status s = c->sync();
  EXPECT_NE(s.message().find("src[1]"), std::string::npos) << s.message();
  // Every index valid, but a tensor past its buffer's end.
  g.nodes[0].src[1] = 0;
  g.tensors[1] = make_tensor(buf, 40, DType::kF32, 8);
  ASSERT_TRUE(
      c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{1, {}}), graph_serialize(g)));
  s = c->sync();
  EXPECT_NE(s.message().find("past the end"), std::string::npos) << s.message();
  // A buffer this connection does not have.
  g.tensors[1] = make_tensor(buf + 1000, 0, DType::kF32, 8);
  ASSERT_TRUE(
      c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{1, {}}), graph_serialize(g)));
  EXPECT_FALSE(c->sync());
  // Garbage bytes.
  ASSERT_TRUE(c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{1, {}}), {1, 2, 3}));
  EXPECT_FALSE(c->sync());
  expect_serves(*w);
}

TEST_P(WorkerTest, StickyErrorSkipsOneWayCommandsUntilReported) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const uint64_t b = c->alloc(8);
  ASSERT_TRUE(c->set(b, 6, {1, 2, 3}));  // past the end: fails
  ASSERT_TRUE(c->set(b, 0, {7}));        // skipped
  Result<std::vector<uint8_t>> r = c->get(b, 0, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("past the end"), std::string::npos);
  EXPECT_EQ(*c->get(b, 0, 1), std::vector<uint8_t>{0});  // the skipped write never ran
  ASSERT_TRUE(c->set(b, 0, {7}));
  EXPECT_EQ(*c->get(b, 0, 1), std::vector<uint8_t>{7});
}

// Two streams of one connection: a failed one-way write of stream 1 is reported to stream 1
// only, and skips only stream 1's one-way commands.
TEST_P(WorkerTest, StickyErrorsBelongToTheirStream) {
  auto w = start();
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const uint64_t b = c->alloc(8);
  c->set_stream(1);
  ASSERT_TRUE(c->set(b, 6, {1, 2, 3}));  // past the end: fails
  ASSERT_TRUE(c->set(b, 0, {7}));        // skipped: behind stream 1's error
  c->set_stream(2);
  ASSERT_TRUE(c->set(b, 1, {5}));  // runs
  Result<std::vector<uint8_t>> two = c->get(b, 0, 2);
  ASSERT_TRUE(two) << two.status().message();
  EXPECT_EQ(*two, (std::vector<uint8_t>{0, 5}));
  EXPECT_TRUE(c->sync());
  c->set_stream(1);
  Result<std::vector<uint8_t>> one = c->get(b, 0, 2);
  ASSERT_FALSE(one);
  EXPECT_NE(one.status().message().find("past the end"), std::string::npos)
      << one.status().message();
  EXPECT_EQ(*c->get(b, 0, 2), (std::vector<uint8_t>{0, 5}));  // reported once
  // The connection-level stream 0 is a stream like the others.
  c->set_stream(0);
  EXPECT_TRUE(c->sync());
}

// Without kCapStreams the connection is one stream (the old behaviour), and a client that
// sets a stream id anyway breaks the protocol.
TEST_P(WorkerTest, WithoutStreamIdsTheConnectionIsOneStream) {
  auto w = start();
  auto c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->hello("", kVersionMajor, kCapAll & ~kCapStreams));
  const uint64_t b = c->alloc(8);
  ASSERT_TRUE(c->set(b, 6, {1, 2, 3}));
  Result<std::vector<uint8_t>> r = c->get(b, 0, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("past the end"), std::string::npos);
  c->set_stream(3);
  EXPECT_FALSE(c->get(b, 0, 1));
  EXPECT_FALSE(c->transport().recv(kTimeoutMs));  // closed
  expect_serves(*w);
}

TEST_P(WorkerTest, HostileRegions) {
  auto w = start();
  auto c = client(*w);
  auto other = client(*w);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(other, nullptr);
  const uint64_t b = c->alloc(32);
  const uint64_t theirs = other->alloc(32);
  ASSERT_TRUE(other->set(theirs, 0, {1, 2, 3, 4}));
  ASSERT_TRUE(other->sync());
  // Another connection's buffer, an unknown one, offset + size that wraps, one byte past.
  EXPECT_FALSE(c->get(theirs, 0, 4));
  EXPECT_FALSE(c->get(999999, 0, 1));
  EXPECT_FALSE(c->get(b, ~uint64_t{0} - 3, 8));
  EXPECT_FALSE(c->get(b, 0, 33));
  EXPECT_FALSE(c->call(Command::kFreeBuffer, payload(FreeBufferRequest{theirs})));
  EXPECT_FALSE(c->call(Command::kBufferClear, payload(BufferClearRequest{theirs, 1})));
  EXPECT_FALSE(
      c->call(Command::kCopyTensor, payload(CopyTensorRequest{{theirs, 0, 4}, {b, 0, 4}})));
  // GET_TENSORS whose sizes wrap around 2^64.
  GetTensorsRequest gt;
  gt.regions = {{b, 0, ~uint64_t{0}}, {b, 0, 2}};
  EXPECT_FALSE(c->call(Command::kGetTensors, payload(gt)));
  // SET_TENSORS whose sizes wrap to the bytes present; one bad region writes nothing.
  SetTensorsRequest st;
  st.regions = {{b, 0, ~uint64_t{0}}, {b, 0, 3}};
  ASSERT_TRUE(c->one_way(Command::kSetTensors, payload(st), {1, 2}));
  EXPECT_FALSE(c->sync());
  st.regions = {{b, 0, 2}, {b, 31, 2}};
  ASSERT_TRUE(c->one_way(Command::kSetTensors, payload(st), {5, 5, 6, 6}));
  EXPECT_FALSE(c->sync());
  EXPECT_EQ(*c->get(b, 0, 2), (std::vector<uint8_t>{0, 0}));
  // A truncated request.
  std::vector<uint8_t> half = payload(AllocBufferRequest{8});
  half.resize(4);
  EXPECT_FALSE(c->call(Command::kAllocBuffer, half));
  // The other connection's data is untouched and both still work.
  EXPECT_EQ(*other->get(theirs, 0, 4), (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_TRUE(c->sync());
  expect_serves(*w);
}

TEST_P(WorkerTest, MemoryLimit) {
  WorkerOptions o;
  o.memory_limit = 1 << 20;
  auto w = start(o);
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  Result<Message> big = c->call(Command::kAllocBuffer, payload(AllocBufferRequest{2 << 20}));
  ASSERT_FALSE(big);
  EXPECT_NE(big.status().message().find("1048576"), std::string::npos) << big.status().message();
  EXPECT_NE(c->alloc(1 << 19), 0u);
  auto c2 = client(*w);
  ASSERT_NE(c2, nullptr);
  // The budget is shared: a second connection gets only what is left.
  EXPECT_FALSE(c2->call(Command::kAllocBuffer, payload(AllocBufferRequest{(1 << 19) + 1})));
  EXPECT_NE(c2->alloc(1 << 19), 0u);
  EXPECT_FALSE(c2->call(Command::kAllocBuffer, payload(AllocBufferRequest{~uint64_t{0}})));
}

TEST_P(WorkerTest, OversizedPayloadClosesOnlyThatConnection) {
  WorkerOptions o;
  o.memory_limit = 1 << 20;
  auto w = start(o);
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  // A header that announces more than the ceiling, written on a plain socket (the transport
  // sets payload_size from what it sends): the worker closes without reading further.
  Header h;
  h.command = Command::kHello;
  h.payload_size = kMaxMessageBytes;
  uint8_t head[kHeaderBytes];
  header_encode(h, head);
  if (!raw_sockets()) GTEST_SKIP() << "raw bytes over UCX: transport_ucx_test.cc";
  const int fd = raw_connect(w->address(), std::string(GetParam().name) == "unix");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, head, kHeaderBytes, MSG_NOSIGNAL), static_cast<ssize_t>(kHeaderBytes));
  uint8_t byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);  // closed, nothing answered
  ::close(fd);
  expect_serves(*w);
  EXPECT_TRUE(c->sync());
}

TEST_P(WorkerTest, GarbageClosesOnlyThatConnection) {
  auto w = start();
  if (!raw_sockets()) GTEST_SKIP() << "raw bytes over UCX: transport_ucx_test.cc";
  const int fd = raw_connect(w->address(), std::string(GetParam().name) == "unix");
  ASSERT_GE(fd, 0);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL), 0);
  uint8_t byte;
  EXPECT_LE(::recv(fd, &byte, 1, 0), 0);  // closed (a reset when bytes were left unread)
  ::close(fd);
  expect_serves(*w);
}

TEST_P(WorkerTest, FirstMessageMustBeHello) {
  auto w = start();
  auto c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->call(Command::kAllocBuffer, payload(AllocBufferRequest{8})));
  EXPECT_FALSE(c->transport().recv(kTimeoutMs));  // then closed
  expect_serves(*w);
}

TEST_P(WorkerTest, MajorVersionMismatch) {
  auto w = start();
  auto c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  Result<HelloResponse> h = c->hello("", kVersionMajor + 1);
  ASSERT_FALSE(h);
  EXPECT_EQ(c->last_status(), static_cast<uint16_t>(WireStatus::kVersionMismatch));
  const std::string both = "client " + std::to_string(kVersionMajor + 1) + ".0, worker " +
                           std::to_string(kVersionMajor) + "." + std::to_string(kVersionMinor);
  EXPECT_NE(h.status().message().find(both), std::string::npos) << h.status().message();
  EXPECT_FALSE(c->transport().recv(kTimeoutMs));
  expect_serves(*w);
}

// A worker posing as another major version (for tests of clients) refuses this version.
TEST_P(WorkerTest, PosesAsAnotherMajorVersion) {
  WorkerOptions o;
  o.version_major = kVersionMajor + 5;
  auto w = start(o);
  auto c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  Result<HelloResponse> h = c->hello();
  ASSERT_FALSE(h);
  EXPECT_EQ(c->last_status(), static_cast<uint16_t>(WireStatus::kVersionMismatch));
  const std::string both = "client " + std::to_string(kVersionMajor) + "." +
                           std::to_string(kVersionMinor) + ", worker " +
                           std::to_string(kVersionMajor + 5) + ".";
  EXPECT_NE(h.status().message().find(both), std::string::npos) << h.status().message();
  auto same = RawClient::connect(w->address());
  ASSERT_NE(same, nullptr);
  Result<HelloResponse> ok = same->hello("", kVersionMajor + 5);
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok->major, kVersionMajor + 5);
}

TEST_P(WorkerTest, TokenRequired) {
  WorkerOptions o;
  o.auth_token = "correct horse";
  auto w = start(o);
  auto bad = RawClient::connect(w->address());
  ASSERT_NE(bad, nullptr);
  Result<HelloResponse> h = bad->hello("wrong");
  ASSERT_FALSE(h);
  EXPECT_EQ(bad->last_status(), static_cast<uint16_t>(WireStatus::kAuthFailed));
  EXPECT_FALSE(bad->transport().recv(kTimeoutMs));
  // A client that skips the answer and sends a command instead.
  auto rude = RawClient::connect(w->address());
  HelloRequest req;
  ASSERT_TRUE(rude->call(Command::kHello, payload(req)));
  EXPECT_FALSE(rude->call(Command::kAllocBuffer, payload(AllocBufferRequest{8})));
  expect_serves(*w, "correct horse");
}

TEST_P(WorkerTest, HiddenCapabilities) {
  WorkerOptions o;
  o.hide_caps = kCapBatched | kCapSetTensorHash;
  auto w = start(o);
  auto c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  Result<HelloResponse> h = c->hello();
  ASSERT_TRUE(h);
  EXPECT_EQ(h->caps, kCapAll & ~(kCapBatched | kCapSetTensorHash));
  const uint64_t b = c->alloc(8);
  GetTensorsRequest gt;
  gt.regions = {{b, 0, 1}};
  Result<Message> r = c->call(Command::kGetTensors, payload(gt));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(c->get(b, 0, 1));
}

// HELLO lists what the worker runs; one posing as an older worker (hide_ops) runs nothing else.
TEST_P(WorkerTest, AnnouncesItsOpsAndDTypesAndRunsNoOthers) {
  auto full = start();
  auto c = RawClient::connect(full->address());
  ASSERT_NE(c, nullptr);
  Result<HelloResponse> h = c->hello();
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_EQ(h->device_caps.ops, cpu_device_caps().ops);
  EXPECT_EQ(h->device_caps.weight_dtypes, cpu_device_caps().weight_dtypes);

  WorkerOptions o;
  o.hide_ops.set(static_cast<uint32_t>(Op::kAdd));
  o.hide_weight_dtypes.set(static_cast<uint32_t>(DType::kQ8_0));
  auto w = start(o);
  c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  h = c->hello();
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_FALSE(h->device_caps.ops.test(static_cast<uint32_t>(Op::kAdd)));
  EXPECT_TRUE(h->device_caps.ops.test(static_cast<uint32_t>(Op::kMul)));
  EXPECT_FALSE(h->device_caps.weight_dtypes.test(static_cast<uint32_t>(DType::kQ8_0)));
  EXPECT_TRUE(h->device_caps.weight_dtypes.test(static_cast<uint32_t>(DType::kQ4_0)));
  const uint64_t buf = c->alloc(3 * 32);
  Graph g = testing::add_graph(buf, 8);
  ASSERT_TRUE(
      c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{1, {}}), graph_serialize(g)));
  Status s = c->sync();
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(s.message().find("does not run op 'add'"), std::string::npos) << s.message();
  g.nodes[0].op = Op::kMul;
  ASSERT_TRUE(
      c->one_way(Command::kGraphCompute, payload(GraphComputeRequest{1, {}}), graph_serialize(g)));
  EXPECT_TRUE(c->sync());

  // Without kCapOpCaps the response is an older worker's: 88 bytes, no lists.
  o.hide_caps = kCapOpCaps;
  auto old = start(o);
  c = RawClient::connect(old->address());
  ASSERT_NE(c, nullptr);
  Result<Message> m = c->call(Command::kHello, payload(HelloRequest{}));
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ(m->payload.size(), kHelloResponseBytes);
}

TEST_P(WorkerTest, WeightCacheByHash) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  WorkerOptions o;
  o.cache_dir = dir.string();
  auto w = start(o);
  std::vector<uint8_t> weight(100000);  // received into place
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<uint8_t>(i * 13);
  const Hash128 hash = hash128(weight);
  const std::vector<uint8_t> small(weight.begin(), weight.begin() + 5000);  // received whole
  {
    auto c = client(*w);
    const uint64_t b = c->alloc(weight.size());
    ASSERT_TRUE(c->set(b, 0, weight, kSetCacheable));
    ASSERT_TRUE(c->set(b, 0, {1, 2, 3}));  // an activation: not cached
    ASSERT_TRUE(c->set(b, 0, small, kSetCacheable));
    ASSERT_TRUE(c->sync());
  }
  EXPECT_TRUE(std::filesystem::exists(dir / hash128_hex(hash)));
  EXPECT_TRUE(std::filesystem::exists(dir / hash128_hex(hash128(small))));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2);
  auto c = client(*w);
  const uint64_t b = c->alloc(weight.size() + 8);
  ASSERT_NE(b, 0u);
  Result<Message> r =
      c->call(Command::kSetTensorHash, payload(SetTensorHashRequest{{b, 8, weight.size()}, hash}));
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(decode_set_tensor_hash_response(r->payload)->found);
  EXPECT_EQ(*c->get(b, 8, weight.size()), weight);
  // A region of another size is not that blob.
  r = c->call(Command::kSetTensorHash, payload(SetTensorHashRequest{{b, 0, 100}, hash}));
  EXPECT_FALSE(decode_set_tensor_hash_response(r->payload)->found);
  // A corrupted blob is not used, and is removed.
  {
    std::fstream f(dir / hash128_hex(hash), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put(static_cast<char>(weight[10] ^ 1));
  }
  r = c->call(Command::kSetTensorHash, payload(SetTensorHashRequest{{b, 8, weight.size()}, hash}));
  EXPECT_FALSE(decode_set_tensor_hash_response(r->payload)->found);
  EXPECT_FALSE(std::filesystem::exists(dir / hash128_hex(hash)));
  // Out-of-bounds region: an error before the cache is looked at.
  EXPECT_FALSE(c->call(Command::kSetTensorHash,
                       payload(SetTensorHashRequest{{b, 8, weight.size() + 1}, hash})));
  w.reset();
  std::filesystem::remove_all(dir);
}

// A client that goes silent after the handshake: its session is closed after the idle
// timeout and its buffers are freed; the worker goes on serving others.
TEST_P(WorkerTest, ASilentSessionIsClosedAndItsBuffersFreed) {
  WorkerOptions o;
  o.idle_timeout_ms = 300;
  auto w = start(o);
  auto c = client(*w);
  ASSERT_NE(c, nullptr);
  const uint64_t b = c->alloc(1 << 20);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(w->bytes_allocated(), uint64_t{1} << 20);
  wait_closed(*w);
  EXPECT_EQ(w->open_connections(), 0);
  EXPECT_EQ(w->bytes_allocated(), 0u);
  // The session is gone, and the connection says so: the call fails as closed (on seqpacket
  // its send already does, with EPIPE), not when its wait for the answer runs out.
  Result<std::vector<uint8_t>> gone = c->get(b, 0, 1);
  ASSERT_FALSE(gone);
  const std::string& why = gone.status().message();
  EXPECT_TRUE(why.find("closed") != std::string::npos ||
              why.find(std::strerror(EPIPE)) != std::string::npos)
      << why;
  expect_serves(*w);
}

// The idle timeout is offered in HELLO (for the client's keepalive); 0 means none, and then a
// silent session stays open.
TEST_P(WorkerTest, IdleTimeoutInHelloAndZeroMeansNone) {
  WorkerOptions o;
  o.idle_timeout_ms = 0;
  auto w = start(o);
  auto c = RawClient::connect(w->address());
  ASSERT_NE(c, nullptr);
  Result<HelloResponse> h = c->hello();
  ASSERT_TRUE(h);
  EXPECT_EQ(h->idle_timeout_ms, 0u);
  const uint64_t b = c->alloc(64);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(c->get(b, 0, 1));
  o.idle_timeout_ms = 4321;
  auto w2 = start(o);
  auto c2 = RawClient::connect(w2->address());
  ASSERT_NE(c2, nullptr);
  Result<HelloResponse> h2 = c2->hello();
  ASSERT_TRUE(h2);
  EXPECT_EQ(h2->idle_timeout_ms, 4321u);
}

TEST_P(WorkerTest, VanishingClients) {
  auto w = start();
  for (int cut = 0; cut < 3; ++cut) {
    auto c = client(*w);
    ASSERT_NE(c, nullptr);
    const uint64_t b = c->alloc(1 << 16);
    if (cut == 1) {
      ASSERT_TRUE(c->set(b, 0, std::vector<uint8_t>(1 << 16, 1)));
    }
    if (cut == 2) {
      // Leaves in the middle of a message: the header and part of the payload.
      Header h;
      h.command = Command::kGetTensor;
      ASSERT_TRUE(c->transport().send(h, {}));
    }
  }
  wait_closed(*w);
  EXPECT_EQ(w->bytes_allocated(), 0u);
  expect_serves(*w);
}

INSTANTIATE_TEST_SUITE_P(Transports, WorkerTest, ::testing::ValuesIn(test_transports()),
                         TestTransportName());

}  // namespace
}  // namespace strata::rpc
