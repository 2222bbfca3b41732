// Worker-to-worker hand-off: the HANDOFF_* codecs, and two in-process workers driven by a client
// (and by hostile peers) over TCP and over Unix seqpacket.
#include "rpc/handoff.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "graph/graph_testing.h"
#include "graph/serialize.h"
#include "rpc/auth.h"
#include "rpc/client.h"
#include "rpc/rpc_testing.h"
#include "rpc/worker.h"

namespace strata::rpc {
namespace {

std::vector<uint8_t> floats(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

// --- Codecs ------------------------------------------------------------------------------------

TEST(HandoffProtocol, RoundTrips) {
  HandoffConnectRequest c;
  c.link = 3;
  c.timeout_ms = 1500;
  c.session = 77;
  c.ticket[5] = 9;
  c.address = "127.0.0.1:5000";
  std::vector<uint8_t> b = payload(c);
  EXPECT_EQ(b.size(), 56 + c.address.size());
  Result<HandoffConnectRequest> c2 = decode_handoff_connect_request(b);
  ASSERT_TRUE(c2) << c2.status().message();
  EXPECT_EQ(c2->link, 3u);
  EXPECT_EQ(c2->timeout_ms, 1500u);
  EXPECT_EQ(c2->session, 77u);
  EXPECT_EQ(c2->ticket, c.ticket);
  EXPECT_EQ(c2->address, c.address);

  HandoffTicketResponse t{12, {}};
  t.ticket[31] = 1;
  b = payload(t);
  EXPECT_EQ(b.size(), 40u);
  ASSERT_TRUE(decode_handoff_ticket_response(b));
  EXPECT_EQ(decode_handoff_ticket_response(b)->ticket, t.ticket);
  EXPECT_EQ(payload(HandoffAttachRequest{12, t.ticket}).size(), 40u);

  HandoffData d;
  d.seq = 5;
  d.dst = {7, 64, 3};
  b = payload(d);
  EXPECT_EQ(b.size(), kHandoffDataPrefixBytes);
  b.insert(b.end(), {1, 2, 3});
  Result<HandoffData> d2 = decode_handoff_data(b);
  ASSERT_TRUE(d2) << d2.status().message();
  EXPECT_EQ(d2->seq, 5u);
  EXPECT_EQ(d2->dst, d.dst);
  EXPECT_EQ(std::vector<uint8_t>(d2->bytes.begin(), d2->bytes.end()),
            (std::vector<uint8_t>{1, 2, 3}));

  HandoffComputeRequest h;
  h.graph_id = 4;
  h.flags = kHandoffWait | kHandoffSend | kHandoffRecompute;
  h.timeout_ms = 100;
  h.link = 2;
  h.wait_seq = 8;
  h.wait_dst = {1, 0, 16};
  h.send_seq = 9;
  h.send_src = {2, 32, 16};
  h.send_dst = {3, 0, 16};
  b = payload(h);
  EXPECT_EQ(b.size(), kHandoffComputePrefixBytes);
  Result<HandoffComputeRequest> h2 = decode_handoff_compute_request(b);
  ASSERT_TRUE(h2) << h2.status().message();
  EXPECT_EQ(h2->flags, h.flags);
  EXPECT_EQ(h2->wait_dst, h.wait_dst);
  EXPECT_EQ(h2->send_src, h.send_src);
  EXPECT_EQ(h2->send_dst, h.send_dst);
  EXPECT_EQ(command_capability(Command::kHandoffCompute), kCapHandoff);
  EXPECT_STREQ(command_name(Command::kHandoffData), "HANDOFF_DATA");
}

TEST(HandoffProtocol, RejectsWhatDoesNotAddUp) {
  auto compute_error = [](HandoffComputeRequest h, std::vector<uint8_t> extra = {}) {
    std::vector<uint8_t> b = payload(h);
    b.insert(b.end(), extra.begin(), extra.end());
    Result<HandoffComputeRequest> r = decode_handoff_compute_request(b);
    return r ? std::string() : r.status().message();
  };
  HandoffComputeRequest ok;
  ok.flags = kHandoffWait;
  ok.timeout_ms = 10;
  ok.wait_seq = 1;
  ok.wait_dst = {1, 0, 4};
  EXPECT_EQ(compute_error(ok), "");
  HandoffComputeRequest h = ok;
  h.timeout_ms = 0;
  EXPECT_NE(compute_error(h).find("timeout_ms"), std::string::npos);
  h.timeout_ms = kMaxHandoffTimeoutMs + 1;
  EXPECT_NE(compute_error(h).find("timeout_ms"), std::string::npos);
  h = ok;
  h.flags |= 1 << 7;
  EXPECT_NE(compute_error(h).find("unknown bits"), std::string::npos);
  h = ok;
  h.flags |= kHandoffRecompute | kHandoffGraph;
  EXPECT_NE(compute_error(h).find("both"), std::string::npos);
  h = ok;
  h.send_seq = 3;  // a send part without its flag
  EXPECT_NE(compute_error(h).find("without kHandoffSend"), std::string::npos);
  h = ok;
  h.flags |= kHandoffSend;
  h.link = 1;
  h.send_src = {1, 0, 8};
  h.send_dst = {1, 0, 4};
  EXPECT_NE(compute_error(h).find("send_dst.size"), std::string::npos);
  EXPECT_NE(compute_error(ok, {1, 2}).find("without kHandoffGraph"), std::string::npos);
  h = ok;
  h.graph_id = 5;
  EXPECT_NE(compute_error(h).find("graph id without a graph"), std::string::npos);
  EXPECT_FALSE(decode_handoff_compute_request(std::vector<uint8_t>(103, 0)));

  HandoffData d;
  d.dst = {1, 0, 8};
  std::vector<uint8_t> b = payload(d);
  b.resize(b.size() + 7);  // one byte short of dst.size
  Result<HandoffData> short_data = decode_handoff_data(b);
  ASSERT_FALSE(short_data);
  EXPECT_NE(short_data.status().message().find("dst.size"), std::string::npos);
  d.status = static_cast<uint16_t>(WireStatus::kInternal);
  b = payload(d);
  b.resize(b.size() + kMaxErrorBytes + 1);
  EXPECT_FALSE(decode_handoff_data(b));

  HandoffConnectRequest c;
  c.link = 1;
  c.timeout_ms = 10;
  c.address = "";
  EXPECT_FALSE(decode_handoff_connect_request(payload(c)));
  c.address = std::string(kMaxAddressBytes + 1, 'a');
  EXPECT_FALSE(decode_handoff_connect_request(payload(c)));
  c.address = std::string("host\n:1");
  EXPECT_FALSE(decode_handoff_connect_request(payload(c)));
  c.address = "h:1";
  c.link = 0;
  EXPECT_FALSE(decode_handoff_connect_request(payload(c)));
}

// --- Workers -----------------------------------------------------------------------------------

std::string unix_address() {
  static int n = 0;
  return "unix:" + (std::filesystem::temp_directory_path() /
                    ("strata-ho-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
                       .string();
}

// A client session on one worker, through the real client connection.
class Session {
 public:
  explicit Session(const std::string& address, const std::string& token = "") {
    ClientOptions o;
    o.endpoint = address;
    o.name = "RPC0";
    o.token = token;
    o.timeout_ms = 30000;
    Result<std::shared_ptr<Connection>> c = Connection::open(o);
    EXPECT_TRUE(c) << c.status().message();
    if (c) conn_ = *c;
  }
  bool ok() const { return conn_ != nullptr; }
  Connection& conn() { return *conn_; }

  Result<Message> call(Command c, const std::vector<uint8_t>& head) {
    const Piece piece(head.data(), head.size());
    return conn_->call(c, std::span<const Piece>(&piece, head.empty() ? 0 : 1));
  }
  Status one_way(Command c, const std::vector<uint8_t>& head,
                 const std::vector<uint8_t>& data = {}) {
    const Piece pieces[2] = {Piece(head.data(), head.size()), Piece(data.data(), data.size())};
    return conn_->send_one_way(c, std::span<const Piece>(pieces, data.empty() ? 1 : 2), false);
  }
  uint64_t alloc(uint64_t size) {
    Result<Message> m = call(Command::kAllocBuffer, payload(AllocBufferRequest{size}));
    EXPECT_TRUE(m) << m.status().message();
    return m ? decode_alloc_buffer_response(m->payload)->handle : 0;
  }
  Status set(uint64_t buffer, uint64_t offset, const std::vector<uint8_t>& data) {
    SetTensorRequest req;
    req.region = {buffer, offset, data.size()};
    return one_way(Command::kSetTensor, payload(req), data);
  }
  Result<std::vector<uint8_t>> get(uint64_t buffer, uint64_t offset, uint64_t size) {
    STRATA_ASSIGN_OR_RETURN(
        Message m, call(Command::kGetTensor, payload(GetTensorRequest{{buffer, offset, size}})));
    return std::move(m.payload);
  }
  Status sync() { return call(Command::kSynchronize, {}).status(); }
  Result<HandoffTicketResponse> ticket() {
    STRATA_ASSIGN_OR_RETURN(Message m, call(Command::kHandoffTicket, {}));
    return decode_handoff_ticket_response(m.payload);
  }
  // HANDOFF_CONNECT of link `link` to `peer`'s session.
  Status connect(uint32_t link, const std::string& peer_address, const HandoffTicketResponse& t,
                 uint32_t timeout_ms = kLongMs) {
    HandoffConnectRequest req;
    req.link = link;
    req.timeout_ms = timeout_ms;
    req.session = t.session;
    req.ticket = t.ticket;
    req.address = peer_address;
    return call(Command::kHandoffConnect, payload(req)).status();
  }
  Status handoff(const HandoffComputeRequest& req, const std::vector<uint8_t>& graph = {}) {
    return one_way(Command::kHandoffCompute, payload(req), graph);
  }

 private:
  std::shared_ptr<Connection> conn_;
};

HandoffComputeRequest send_part(uint32_t link, uint64_t seq, Region src, Region dst) {
  HandoffComputeRequest r;
  r.flags = kHandoffSend;
  r.timeout_ms = kLongMs;
  r.link = link;
  r.send_seq = seq;
  r.send_src = src;
  r.send_dst = dst;
  return r;
}

HandoffComputeRequest wait_part(uint64_t seq, Region dst, uint32_t timeout_ms = kLongMs) {
  HandoffComputeRequest r;
  r.flags = kHandoffWait;
  r.timeout_ms = timeout_ms;
  r.wait_seq = seq;
  r.wait_dst = dst;
  return r;
}

// out = x + y, over three f32[4] tensors of `buf` at offsets 0, 16, 32.
std::vector<uint8_t> add_graph(uint64_t buf) { return graph_serialize(testing::add_graph(buf, 4)); }

// A peer that speaks the link's side of the protocol by hand: HELLO, HANDOFF_ATTACH, then
// whatever HANDOFF_DATA a test makes up.
class RawPeer {
 public:
  explicit RawPeer(const std::string& address) {
    Result<std::unique_ptr<Transport>> t = transport_connect(address, 10000);
    EXPECT_TRUE(t) << t.status().message();
    if (t) t_ = std::move(*t);
  }
  Status hello() {
    HelloRequest req;
    req.caps = kCapAll;
    STRATA_ASSIGN_OR_RETURN(Message m, call(Command::kHello, payload(req)));
    return decode_hello_response(m.payload).status();
  }
  Status attach(uint64_t session, const Ticket& ticket) {
    return call(Command::kHandoffAttach, payload(HandoffAttachRequest{session, ticket})).status();
  }
  // HELLO, then HANDOFF_ATTACH with the ticket `t`: a link as a worker opens it.
  Status join(const HandoffTicketResponse& t) {
    STRATA_RETURN_IF_ERROR(hello());
    return attach(t.session, t.ticket);
  }
  Status data(const HandoffData& d) {
    std::vector<uint8_t> head = payload(d);
    Header h;
    h.command = Command::kHandoffData;
    h.flags = kFlagOneWay;
    h.request_id = ++id_;
    const Piece pieces[2] = {Piece(head.data(), head.size()), d.bytes};
    return t_->send(h, pieces);
  }
  Result<Message> call(Command c, const std::vector<uint8_t>& p) {
    Header h;
    h.command = c;
    h.request_id = ++id_;
    STRATA_RETURN_IF_ERROR(send_message(*t_, h, p));
    STRATA_ASSIGN_OR_RETURN(Message m, t_->recv(10000));
    if (m.header.status != 0) {
      return status_from_wire(
          m.header.status,
          std::string_view(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    }
    return m;
  }
  // True when the worker has closed the connection.
  bool closed_by_worker() {
    Result<std::optional<Message>> m = t_->try_recv(10000, 10000);
    return !m.is_ok();
  }

 private:
  std::unique_ptr<Transport> t_;
  uint32_t id_ = 0;
};

class HandoffTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Worker> start(WorkerOptions o = {}) {
    o.address = GetParam() ? unix_address() : "127.0.0.1:0";
    o.log = false;
    if (o.memory_limit == 0) o.memory_limit = 64 << 20;
    Result<std::unique_ptr<Worker>> w = Worker::start(o);
    EXPECT_TRUE(w) << w.status().message();
    return w ? std::move(*w) : nullptr;
  }
};

// Stage A computes x + y and hands the sum to stage B, which adds z: the client reads only B.
TEST_P(HandoffTest, OutputGoesStraightIntoTheNextStage) {
  auto wa = start();
  auto wb = start();
  Session a(wa->address()), b(wb->address());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a.conn().has(kCapHandoff));
  const uint64_t ba = a.alloc(48), bb = b.alloc(48);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t) << t.status().message();
  Result<HandoffTicketResponse> again = b.ticket();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->ticket, t->ticket) << "one ticket per connection";
  ASSERT_TRUE(a.connect(1, wb->address(), *t)) << "link";

  for (uint64_t seq = 1; seq <= 3; ++seq) {
    const float s = static_cast<float>(seq);
    ASSERT_TRUE(a.set(ba, 0, floats({1, 2, 3, 4})));
    ASSERT_TRUE(a.set(ba, 16, floats({s, s, s, s})));
    HandoffComputeRequest ra = send_part(1, seq, {ba, 32, 16}, {bb, 0, 16});
    ra.graph_id = 9;
    ra.flags |= seq == 1 ? kHandoffGraph : kHandoffRecompute;
    ASSERT_TRUE(a.handoff(ra, seq == 1 ? add_graph(ba) : std::vector<uint8_t>{}));
    ASSERT_TRUE(b.set(bb, 16, floats({10, 20, 30, 40})));
    HandoffComputeRequest rb = wait_part(seq, {bb, 0, 16});
    rb.graph_id = 9;
    rb.flags |= seq == 1 ? kHandoffGraph : kHandoffRecompute;
    ASSERT_TRUE(b.handoff(rb, seq == 1 ? add_graph(bb) : std::vector<uint8_t>{}));
    Result<std::vector<uint8_t>> out = b.get(bb, 32, 16);
    ASSERT_TRUE(out) << out.status().message();
    EXPECT_EQ(*out, floats({11 + s, 22 + s, 33 + s, 44 + s})) << "step " << seq;
  }
  EXPECT_TRUE(a.sync());
  EXPECT_EQ(a.conn().stats().snapshot().commands[static_cast<int>(Command::kGetTensor)].count, 0u)
      << "nothing of A's output came back to the client";
}

// Hand-offs of several steps may land in any order (pipeline groups share the connections);
// each wait takes its own.
TEST_P(HandoffTest, StepsLandInAnyOrder) {
  auto wa = start();
  auto wb = start();
  Session a(wa->address()), b(wb->address());
  const uint64_t ba = a.alloc(32), bb = b.alloc(32);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t);
  ASSERT_TRUE(a.connect(4, wb->address(), *t));
  ASSERT_TRUE(a.set(ba, 0, {1, 1, 1, 1}));
  ASSERT_TRUE(a.set(ba, 4, {2, 2, 2, 2}));
  ASSERT_TRUE(a.handoff(send_part(4, 11, {ba, 4, 4}, {bb, 4, 4})));
  ASSERT_TRUE(a.handoff(send_part(4, 10, {ba, 0, 4}, {bb, 0, 4})));
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.handoff(wait_part(10, {bb, 0, 4})));
  ASSERT_TRUE(b.handoff(wait_part(11, {bb, 4, 4})));
  Result<std::vector<uint8_t>> got = b.get(bb, 0, 8);
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(*got, (std::vector<uint8_t>{1, 1, 1, 1, 2, 2, 2, 2}));
}

// An error of the sending stage goes on to the waiting stage at once, as the error of that step,
// whether the computation failed or was skipped behind an earlier error of its stream.
TEST_P(HandoffTest, TheSendersErrorReachesTheWaitingStage) {
  auto wa = start();
  auto wb = start();
  Session a(wa->address()), b(wb->address());
  const uint64_t ba = a.alloc(48), bb = b.alloc(48);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t);
  ASSERT_TRUE(a.connect(1, wb->address(), *t));
  // A graph id never sent: the computation fails on A.
  HandoffComputeRequest ra = send_part(1, 1, {ba, 32, 16}, {bb, 0, 16});
  ra.graph_id = 42;
  ra.flags |= kHandoffRecompute;
  ASSERT_TRUE(a.handoff(ra));
  ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 16})));
  Status s = b.sync();
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("step 1 from peer"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no graph 42"), std::string::npos) << s.message();
  // A's own error is reported to A's stream too.
  Status sa = a.sync();
  EXPECT_NE(sa.message().find("no graph 42"), std::string::npos) << sa.message();

  // A sticky error (a write out of bounds) makes A skip the next computation: its send carries
  // the error on.
  ASSERT_TRUE(a.set(ba, 40, floats({1, 2, 3, 4})));
  ASSERT_TRUE(a.handoff(send_part(1, 2, {ba, 0, 16}, {bb, 0, 16})));
  ASSERT_TRUE(b.handoff(wait_part(2, {bb, 0, 16})));
  s = b.sync();
  EXPECT_NE(s.message().find("past the end of buffer"), std::string::npos) << s.message();
  EXPECT_FALSE(a.sync());
  // Both streams work again afterwards.
  ASSERT_TRUE(a.set(ba, 0, floats({5, 6, 7, 8})));
  ASSERT_TRUE(a.handoff(send_part(1, 3, {ba, 0, 16}, {bb, 0, 16})));
  ASSERT_TRUE(b.handoff(wait_part(3, {bb, 0, 16})));
  EXPECT_EQ(*b.get(bb, 0, 16), floats({5, 6, 7, 8}));
}

// The receiving session checks every hand-off as it checks a client's write: the region the
// step expects, and the session's own buffers.
TEST_P(HandoffTest, AHandOffIsCheckedLikeAnyWrite) {
  auto wa = start();
  auto wb = start();
  Session a(wa->address()), b(wb->address());
  const uint64_t ba = a.alloc(32), bb = b.alloc(32);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t);
  ASSERT_TRUE(a.connect(1, wb->address(), *t));
  // Another place than the wait expects.
  ASSERT_TRUE(a.handoff(send_part(1, 1, {ba, 0, 8}, {bb, 8, 8})));
  ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 8})));
  Status s = b.sync();
  EXPECT_NE(s.message().find("where the computation expects"), std::string::npos) << s.message();
  // A buffer that is not the session's, named by both sides.
  ASSERT_TRUE(a.handoff(send_part(1, 2, {ba, 0, 8}, {999999, 0, 8})));
  ASSERT_TRUE(b.handoff(wait_part(2, {999999, 0, 8})));
  s = b.sync();
  EXPECT_NE(s.message().find("is not a buffer of this connection"), std::string::npos)
      << s.message();
  // Past the end of the receiving buffer.
  ASSERT_TRUE(a.handoff(send_part(1, 3, {ba, 0, 8}, {bb, 28, 8})));
  ASSERT_TRUE(b.handoff(wait_part(3, {bb, 28, 8})));
  s = b.sync();
  EXPECT_NE(s.message().find("past the end of buffer"), std::string::npos) << s.message();
  // The sender checks its own region.
  ASSERT_TRUE(a.handoff(send_part(1, 4, {ba, 30, 8}, {bb, 0, 8})));
  s = a.sync();
  EXPECT_NE(s.message().find("send_src"), std::string::npos) << s.message();
  // A wait on a session that never issued a ticket, a send on a link never opened.
  ASSERT_TRUE(a.handoff(wait_part(1, {ba, 0, 8})));
  s = a.sync();
  EXPECT_NE(s.message().find("no ticket"), std::string::npos) << s.message();
  ASSERT_TRUE(a.handoff(send_part(7, 1, {ba, 0, 8}, {bb, 0, 8})));
  s = a.sync();
  EXPECT_NE(s.message().find("no link 7"), std::string::npos) << s.message();
  // HANDOFF_DATA from a client session is refused.
  HandoffData d;
  d.dst = {ba, 0, 1};
  std::vector<uint8_t> head = payload(d);
  ASSERT_TRUE(a.one_way(Command::kHandoffData, head, {1}));
  s = a.sync();
  EXPECT_NE(s.message().find("not a hand-off link"), std::string::npos) << s.message();
  EXPECT_TRUE(b.sync());
}

// Hostile peers: an unknown session or a wrong ticket is refused and the connection closed; a
// malformed or duplicated hand-off closes the link, and the step waiting for it fails.
TEST_P(HandoffTest, HostilePeers) {
  auto wb = start();
  Session b(wb->address());
  const uint64_t bb = b.alloc(16);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t);
  {
    RawPeer p(wb->address());
    ASSERT_TRUE(p.hello());
    Status s = p.attach(t->session + 100, t->ticket);
    EXPECT_NE(s.message().find("no session"), std::string::npos) << s.message();
    EXPECT_TRUE(p.closed_by_worker());
  }
  {
    RawPeer p(wb->address());
    ASSERT_TRUE(p.hello());
    Ticket wrong = t->ticket;
    wrong[0] ^= 1;
    Status s = p.attach(t->session, wrong);
    EXPECT_NE(s.message().find("wrong ticket"), std::string::npos) << s.message();
    EXPECT_TRUE(p.closed_by_worker());
  }
  {
    // A connection that holds buffers cannot become a link.
    Session c(wb->address());
    (void)c.alloc(8);
    Status s = c.call(Command::kHandoffAttach, payload(HandoffAttachRequest{t->session, t->ticket}))
                   .status();
    EXPECT_NE(s.message().find("only a fresh connection"), std::string::npos) << s.message();
  }
  {
    // A duplicated step closes the link; the wait for the next step says why.
    RawPeer p(wb->address());
    ASSERT_TRUE(p.join(*t));
    const std::vector<uint8_t> four = {1, 2, 3, 4};
    HandoffData d;
    d.seq = 1;
    d.dst = {bb, 0, 4};
    d.bytes = four;
    ASSERT_TRUE(p.data(d));
    ASSERT_TRUE(p.data(d));
    EXPECT_TRUE(p.closed_by_worker());
    ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 4})));
    EXPECT_EQ(*b.get(bb, 0, 4), four) << "the first delivery stands";
    ASSERT_TRUE(b.handoff(wait_part(2, {bb, 0, 4}, kLongMs)));
    Status s = b.sync();
    EXPECT_NE(s.message().find("no link from the previous stage's worker is open"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("delivered twice"), std::string::npos) << s.message();
  }
  {
    // A size that does not match its data closes the link.
    RawPeer p(wb->address());
    ASSERT_TRUE(p.join(*t));
    const std::vector<uint8_t> three = {1, 2, 3};
    HandoffData d;
    d.seq = 3;
    d.dst = {bb, 0, 4};
    d.bytes = three;
    ASSERT_TRUE(p.data(d));
    EXPECT_TRUE(p.closed_by_worker());
    ASSERT_TRUE(b.handoff(wait_part(3, {bb, 0, 4}, kLongMs)));
    Status s = b.sync();
    EXPECT_NE(s.message().find("dst.size"), std::string::npos) << s.message();
  }
  {
    // A peer cannot make a session hold more than kMaxHandoffPending hand-offs.
    RawPeer p(wb->address());
    ASSERT_TRUE(p.join(*t));
    const std::vector<uint8_t> one = {7};
    HandoffData d;
    d.dst = {bb, 8, 1};
    d.bytes = one;
    for (uint32_t i = 0; i <= kMaxHandoffPending; ++i) {
      d.seq = 100 + i;
      if (!p.data(d)) break;
    }
    EXPECT_TRUE(p.closed_by_worker());
    ASSERT_TRUE(b.handoff(wait_part(999, {bb, 0, 4}, kLongMs)));
    Status s = b.sync();
    EXPECT_NE(s.message().find("limit " + std::to_string(kMaxHandoffPending)), std::string::npos)
        << s.message();
  }
  {
    // A link carries hand-offs only.
    RawPeer p(wb->address());
    ASSERT_TRUE(p.join(*t));
    EXPECT_FALSE(p.call(Command::kAllocBuffer, payload(AllocBufferRequest{8})));
    EXPECT_TRUE(p.closed_by_worker());
  }
  EXPECT_TRUE(b.sync());
  EXPECT_EQ(*b.get(bb, 0, 4), (std::vector<uint8_t>{1, 2, 3, 4}));
}

// A peer that stalls fails the step at the wait's timeout, one that leaves at once; a late
// hand-off of a step that gave up is dropped, not held.
TEST_P(HandoffTest, AStalledOrLostPeerFailsTheStep) {
  auto wb = start();
  Session b(wb->address());
  const uint64_t bb = b.alloc(16);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t);
  RawPeer p(wb->address());
  ASSERT_TRUE(p.join(*t));
  ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 4}, 200)));
  Status s = b.sync();
  EXPECT_NE(s.message().find("did not arrive within 200 ms"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1 link(s) from it open"), std::string::npos) << s.message();
  // Step 1 lands late: dropped. Step 2 then arrives and is taken.
  const std::vector<uint8_t> late = {9, 9, 9, 9}, good = {5, 6, 7, 8};
  HandoffData d;
  d.seq = 1;
  d.dst = {bb, 0, 4};
  d.bytes = late;
  ASSERT_TRUE(p.data(d));
  d.seq = 2;
  d.bytes = good;
  ASSERT_TRUE(p.data(d));
  ASSERT_TRUE(b.handoff(wait_part(2, {bb, 0, 4})));
  EXPECT_EQ(*b.get(bb, 0, 4), good);
  ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 4}, 200)));
  EXPECT_NE(b.sync().message().find("did not arrive"), std::string::npos) << "not held";
  p = RawPeer(wb->address());  // the old link goes away
  ASSERT_TRUE(b.handoff(wait_part(3, {bb, 0, 4}, kLongMs)));
  s = b.sync();
  EXPECT_NE(s.message().find("cannot arrive"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("one closed"), std::string::npos) << s.message();
  // A new link: waits wait again.
  ASSERT_TRUE(p.hello());
  ASSERT_TRUE(p.attach(t->session, t->ticket));
  d.seq = 4;
  ASSERT_TRUE(p.data(d));
  ASSERT_TRUE(b.handoff(wait_part(4, {bb, 0, 4})));
  EXPECT_TRUE(b.sync());
}

// A worker stopping while a session waits for a hand-off ends the wait.
TEST_P(HandoffTest, StopEndsAWait) {
  auto wb = start();
  Session b(wb->address());
  const uint64_t bb = b.alloc(16);
  ASSERT_TRUE(b.ticket());
  ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 4}, kMaxHandoffTimeoutMs)));
  auto stopped = std::async(std::launch::async, [&] { wb->stop(); });
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "stop() hangs on a session that waits for a hand-off";
}

// Tokens: a worker opens its links with its own token; a peer that requires a token refuses a
// worker without one, with a hint.
TEST_P(HandoffTest, LinksAuthenticateWithTheWorkersOwnToken) {
  WorkerOptions o;
  o.auth_token = "sesame";
  auto wa = start(o);
  auto wb = start(o);
  WorkerOptions open;
  auto wc = start(open);
  Session a(wa->address(), "sesame"), b(wb->address(), "sesame"), c(wc->address());
  const uint64_t ba = a.alloc(16), bb = b.alloc(16);
  Result<HandoffTicketResponse> t = b.ticket();
  ASSERT_TRUE(t);
  ASSERT_TRUE(a.connect(1, wb->address(), *t));
  ASSERT_TRUE(a.set(ba, 0, {4, 3, 2, 1}));
  ASSERT_TRUE(a.handoff(send_part(1, 1, {ba, 0, 4}, {bb, 0, 4})));
  ASSERT_TRUE(b.handoff(wait_part(1, {bb, 0, 4})));
  EXPECT_EQ(*b.get(bb, 0, 4), (std::vector<uint8_t>{4, 3, 2, 1}));
  Status s = c.connect(1, wb->address(), *t);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("same --auth-token-file"), std::string::npos) << s.message();
  // Nothing listening: an error naming the address.
  s = c.connect(2, GetParam() ? unix_address() : "127.0.0.1:1", *t, 2000);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("hand-off link to"), std::string::npos) << s.message();
}

TEST_P(HandoffTest, HiddenCapability) {
  WorkerOptions o;
  o.hide_caps = kCapHandoff;
  auto w = start(o);
  Session c(w->address());
  EXPECT_FALSE(c.conn().has(kCapHandoff));
  Result<Message> m = c.call(Command::kHandoffTicket, {});
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("not offered"), std::string::npos) << m.status().message();
}

INSTANTIATE_TEST_SUITE_P(Transports, HandoffTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Seqpacket" : "Tcp";
                         });

}  // namespace
}  // namespace strata::rpc
