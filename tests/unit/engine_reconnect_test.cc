// Reconnection: a worker dies and another starts on its address; the device takes a new
// connection, the engine places that stage's weights again, and a context that slept wakes
// onto the new connection and computes the same bytes as before the loss. A buffer of the lost
// connection never reaches the new one, and a worker that comes back unable to run what the
// old one ran is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::argmax;
using testing::wait_for;

std::string reconnect_model_path() { return testing::small_llama_file("reconnect", 4, 67); }

// Greedy from an empty sequence 0: the prompt, then n steps; every logit row, bytewise.
Result<std::vector<uint8_t>> generate_fresh(Context& ctx, const std::vector<int32_t>& prompt,
                                            int n) {
  ctx.clear();
  std::vector<uint8_t> bytes;
  Batch b;
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    b.add(prompt[i], static_cast<int32_t>(i), 0, false);
  }
  int32_t next = prompt.back();
  for (int step = 0; step < n; ++step) {
    b.add(next, ctx.seq_len(0) + static_cast<int32_t>(b.size()), 0, true);
    STRATA_RETURN_IF_ERROR(ctx.decode(b));
    const float* l = ctx.logits(0);
    const auto* p = reinterpret_cast<const uint8_t*>(l);
    bytes.insert(bytes.end(), p, p + 4 * ctx.n_vocab());
    next = argmax(l, ctx.n_vocab());
    b.clear();
  }
  return bytes;
}

Result<std::unique_ptr<rpc::Worker>> start_worker_at(const std::string& address,
                                                     OpSet hide_ops = {}) {
  rpc::WorkerOptions wo;
  wo.address = address;
  wo.n_threads = 1;
  wo.log = false;
  wo.hide_ops = hide_ops;
  return rpc::Worker::start(wo);
}

struct RemoteSplit {
  std::unique_ptr<Engine> engine;
  Device* remote = nullptr;
};

RemoteSplit make_split(const std::string& address) {
  RemoteSplit out;
  rpc::ClientOptions co;
  co.endpoint = address;
  co.name = "RPC0";
  co.timeout_ms = 5000;
  auto remote = rpc::remote_device_new(co);
  EXPECT_TRUE(remote.is_ok()) << remote.status().message();
  if (!remote.is_ok()) return out;
  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions cpu;
  cpu.n_threads = 2;
  devices.push_back(cpu_device_new(cpu));
  out.remote = remote->get();
  devices.push_back(std::move(remote).value());
  auto model = Model::open(reconnect_model_path());
  EXPECT_TRUE(model.is_ok());
  EngineOptions eo;
  eo.split = {1, 1};
  auto engine = Engine::create(std::move(model).value(), std::move(devices), eo);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  if (engine.is_ok()) out.engine = std::move(engine).value();
  return out;
}

TEST(EngineReconnect, AContextWakesOntoANewConnectionWithTheSameBytes) {
  auto worker = start_worker_at("127.0.0.1:0");
  ASSERT_TRUE(worker.is_ok()) << worker.status().message();
  const std::string address = (*worker)->address();
  RemoteSplit split = make_split(address);
  ASSERT_TRUE(split.engine);
  Engine& e = *split.engine;
  ContextParams cp;
  cp.n_ctx = 64;
  auto made = Context::create(e, cp);
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  Context& ctx = **made;
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 8, 41};
  auto ref = generate_fresh(ctx, prompt, 6);
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  // A buffer made on the first connection, still held when the second one is in use.
  auto stale = split.remote->alloc_buffer(4096);
  ASSERT_TRUE(stale.is_ok());

  (*worker)->stop();
  worker->reset();
  auto lost = generate_fresh(ctx, prompt, 2);
  ASSERT_FALSE(lost.is_ok());
  EXPECT_EQ(lost.status().kind(), ErrorKind::kUnavailable) << lost.status().message();
  EXPECT_NE(lost.status().message().find(address), std::string::npos) << lost.status().message();
  std::shared_ptr<rpc::Connection> old = rpc::remote_device_connection(*split.remote);
  EXPECT_FALSE(old->broken().is_ok());

  worker = start_worker_at(address);
  ASSERT_TRUE(worker.is_ok()) << worker.status().message();
  ctx.sleep();
  auto conn = rpc::Connection::open(old->options());
  ASSERT_TRUE(conn.is_ok()) << conn.status().message();
  ASSERT_TRUE(rpc::remote_device_set_connection(*split.remote, std::move(conn).value()).is_ok());
  old.reset();
  EXPECT_FALSE(ctx.wake().is_ok() && generate_fresh(ctx, prompt, 1).is_ok())
      << "woken on the old streams and without weights, a context cannot run";
  ctx.sleep();
  ASSERT_TRUE(e.reload_device(*split.remote).is_ok());
  ctx.renew_streams(*split.remote);
  ASSERT_TRUE(ctx.wake().is_ok());
  auto again = generate_fresh(ctx, prompt, 6);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(*again, *ref) << "after the reconnection, the same bytes";

  // The stale buffer's handle may name a buffer of the new worker: freeing it must not.
  const uint64_t held = (*worker)->bytes_allocated();
  ASSERT_GT(held, 0u);
  stale->reset();
  auto twice = generate_fresh(ctx, prompt, 6);
  ASSERT_TRUE(twice.is_ok()) << twice.status().message();
  EXPECT_EQ(*twice, *ref);
  EXPECT_EQ((*worker)->bytes_allocated(), held);

  ctx.sleep();
  e.sleep();
  EXPECT_TRUE(wait_for([&] { return (*worker)->bytes_allocated() == 0; }))
      << (*worker)->bytes_allocated() << " bytes still allocated on the new worker";
}

TEST(EngineReconnect, AWorkerThatComesBackOlderIsRefused) {
  auto worker = start_worker_at("127.0.0.1:0");
  ASSERT_TRUE(worker.is_ok()) << worker.status().message();
  const std::string address = (*worker)->address();
  RemoteSplit split = make_split(address);
  ASSERT_TRUE(split.engine);
  std::shared_ptr<rpc::Connection> old = rpc::remote_device_connection(*split.remote);
  (*worker)->stop();
  worker->reset();

  OpSet no_swiglu;
  no_swiglu.set(static_cast<uint32_t>(Op::kSwiglu));
  worker = start_worker_at(address, no_swiglu);
  ASSERT_TRUE(worker.is_ok()) << worker.status().message();
  auto conn = rpc::Connection::open(old->options());
  ASSERT_TRUE(conn.is_ok()) << conn.status().message();
  const Status s = rpc::remote_device_set_connection(*split.remote, std::move(conn).value());
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("swiglu"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(address), std::string::npos) << s.message();
  EXPECT_EQ(rpc::remote_device_connection(*split.remote), old) << "the device keeps its own";
}

}  // namespace
}  // namespace strata
