// The remote backend against an in-process worker (the real one, over loopback TCP), and
// against scripted fake workers for what a real one does not do on purpose: another protocol
// version, silence, a reply of the wrong size.
#include "rpc/remote_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "rpc/worker.h"
#include "unit/synth_file.h"

namespace strata::rpc {
namespace {

std::string model_path() {
  SynthParams p;
  p.n_embd = 128;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 300;
  p.dtype = DType::kQ8_0;
  p.seed = 5;
  return strata::testing::synth_file("remote", p);
}

std::unique_ptr<Worker> start_worker() {
  WorkerOptions o;
  o.address = "127.0.0.1:0";
  o.n_threads = 2;
  o.log = false;
  auto w = Worker::start(o);
  EXPECT_TRUE(w.is_ok()) << w.status().message();
  return w.is_ok() ? std::move(w).value() : nullptr;
}

ClientOptions client(const std::string& endpoint, int timeout_ms = 30000) {
  ClientOptions o;
  o.endpoint = endpoint;
  o.name = "RPC0";
  o.timeout_ms = timeout_ms;
  o.connect_timeout_ms = 5000;
  return o;
}

std::unique_ptr<Engine> engine_on(std::unique_ptr<Device> device) {
  auto model = Model::open(model_path());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::move(device));
  EngineOptions eo;
  eo.split = {1};
  auto e = Engine::create(std::move(model).value(), std::move(devices), eo);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// Greedy steps of one sequence; every logit row, bytewise.
std::vector<uint8_t> generate(Context& ctx, int seed, int n_gen) {
  std::vector<uint8_t> bytes;
  Batch b;
  for (int i = 0; i < 7; ++i) b.add(3 + (seed * 31 + i * 7) % 290, i, 0, i == 6);
  for (int step = 0; step < n_gen; ++step) {
    Status s = ctx.decode(b);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) return bytes;
    const float* l = ctx.logits(0);
    const auto* p = reinterpret_cast<const uint8_t*>(l);
    bytes.insert(bytes.end(), p, p + 4 * ctx.n_vocab());
    int32_t best = 0;
    for (int64_t i = 1; i < ctx.n_vocab(); ++i) best = l[i] > l[best] ? int32_t(i) : best;
    b.clear();
    b.add(best, ctx.seq_len(0), 0, true);
  }
  return bytes;
}

std::unique_ptr<Context> context(const Engine& e) {
  ContextParams cp;
  cp.n_ctx = 128;
  auto c = Context::create(e, cp);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

TEST(RemoteBackend, TwoContextsOnOneConnectionFromTwoThreadsGiveTheLocalBytes) {
  CpuDeviceOptions co;
  co.n_threads = 2;
  auto local = engine_on(cpu_device_new(co));
  ASSERT_TRUE(local);
  auto lc = context(*local);
  const std::vector<uint8_t> ref0 = generate(*lc, 0, 12);
  lc->clear();
  const std::vector<uint8_t> ref1 = generate(*lc, 1, 12);

  auto worker = start_worker();
  ASSERT_TRUE(worker);
  auto device = remote_device_new(client(worker->address()));
  ASSERT_TRUE(device.is_ok()) << device.status().message();
  auto remote = engine_on(std::move(device).value());
  ASSERT_TRUE(remote);
  auto c0 = context(*remote);
  auto c1 = context(*remote);
  std::vector<uint8_t> got0, got1;
  // Both contexts drive the one connection at once: the messages of one must never
  // interleave with the other's on the wire.
  std::thread t0([&] { got0 = generate(*c0, 0, 12); });
  std::thread t1([&] { got1 = generate(*c1, 1, 12); });
  t0.join();
  t1.join();
  EXPECT_EQ(got0, ref0);
  EXPECT_EQ(got1, ref1);
}

// An in-process worker, an engine on it, and the engine's connection to it (for its counters).
struct OnWorker {
  std::unique_ptr<Worker> worker;
  std::shared_ptr<Connection> conn;
  std::unique_ptr<Engine> engine;
  bool ok() const { return worker && conn && engine; }
};
OnWorker engine_on_worker() {
  OnWorker w;
  w.worker = start_worker();
  if (!w.worker) return w;
  auto device = remote_device_new(client(w.worker->address()));
  EXPECT_TRUE(device.is_ok()) << device.status().message();
  if (!device.is_ok()) return w;
  w.conn = remote_device_connection(**device);
  w.engine = engine_on(std::move(device).value());
  return w;
}

TEST(RemoteBackend, ADecodeStepIsOneRoundTripAndThreeMessages) {
  OnWorker w = engine_on_worker();
  ASSERT_TRUE(w.ok());
  auto ctx = context(*w.engine);
  generate(*ctx, 0, 2);  // the prompt and a first decode step: buffers and graphs exist
  const StatsSnapshot before = w.conn->stats().snapshot();
  Batch b;
  for (int step = 0; step < 5; ++step) {
    b.clear();
    b.add(7, ctx->seq_len(0), 0, true);
    ASSERT_TRUE(ctx->decode(b).is_ok());
  }
  const StatsSnapshot d = w.conn->stats().snapshot() - before;
  EXPECT_EQ(d.steps, 5u);
  EXPECT_EQ(d.step_messages, 15u);
  EXPECT_EQ(d.step_round_trips, 5u);
  EXPECT_EQ(d.round_trips, 5u) << "nothing but the step's read waits for the worker";
  EXPECT_EQ(d.commands[static_cast<int>(Command::kGraphRecompute)].count, 5u);
  EXPECT_EQ(d.commands[static_cast<int>(Command::kGetTensors)].count, 5u);
}

// Two streams of one device (as two contexts of one model share a connection): a failed
// write of stream A is A's error only. Without kCapStreams (an old worker or client) the
// connection is one stream and B sees A's error, as before stream ids existed.
TEST(RemoteBackend, AStreamsErrorStaysWithThatStream) {
  auto worker = start_worker();
  ASSERT_TRUE(worker);
  for (bool streams : {true, false}) {
    SCOPED_TRACE(streams ? "with stream ids" : "without stream ids");
    ClientOptions o = client(worker->address());
    if (!streams) o.hide_caps = kCapStreams;
    auto d = remote_device_new(o);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(remote_device_connection(**d)->has(kCapStreams), streams);
    auto buf = (*d)->alloc_buffer(64);
    ASSERT_TRUE(buf.is_ok()) << buf.status().message();
    const uint64_t h = (*buf)->handle();
    auto a = (*d)->create_stream();
    auto b = (*d)->create_stream();
    const float bad[4] = {1, 2, 3, 4};
    a->set_tensor(make_tensor(h, 56, DType::kF32, 4), bad, sizeof(bad));  // past the end
    a->flush();
    const float x[4] = {5, 6, 7, 8};
    float got[4] = {};
    b->set_tensor(make_tensor(h, 0, DType::kF32, 4), x, sizeof(x));
    b->get_tensor(make_tensor(h, 0, DType::kF32, 4), got, sizeof(got));
    Status sb = b->synchronize();
    Status sa = a->synchronize();
    if (streams) {
      ASSERT_TRUE(sb.is_ok()) << sb.message();
      EXPECT_EQ(std::memcmp(got, x, sizeof(x)), 0);
      ASSERT_FALSE(sa.is_ok());
      EXPECT_NE(sa.message().find("past the end"), std::string::npos) << sa.message();
    } else {
      ASSERT_FALSE(sb.is_ok());
      EXPECT_NE(sb.message().find("past the end"), std::string::npos) << sb.message();
    }
    // Reported once: both streams work again (without stream ids, B's write was skipped).
    b->set_tensor(make_tensor(h, 0, DType::kF32, 4), x, sizeof(x));
    EXPECT_TRUE(b->synchronize().is_ok());
    a->get_tensor(make_tensor(h, 0, DType::kF32, 4), got, sizeof(got));
    EXPECT_TRUE(a->synchronize().is_ok());
    EXPECT_EQ(std::memcmp(got, x, sizeof(x)), 0);
  }
}

// A device left idle (a server between requests) keeps its session, and so its buffers, on a
// worker that closes idle sessions: the client sends a keepalive well within the timeout.
TEST(RemoteBackend, AnIdleDeviceKeepsItsSession) {
  WorkerOptions wo;
  wo.address = "127.0.0.1:0";
  wo.log = false;
  wo.idle_timeout_ms = 800;
  auto w = Worker::start(wo);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  auto d = remote_device_new(client((*w)->address()));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto buf = (*d)->alloc_buffer(4096);
  ASSERT_TRUE(buf.is_ok()) << buf.status().message();
  auto stream = (*d)->create_stream();
  const float x[4] = {1, 2, 3, 4};
  stream->set_tensor(make_tensor((*buf)->handle(), 0, DType::kF32, 4), x, sizeof(x));
  ASSERT_TRUE(stream->synchronize().is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // three idle timeouts
  EXPECT_EQ((*w)->open_connections(), 1);
  EXPECT_EQ((*w)->bytes_allocated(), 4096u);
  float got[4] = {};
  stream->get_tensor(make_tensor((*buf)->handle(), 0, DType::kF32, 4), got, sizeof(got));
  Status s = stream->synchronize();
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(std::memcmp(got, x, sizeof(x)), 0);
  EXPECT_GT(
      remote_device_connection(**d)->stats().snapshot().commands[int(Command::kDeviceInfo)].count,
      1u);
}

// A fake worker: accepts one connection and answers each message with the responses `reply`
// puts in `out` (none, or several, which may answer earlier messages).
class FakeWorker {
 public:
  using Reply = std::function<bool(const Message& in, Header* out, std::vector<uint8_t>* payload)>;
  using Replies = std::function<void(const Message& in, std::vector<Message>* out)>;
  explicit FakeWorker(Replies reply) : reply_(std::move(reply)) {
    auto l = transport_listen("127.0.0.1:0");
    EXPECT_TRUE(l.is_ok()) << l.status().message();
    listener_ = std::move(l).value();
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeWorker() {
    listener_->shutdown();
    if (conn_) conn_->shutdown();
    thread_.join();
  }
  std::string address() const { return listener_->address(); }

  // The response header to `in`.
  static Header response_to(const Header& in) {
    Header h;
    h.command = in.command;
    h.flags = kFlagResponse;
    h.request_id = in.request_id;
    return h;
  }

 private:
  void serve() {
    auto t = listener_->accept(10000);
    if (!t.is_ok()) return;
    conn_ = std::move(t).value();
    for (;;) {
      auto m = conn_->recv(-1);
      if (!m.is_ok()) return;
      std::vector<Message> out;
      reply_(*m, &out);
      for (const Message& r : out) {
        if (!send_message(*conn_, r.header, r.payload).is_ok()) return;
      }
    }
  }

  Replies reply_;
  std::unique_ptr<Listener> listener_;
  std::shared_ptr<Transport> conn_;
  std::thread thread_;
};

// Answers HELLO (as `major`), DEVICE_INFO and ALLOC_BUFFER like a worker; the rest to `other`.
FakeWorker::Replies handshake_then(uint16_t major, FakeWorker::Replies other) {
  return [major, other](const Message& in, std::vector<Message>* out) {
    Message r;
    r.header = FakeWorker::response_to(in.header);
    switch (in.header.command) {
      case Command::kHello: {
        HelloResponse h;
        h.major = major;
        h.caps = kCapAll;
        encode(h, &r.payload);
        break;
      }
      case Command::kDeviceInfo: {
        DeviceInfo info;
        info.name = "fake";
        info.memory_total = info.memory_free = 1 << 30;
        encode(info, &r.payload);
        break;
      }
      case Command::kAllocBuffer:
        encode(AllocBufferResponse{7, 64 << 20}, &r.payload);
        break;
      default:
        other(in, out);
        return;
    }
    out->push_back(std::move(r));
  };
}

// The same, with `other` answering one message at a time (or not at all when it returns false).
FakeWorker::Replies handshake(uint16_t major, FakeWorker::Reply other) {
  return handshake_then(major, [other](const Message& in, std::vector<Message>* out) {
    Message r;
    r.header = FakeWorker::response_to(in.header);
    if (other(in, &r.header, &r.payload)) out->push_back(std::move(r));
  });
}

// Weights are offered by hash without waiting for each answer: a worker that answers the
// probes only once it holds eight of them still gets the whole upload, and within one round
// trip. A client that waited for each answer would time out on the first.
TEST(RemoteBackend, WeightProbesArePipelined) {
  constexpr int kBlobs = 8;
  std::vector<Message> held;
  int most_held = 0;
  FakeWorker fake(handshake_then(kVersionMajor, [&](const Message& in, std::vector<Message>* out) {
    if (in.header.command == Command::kSetTensorHash) {
      Message r;
      r.header = FakeWorker::response_to(in.header);
      encode(SetTensorHashResponse{true}, &r.payload);
      held.push_back(std::move(r));
      most_held = std::max(most_held, static_cast<int>(held.size()));
      if (held.size() == kBlobs) out->swap(held);
    } else if (in.header.command == Command::kSynchronize) {
      out->push_back({FakeWorker::response_to(in.header), {}});
    }
  }));
  auto d = remote_device_new(client(fake.address(), 2000));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  std::shared_ptr<Connection> conn = remote_device_connection(**d);
  auto buf = (*d)->alloc_buffer(kBlobs * kHashMinBytes);
  ASSERT_TRUE(buf.is_ok()) << buf.status().message();
  std::vector<uint8_t> weights(kBlobs * kHashMinBytes);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>(i * 7 / 5);
  auto stream = (*d)->create_stream();
  for (int i = 0; i < kBlobs; ++i) {
    stream->set_tensor_weights(
        make_tensor((*buf)->handle(), i * kHashMinBytes, DType::kI8, kHashMinBytes),
        weights.data() + i * kHashMinBytes, kHashMinBytes);
  }
  Status s = stream->synchronize();
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(most_held, kBlobs);
  const StatsSnapshot st = conn->stats().snapshot();
  EXPECT_EQ(st.weight_bytes_cached, kBlobs * kHashMinBytes);
  EXPECT_EQ(st.weight_bytes_sent, 0u);
}

// The device reports what its worker announced; an older worker (no kCapOpCaps) runs the
// baseline, and so does a worker seen through a client that does not read the lists.
// Buffer::clear sets every byte, on the CPU and through a worker (BUFFER_CLEAR), whatever was
// written before.
TEST(RemoteBackend, ClearSetsEveryByteOfALocalAndARemoteBuffer) {
  auto w = start_worker();
  ASSERT_NE(w, nullptr);
  auto remote = remote_device_new(client(w->address()));
  ASSERT_TRUE(remote) << remote.status().message();
  std::unique_ptr<Device> devices[] = {cpu_device_new({}), std::move(remote).value()};
  for (auto& d : devices) {
    SCOPED_TRACE(d->info().name);
    const uint64_t size = (uint64_t{3} << 20) + 5;
    auto b = d->alloc_buffer(size);
    ASSERT_TRUE(b) << b.status().message();
    auto s = d->create_stream();
    const TensorRef all = make_tensor((*b)->handle(), 0, DType::kI8, static_cast<int64_t>(size));
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
    s->set_tensor(all, bytes.data(), size);
    ASSERT_TRUE(s->synchronize().is_ok());
    for (const uint8_t value : {uint8_t{0x5a}, uint8_t{0}}) {
      ASSERT_TRUE((*b)->clear(value).is_ok());
      std::vector<uint8_t> back(size, static_cast<uint8_t>(value + 1));
      s->get_tensor(all, back.data(), size);
      ASSERT_TRUE(s->synchronize().is_ok());
      EXPECT_EQ(std::count(back.begin(), back.end(), value), static_cast<ptrdiff_t>(size))
          << "value " << int(value);
    }
  }
  // A CPU buffer over memory it did not allocate (a mapped weight file) is never written.
  std::vector<uint8_t> theirs(4096, 7);
  auto over = devices[0]->buffer_from_host(theirs.data(), theirs.size());
  ASSERT_TRUE(over) << over.status().message();
  EXPECT_EQ((*over)->clear(0).kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(std::count(theirs.begin(), theirs.end(), 7), 4096);
}

TEST(RemoteBackend, AContextClearsItsKvCacheOnTheWorkerWhenMade) {
  OnWorker w = engine_on_worker();
  ASSERT_TRUE(w.ok());
  const StatsSnapshot before = w.conn->stats().snapshot();
  auto ctx = context(*w.engine);
  ASSERT_TRUE(ctx);
  const StatsSnapshot d = w.conn->stats().snapshot() - before;
  EXPECT_EQ(d.commands[static_cast<int>(Command::kBufferClear)].count, 1u) << "one stage, one KV";
}

TEST(RemoteBackend, CapabilitiesComeFromTheWorker) {
  WorkerOptions o;
  o.address = "127.0.0.1:0";
  o.log = false;
  o.hide_ops.set(static_cast<uint32_t>(Op::kSwiglu));
  auto w = Worker::start(o);
  ASSERT_TRUE(w) << w.status().message();
  auto d = remote_device_new(client((*w)->address()));
  ASSERT_TRUE(d) << d.status().message();
  DeviceCaps want = cpu_device_caps();
  want.ops.reset(static_cast<uint32_t>(Op::kSwiglu));
  EXPECT_EQ((*d)->caps().ops, want.ops);
  EXPECT_EQ((*d)->caps().weight_dtypes, want.weight_dtypes);

  ClientOptions blind = client((*w)->address());
  blind.hide_caps = kCapOpCaps;
  d = remote_device_new(blind);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ((*d)->caps().ops, device_caps_baseline().ops);
  EXPECT_EQ((*d)->caps().weight_dtypes, device_caps_baseline().weight_dtypes);

  o.hide_caps = kCapOpCaps;
  auto old = Worker::start(o);
  ASSERT_TRUE(old) << old.status().message();
  d = remote_device_new(client((*old)->address()));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ((*d)->caps().ops, device_caps_baseline().ops);
}

TEST(RemoteBackend, RefusesAWorkerOfAnotherMajorVersion) {
  FakeWorker fake(handshake(kVersionMajor + 1, [](auto&&...) { return false; }));
  auto d = remote_device_new(client(fake.address()));
  ASSERT_FALSE(d.is_ok());
  const std::string& m = d.status().message();
  EXPECT_NE(m.find("speaks protocol " + std::to_string(kVersionMajor + 1) + ".0"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("this client " + std::to_string(kVersionMajor) + ".0"), std::string::npos) << m;
  EXPECT_NE(m.find(fake.address()), std::string::npos) << m;
}

TEST(RemoteBackend, ASilentWorkerFailsTheReadAfterTheTimeoutAndTheDeviceStaysFailed) {
  FakeWorker fake(handshake(kVersionMajor, [](auto&&...) { return false; }));
  auto d = remote_device_new(client(fake.address(), 200));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto buf = (*d)->alloc_buffer(1024);
  ASSERT_TRUE(buf.is_ok()) << buf.status().message();
  auto stream = (*d)->create_stream();
  float x[4];
  stream->get_tensor(make_tensor((*buf)->handle(), 0, DType::kF32, 4), x, sizeof(x));
  Status s = stream->synchronize();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no response to GET_TENSORS"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("within 200 ms"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fake.address()), std::string::npos) << s.message();
  // Everything after fails at once, with the same cause.
  auto again = (*d)->alloc_buffer(16);
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.status().message().find("within 200 ms"), std::string::npos);
  stream->set_tensor(make_tensor((*buf)->handle(), 0, DType::kF32, 4), x, sizeof(x));
  EXPECT_FALSE(stream->synchronize().is_ok());
  EXPECT_FALSE(stream->record().wait().is_ok());
}

TEST(RemoteBackend, AReadAnsweredWithTheWrongSizeIsAnError) {
  FakeWorker fake(handshake(kVersionMajor, [](const Message& in, Header*, std::vector<uint8_t>* p) {
    if (in.header.command != Command::kGetTensors) return false;
    p->assign(5, 0);  // asked for 16 bytes
    return true;
  }));
  auto d = remote_device_new(client(fake.address()));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto buf = (*d)->alloc_buffer(1024);
  ASSERT_TRUE(buf.is_ok());
  auto stream = (*d)->create_stream();
  float x[4] = {1, 2, 3, 4};
  stream->get_tensor(make_tensor((*buf)->handle(), 0, DType::kF32, 4), x, sizeof(x));
  Status s = stream->synchronize();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("answered 5 bytes for 16 asked"), std::string::npos) << s.message();
  EXPECT_EQ(x[0], 1.0f) << "nothing is written from a bad answer";
}

}  // namespace
}  // namespace strata::rpc
