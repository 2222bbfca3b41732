// The check at split time that every stage's device can run its graph: the needs come from the
// real stage graph, and a worker that lacks an op or a weight dtype is refused by name before
// anything is uploaded to it.
#include <gtest/gtest.h>

#include "backend/cpu_backend.h"
#include "engine/engine.h"
#include "engine/stage_caps.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

std::string caps_model_path() {
  SynthParams p;
  p.arch = "qwen3";  // q/k norms and biases: the builder's optional paths
  p.n_embd = 128;
  p.n_layer = 4;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 300;
  p.dtype = DType::kQ8_0;
  p.seed = 17;
  return testing::synth_file("caps", p);
}

uint32_t bit(Op op) { return static_cast<uint32_t>(op); }
uint32_t bit(DType t) { return static_cast<uint32_t>(t); }

TEST(StageCaps, NeedsComeFromTheStageGraph) {
  auto model = Model::open(caps_model_path());
  ASSERT_TRUE(model) << model.status().message();
  const Model& m = **model;

  Result<DeviceCaps> first = stage_graph_needs(m, 0, 2, true, false, DType::kF16);
  ASSERT_TRUE(first) << first.status().message();
  for (Op op : {Op::kGetRows, Op::kRmsNorm, Op::kMulMat, Op::kRope, Op::kSetRows, Op::kAttention,
                Op::kSwiglu, Op::kAdd}) {
    EXPECT_TRUE(first->ops.test(bit(op))) << op_name(op);
  }
  EXPECT_FALSE(first->ops.test(bit(Op::kCopy)));
  EXPECT_FALSE(first->ops.test(bit(Op::kArgmax)));
  EXPECT_EQ(first->weight_dtypes, DTypeSet().set(bit(DType::kQ8_0)));
  // The caches are head-major: a plane per kv head.
  EXPECT_TRUE(first->kv_planes);

  // The last stage picks the rows that want logits (get_rows over the f32 hidden state) when
  // a prompt chunk has more tokens than outputs.
  Result<DeviceCaps> last = stage_graph_needs(m, 2, 4, false, true, DType::kF16);
  ASSERT_TRUE(last) << last.status().message();
  EXPECT_TRUE(last->ops.test(bit(Op::kGetRows)));
  EXPECT_EQ(last->weight_dtypes, DTypeSet().set(bit(DType::kQ8_0)).set(bit(DType::kF32)));
  EXPECT_FALSE(last->ops.test(bit(Op::kSample)));

  // Backend sampling ends the last stage's graph with the sample op, and only the last one's.
  Result<DeviceCaps> sampling = stage_graph_needs(m, 2, 4, false, true, DType::kF16, false, true);
  ASSERT_TRUE(sampling) << sampling.status().message();
  EXPECT_EQ(sampling->ops, OpSet(last->ops).set(bit(Op::kSample)));
  Result<DeviceCaps> not_last = stage_graph_needs(m, 0, 2, true, false, DType::kF16, false, true);
  ASSERT_TRUE(not_last) << not_last.status().message();
  EXPECT_EQ(not_last->ops, first->ops);

  // A middle stage without layers only copies the hidden state through.
  Result<DeviceCaps> empty = stage_graph_needs(m, 2, 2, false, false, DType::kF16);
  ASSERT_TRUE(empty) << empty.status().message();
  EXPECT_EQ(empty->ops, OpSet().set(bit(Op::kCopy)));
  EXPECT_TRUE(empty->weight_dtypes.none());
  EXPECT_FALSE(empty->kv_planes);
}

// CPU for layers 0-2, the worker for layers 2-4 and the output.
Result<std::unique_ptr<Engine>> split_onto(rpc::Worker& worker, DType kv = DType::kF16) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> remote, testing::remote_device_on(worker));
  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions cpu;
  cpu.n_threads = 1;
  devices.push_back(cpu_device_new(cpu));
  devices.push_back(std::move(remote));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::open(caps_model_path()));
  EngineOptions eo;
  eo.split = {1, 1};
  eo.kv_dtype = kv;
  return Engine::create(std::move(model), std::move(devices), eo);
}

// A worker started with `o` is refused for its stage (layers 2-4 and the output), as lacking
// `what`, before anything is uploaded to it; the CPU's stage is not named.
void expect_refused_before_upload(const rpc::WorkerOptions& o, const std::string& what,
                                  DType kv = DType::kF16) {
  auto worker = testing::start_local_worker(o);
  ASSERT_TRUE(worker);
  Result<std::unique_ptr<Engine>> e = split_onto(*worker, kv);
  ASSERT_FALSE(e);
  const std::string& msg = e.status().message();
  EXPECT_EQ(e.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("RPC0[" + worker->address() + "] (layers 2-4, output): cannot run " + what),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("CPU"), std::string::npos) << "the CPU can run its stage: " << msg;
  EXPECT_EQ(worker->bytes_allocated(), 0u) << "weights were uploaded before the refusal";
}

TEST(StageCaps, AWorkerWithoutAnOpOrDTypeIsRefusedBeforeAnyUpload) {
  rpc::WorkerOptions o;
  o.hide_ops.set(bit(Op::kSwiglu));
  o.hide_weight_dtypes.set(bit(DType::kQ8_0));
  expect_refused_before_upload(o, "op 'swiglu', weight dtype q8_0");
}

// A worker of a release before head-major KV caches (it does not announce kCapKvPlanes) is
// refused by name when the split is planned, not at its first step.
TEST(StageCaps, AWorkerWithoutKvPlanesIsRefusedBeforeAnyUpload) {
  rpc::WorkerOptions o;
  o.hide_caps = rpc::kCapKvPlanes;
  expect_refused_before_upload(o, "KV caches in planes");
}

// A worker of a release before q8_0 KV caches (no kCapKvQ8_0) is refused when a q8_0 cache is
// asked for, and used with an f16 one.
TEST(StageCaps, AWorkerWithoutQ8_0CachesIsRefusedForThemOnly) {
  rpc::WorkerOptions o;
  o.hide_caps = rpc::kCapKvQ8_0;
  expect_refused_before_upload(o, "q8_0 KV caches", DType::kQ8_0);
  auto worker = testing::start_local_worker(o);
  ASSERT_TRUE(worker);
  Result<std::unique_ptr<Engine>> e = split_onto(*worker, DType::kF16);
  EXPECT_TRUE(e) << e.status().message();
}

// Hiding what the stage does not need changes nothing: the model loads and runs.
TEST(StageCaps, AWorkerWithoutAnUnneededOpIsUsed) {
  rpc::WorkerOptions o;
  o.hide_ops.set(bit(Op::kArgmax));
  o.hide_weight_dtypes.set(bit(DType::kQ4_K));
  auto worker = testing::start_local_worker(o);
  ASSERT_TRUE(worker);
  Result<std::unique_ptr<Engine>> e = split_onto(*worker);
  ASSERT_TRUE(e) << e.status().message();
  EXPECT_GT(worker->bytes_allocated(), 0u);
}

}  // namespace
}  // namespace strata
