// The hidden state handed off from worker to worker (Stream::handoff): the bytes of one device
// over two and three workers, from two contexts at once; the path through this host where a
// worker lacks the capability or the CPU sits between two workers; and the counters that show
// which path a step took.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::greedy_logits;

std::string handoff_model_path() { return testing::small_llama_file("handoff", 6, 17); }

std::unique_ptr<rpc::Worker> worker_hiding_caps(uint64_t hide_caps = 0) {
  rpc::WorkerOptions o;
  o.hide_caps = hide_caps;
  return testing::start_local_worker(o);
}

// Devices in stage order: a worker's address, or "CPU". Keeps the workers' connections to read
// their counters.
struct Split {
  std::unique_ptr<Engine> engine;
  std::vector<std::shared_ptr<rpc::Connection>> conns;  // nullptr for the CPU
};

// `base`: the remote devices' options (hand-off and asynchronous copies on by default).
Split split_on(const std::vector<std::string>& where, const rpc::ClientOptions& base = {}) {
  Split s;
  std::vector<std::unique_ptr<Device>> devices;
  for (size_t i = 0; i < where.size(); ++i) {
    if (where[i] == "CPU") {
      CpuDeviceOptions co;
      co.n_threads = 1;
      devices.push_back(cpu_device_new(co));
      s.conns.push_back(nullptr);
      continue;
    }
    rpc::ClientOptions o = base;
    o.endpoint = where[i];
    o.name = "RPC" + std::to_string(i);
    auto d = rpc::remote_device_new(o);
    EXPECT_TRUE(d.is_ok()) << d.status().message();
    if (!d.is_ok()) return s;
    s.conns.push_back(rpc::remote_device_connection(**d));
    devices.push_back(std::move(d).value());
  }
  auto model = Model::open(handoff_model_path());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  EngineOptions eo;
  eo.split = std::vector<double>(where.size(), 1.0);
  auto e = Engine::create(std::move(model).value(), std::move(devices), eo);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (e.is_ok()) s.engine = std::move(e).value();
  return s;
}

std::vector<uint8_t> cpu_reference(int seed) {
  Split local = split_on({"CPU"});
  EXPECT_TRUE(local.engine);
  return local.engine ? greedy_logits(*local.engine, seed) : std::vector<uint8_t>{};
}

uint64_t handoffs(const Split& s, size_t stage) {
  return s.conns[stage]->stats().snapshot().handoffs;
}

// SYNCHRONIZE requests: what the client sends to wait for a stream's one-way messages.
uint64_t syncs(const Split& s, size_t stage) {
  return s.conns[stage]
      ->stats()
      .snapshot()
      .commands[static_cast<size_t>(rpc::Command::kSynchronize)]
      .count;
}

uint64_t reads(const Split& s, size_t stage) {
  const rpc::StatsSnapshot snap = s.conns[stage]->stats().snapshot();
  return snap.commands[static_cast<size_t>(rpc::Command::kGetTensors)].count +
         snap.commands[static_cast<size_t>(rpc::Command::kGetTensor)].count;
}

TEST(EngineHandoff, ThreeWorkersGiveTheBytesOfOneDevice) {
  const std::vector<uint8_t> ref = cpu_reference(0);
  ASSERT_FALSE(ref.empty());
  auto w0 = worker_hiding_caps(), w1 = worker_hiding_caps(), w2 = worker_hiding_caps();
  Split s = split_on({w0->address(), w1->address(), w2->address()});
  ASSERT_TRUE(s.engine);
  ASSERT_EQ(s.engine->stages().size(), 3u);
  // Loading waits for the upload of each weight the client repacked (q8_0's layout): not steps.
  const uint64_t load_syncs = syncs(s, 0);
  EXPECT_EQ(greedy_logits(*s.engine, 0), ref);
  // Every step of the first two stages went to the next worker; only the last is read.
  EXPECT_GT(handoffs(s, 0), 0u);
  EXPECT_EQ(handoffs(s, 0), handoffs(s, 1));
  EXPECT_EQ(handoffs(s, 2), 0u);
  EXPECT_EQ(reads(s, 0), 0u);
  EXPECT_EQ(reads(s, 1), 0u);
  EXPECT_GT(reads(s, 2), 0u);
  EXPECT_EQ(s.conns[0]->stats().snapshot().steps, handoffs(s, 0));

  const std::vector<std::string> where = {w0->address(), w1->address(), w2->address()};
  // Without hand-off, the same bytes through this host.
  {
    rpc::ClientOptions off;
    off.handoff = false;
    Split star = split_on(where, off);
    ASSERT_TRUE(star.engine);
    EXPECT_EQ(greedy_logits(*star.engine, 0), ref);
    EXPECT_EQ(handoffs(star, 0), 0u);
    EXPECT_EQ(handoffs(star, 1), 0u);
    EXPECT_GT(reads(star, 0), 0u);
    EXPECT_GT(reads(star, 1), 0u);
  }
  // Synchronised stages: hand-offs waited for before the next stage starts, and, without
  // hand-off, copies through this host that wait on the caller's thread.
  for (const bool handoff : {true, false}) {
    rpc::ClientOptions sync;
    sync.async_copy = false;
    sync.handoff = handoff;
    Split one_by_one = split_on(where, sync);
    ASSERT_TRUE(one_by_one.engine);
    const uint64_t loaded = syncs(one_by_one, 0);
    EXPECT_EQ(greedy_logits(*one_by_one.engine, 0), ref) << "hand-off " << handoff;
    EXPECT_EQ(handoffs(one_by_one, 0) > 0, handoff);
    if (handoff) {
      EXPECT_GE(syncs(one_by_one, 0) - loaded, handoffs(one_by_one, 0))
          << "each hand-off waited for";
    }
  }
  EXPECT_LT(syncs(s, 0) - load_syncs, handoffs(s, 0))
      << "with asynchronous copies, hand-offs not waited for";
}

// Pipeline groups: two contexts of one engine from two threads share the connections and the
// links; their steps' sequence numbers never collide.
TEST(EngineHandoff, TwoContextsAtOnce) {
  const std::vector<uint8_t> ref0 = cpu_reference(1), ref1 = cpu_reference(2);
  auto w0 = worker_hiding_caps(), w1 = worker_hiding_caps();
  Split s = split_on({w0->address(), w1->address()});
  ASSERT_TRUE(s.engine);
  std::vector<uint8_t> got0, got1;
  std::thread t0([&] { got0 = greedy_logits(*s.engine, 1, 16); });
  std::thread t1([&] { got1 = greedy_logits(*s.engine, 2, 16); });
  t0.join();
  t1.join();
  EXPECT_EQ(std::vector<uint8_t>(got0.begin(), got0.begin() + ref0.size()), ref0);
  EXPECT_EQ(std::vector<uint8_t>(got1.begin(), got1.begin() + ref1.size()), ref1);
  EXPECT_GT(handoffs(s, 0), 0u);
}

// The path through this host where hand-off cannot be: a worker that does not offer it (an
// older one), and the CPU between two workers (this host is the peer there).
TEST(EngineHandoff, FallsBackWhereItCannot) {
  const std::vector<uint8_t> ref = cpu_reference(0);
  auto old = worker_hiding_caps(rpc::kCapHandoff);
  auto w1 = worker_hiding_caps(), w2 = worker_hiding_caps();
  {
    Split s = split_on({old->address(), w1->address(), w2->address()});
    ASSERT_TRUE(s.engine);
    EXPECT_EQ(greedy_logits(*s.engine, 0), ref);
    EXPECT_EQ(handoffs(s, 0), 0u) << "the older worker's output comes through this host";
    EXPECT_GT(reads(s, 0), 0u);
    EXPECT_GT(handoffs(s, 1), 0u) << "the two newer workers hand off";
  }
  {
    Split s = split_on({w1->address(), old->address(), w2->address()});
    ASSERT_TRUE(s.engine);
    EXPECT_EQ(greedy_logits(*s.engine, 0), ref);
    EXPECT_EQ(handoffs(s, 0), 0u);
    EXPECT_EQ(handoffs(s, 1), 0u);
  }
  {
    Split s = split_on({w1->address(), "CPU", w2->address()});
    ASSERT_TRUE(s.engine);
    EXPECT_EQ(greedy_logits(*s.engine, 0), ref);
    EXPECT_EQ(handoffs(s, 0), 0u);
    EXPECT_GT(reads(s, 0), 0u);
  }
  {
    Split s = split_on({"CPU", w1->address(), w2->address()});
    ASSERT_TRUE(s.engine);
    EXPECT_EQ(greedy_logits(*s.engine, 0), ref);
    EXPECT_GT(handoffs(s, 1), 0u);
  }
}

// A worker of the first stage that goes away mid-run: the decode fails with an error naming it,
// without hanging; so does every later decode.
TEST(EngineHandoff, AFirstStageThatDiesFailsTheStep) {
  auto w0 = worker_hiding_caps(), w1 = worker_hiding_caps();
  const std::string dead = w0->address();
  Split s = split_on({w0->address(), w1->address()});
  ASSERT_TRUE(s.engine);
  ContextParams cp;
  cp.n_ctx = 64;
  auto ctx = Context::create(*s.engine, cp);
  ASSERT_TRUE(ctx.is_ok());
  Batch b;
  b.add(3, 0, 0, true);
  ASSERT_TRUE((*ctx)->decode(b).is_ok());
  w0->stop();
  for (int i = 0; i < 2; ++i) {
    b.clear();
    b.add(4, 1, 0, true);
    Status st = (*ctx)->decode(b);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(dead), std::string::npos) << st.message();
    EXPECT_EQ((*ctx)->seq_len(0), 1);
  }
}

}  // namespace
}  // namespace strata
