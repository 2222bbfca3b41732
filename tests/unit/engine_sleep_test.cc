// Sleep: a context and its engine free their device memory (KV cache, step buffers, weights on
// a worker and the CPU's copy) and, woken, run with the same bytes as before; a state saved
// before the sleep restores after it.
#include <gtest/gtest.h>

#include <chrono>
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

constexpr uint64_t kCpuLimit = uint64_t{512} << 20;

std::string sleep_model_path() { return testing::small_llama_file("sleep", 4, 53); }

// Greedy: the prompt (when not empty) then n steps from `next`; every logit row, bytewise.
std::vector<uint8_t> generate_from(Context& ctx, const std::vector<int32_t>& prompt, int32_t next,
                                   int n) {
  std::vector<uint8_t> bytes;
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, false);
  for (int step = 0; step < n; ++step) {
    b.add(next, ctx.seq_len(0) + static_cast<int32_t>(b.size()), 0, true);
    const Status s = ctx.decode(b);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) return bytes;
    const float* l = ctx.logits(0);
    const auto* p = reinterpret_cast<const uint8_t*>(l);
    bytes.insert(bytes.end(), p, p + 4 * ctx.n_vocab());
    next = argmax(l, ctx.n_vocab());
    b.clear();
  }
  return bytes;
}

TEST(EngineSleep, FreesDeviceMemoryAndWakesToTheSameBytes) {
  rpc::WorkerOptions wo;
  wo.address = "127.0.0.1:0";
  wo.n_threads = 1;
  wo.log = false;
  auto worker = rpc::Worker::start(wo);
  ASSERT_TRUE(worker.is_ok()) << worker.status().message();
  rpc::ClientOptions co;
  co.endpoint = (*worker)->address();
  co.name = "RPC0";
  auto remote = rpc::remote_device_new(co);
  ASSERT_TRUE(remote.is_ok()) << remote.status().message();
  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions cpu;
  cpu.n_threads = 2;
  cpu.memory_limit = kCpuLimit;
  devices.push_back(cpu_device_new(cpu));
  Device* local = devices.back().get();
  devices.push_back(std::move(remote).value());
  auto model = Model::open(sleep_model_path());
  ASSERT_TRUE(model.is_ok());
  EngineOptions eo;
  eo.split = {1, 1};
  eo.use_mmap = false;  // the CPU stage holds a copy of its weights: sleep frees it
  auto engine = Engine::create(std::move(model).value(), std::move(devices), eo);
  ASSERT_TRUE(engine.is_ok()) << engine.status().message();
  Engine& e = **engine;
  ContextParams cp;
  cp.n_ctx = 64;
  auto made = Context::create(e, cp);
  ASSERT_TRUE(made.is_ok());
  Context& ctx = **made;

  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 8, 41};
  const std::vector<uint8_t> ref = generate_from(ctx, prompt, 12, 6);
  ASSERT_FALSE(ref.empty());
  ctx.clear();
  generate_from(ctx, prompt, 12, 2);
  auto state = ctx.seq_state_save(0);
  ASSERT_TRUE(state.is_ok());
  const std::vector<uint8_t> after_state = generate_from(ctx, {}, 77, 3);
  EXPECT_GT((*worker)->bytes_allocated(), 0u);
  EXPECT_LT(local->info().memory_free, kCpuLimit);

  ctx.sleep();
  e.sleep();
  EXPECT_TRUE(wait_for([&] { return (*worker)->bytes_allocated() == 0; }))
      << (*worker)->bytes_allocated() << " bytes still allocated on the worker";
  EXPECT_EQ(local->info().memory_free, kCpuLimit) << "the CPU device still holds memory";
  EXPECT_EQ(ctx.seq_len(0), 0);
  Batch b;
  b.add(1, 0, 0, true);
  EXPECT_EQ(ctx.decode(b).kind(), ErrorKind::kUnavailable);
  EXPECT_EQ(ctx.seq_state_restore(0, *state).kind(), ErrorKind::kUnavailable);
  EXPECT_EQ(ctx.wake().kind(), ErrorKind::kUnavailable) << "the engine sleeps still";

  ASSERT_TRUE(e.wake().is_ok());
  ASSERT_TRUE(ctx.wake().is_ok());
  EXPECT_GT((*worker)->bytes_allocated(), 0u);
  EXPECT_EQ(generate_from(ctx, prompt, 12, 6), ref) << "woken, a fresh run gives the same bytes";
  ASSERT_TRUE(ctx.seq_state_restore(0, *state).is_ok());
  EXPECT_EQ(generate_from(ctx, {}, 77, 3), after_state) << "a state saved before the sleep";
}

}  // namespace
}  // namespace strata
