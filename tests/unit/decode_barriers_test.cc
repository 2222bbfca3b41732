// How many times a decode step makes the thread pool wait for all its threads: a batch-1 step
// of a llama layer is a few matmul passes and attention, not one barrier per op.
#include <gtest/gtest.h>

#include <iostream>

#include "core/thread_pool.h"
#include "engine/context.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

// Big enough that every matmul of a layer is split over the threads (q8_0 rows of 512 are
// 544 bytes: q, k and v are 512, 256 and 256 rows), small enough to run in a unit test.
constexpr int64_t kLayers = 8;

// With n_expert > 0, the same attention with a mixture of that many experts of width n_ff, 4
// per token (Mixtral-style).
std::string barrier_model(int64_t n_ff = 1536, int64_t n_expert = 0) {
  SynthParams p;
  p.n_embd = 512;
  p.n_layer = kLayers;
  p.n_head = 8;
  p.n_head_kv = 4;
  p.n_ff = n_ff;
  p.n_expert = n_expert;
  p.n_expert_used = n_expert > 0 ? 4 : 0;
  p.n_vocab = 512;
  p.dtype = DType::kQ8_0;
  p.seed = 5;
  return testing::synth_file(n_expert > 0 ? "barriers_mixtral_q8_0" : "barriers_llama_q8_0", p);
}

// 8 experts of width 512: each selected expert's gate, up and down rows are 512 rows of 544
// bytes, split over the threads.
std::string barrier_moe_model() { return barrier_model(512, 8); }

// Barriers per decode step of `batch` sequences, one token each, on a pool of 2 threads.
uint64_t barriers_per_step(int batch, const std::string& file = barrier_model()) {
  auto model = Model::open(file);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return 0;
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(testing::cpu_device("CPU", 1));
  auto engine = Engine::create(std::move(model).value(), std::move(devices), {});
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  if (!engine.is_ok()) return 0;
  ThreadPool pool(2);
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_seq = batch;
  cp.pools.pool = &pool;
  cp.pools.pool_batch = &pool;
  auto ctx = Context::create(**engine, cp);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  if (!ctx.is_ok()) return 0;

  Batch b;
  for (int s = 0; s < batch; ++s) {
    for (int i = 0; i < 8; ++i) b.add(3 + 17 * i + s, i, s, i == 7);
  }
  EXPECT_TRUE((*ctx)->decode(b).is_ok());
  constexpr int kSteps = 4;
  const ThreadPool::Counts before = pool.counts();
  for (int step = 0; step < kSteps; ++step) {
    b.clear();
    for (int s = 0; s < batch; ++s) {
      b.add(testing::argmax((*ctx)->logits(s), (*ctx)->n_vocab()), (*ctx)->seq_len(s), s, true);
    }
    EXPECT_TRUE((*ctx)->decode(b).is_ok());
  }
  const ThreadPool::Counts after = pool.counts();
  const uint64_t calls = (after.calls - before.calls) / kSteps;
  const uint64_t barriers = (after.barriers - before.barriers) / kSteps;
  std::cout << "decode step of batch " << batch << ", " << kLayers
            << " layers, 2 threads: " << calls << " parallel_for calls, " << barriers
            << " barriers\n";
  return barriers;
}

// Per layer: q/k/v, attention, the output projection, gate/up and down; then the output
// projection of the model. (At batch 8 the norms, rope, swiglu and the quantisation of this
// model's activations are still too small to be split.)
TEST(DecodeBarriers, ALlamaLayerCostsAHandfulOfBarriers) {
  for (int batch : {1, 8}) {
    const uint64_t barriers = barriers_per_step(batch);
    EXPECT_GT(barriers, 0u) << "the matmuls are large enough to be split";
    EXPECT_LE(barriers, 5 * kLayers + 1) << "batch " << batch;
  }
}

// A mixture-of-experts layer costs what a dense one does: its gate and up experts run in one
// pass (matmul_id_multi), the down experts in another; the router's small matmul, the
// selection and the weighted sum run on the calling thread.
TEST(DecodeBarriers, AMixtureOfExpertsLayerCostsNoMoreThanADenseOne) {
  for (int batch : {1, 8}) {
    const uint64_t barriers = barriers_per_step(batch, barrier_moe_model());
    EXPECT_GT(barriers, 0u) << "the matmuls are large enough to be split";
    EXPECT_LE(barriers, 5 * kLayers + 1) << "batch " << batch;
  }
}

}  // namespace
}  // namespace strata
