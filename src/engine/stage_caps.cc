#include "engine/stage_caps.h"

#include <utility>

#include "core/sample.h"
#include "engine/graph_builder.h"
#include "engine/weights.h"

namespace strata {
namespace {

// A device that stores nothing and runs nothing: DeviceWeights::load places a stage's weights
// on it (each buffer a handle and a size) without reading them, so that the graph builder can
// name them before the real device has any.
class PlanningBuffer : public Buffer {
 public:
  explicit PlanningBuffer(uint64_t size) : size_(size) {}
  uint64_t handle() const override { return 1; }
  uint64_t size() const override { return size_; }

 private:
  uint64_t size_;
};

class PlanningStream : public Stream {
 public:
  void set_tensor(const TensorRef&, const void*, size_t) override {}
  void get_tensor(const TensorRef&, void*, size_t) override {}
  void compute(std::shared_ptr<const Graph>) override {}
  Event record() override { return Event(); }
  void wait_event(const Event&) override {}
  Status synchronize() override { return Status::ok(); }
};

class PlanningDevice : public Device {
 public:
  DeviceInfo info() const override {
    DeviceInfo info;
    info.name = "planning";
    return info;
  }
  Result<std::unique_ptr<Buffer>> alloc_buffer(uint64_t size) override {
    return std::unique_ptr<Buffer>(std::make_unique<PlanningBuffer>(size));
  }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<PlanningStream>(); }
};

// The stage graph for n_tokens tokens of which n_outputs ask for logits, and n_draws draws
// from them (with a row map, so that every op of the sampling tail is in it). Step tensors live
// in a buffer of their own (handle 2); their shapes are the real ones, their places do not
// matter.
Graph planning_graph(const Model& model, const DeviceWeights& w, int64_t layer_begin,
                     int64_t layer_end, bool first, bool last, DType kv_dtype, int64_t n_tokens,
                     int64_t n_outputs, int64_t n_draws) {
  const HParams& hp = model.hparams();
  constexpr uint64_t kIo = 2;
  const int64_t n_cells = 2 * n_tokens;
  StageTensors io;
  io.n_tokens = n_tokens;
  io.n_outputs = n_outputs;
  io.ids = make_tensor(kIo, 0, DType::kI32, n_tokens);
  io.pos = make_tensor(kIo, 0, DType::kI32, n_tokens);
  io.kv_idx = make_tensor(kIo, 0, DType::kI32, n_tokens);
  io.cells = make_tensor(kIo, 0, DType::kI32, n_cells, 1);
  io.tok = make_tensor(kIo, 0, DType::kI32, 2, n_tokens);
  io.out_rows = make_tensor(kIo, 0, DType::kI32, n_outputs);
  io.hidden_in = make_tensor(kIo, 0, DType::kF32, hp.n_embd, n_tokens);
  io.out = last ? make_tensor(kIo, 0, DType::kF32, hp.n_vocab, n_outputs)
                : make_tensor(kIo, 0, DType::kF32, hp.n_embd, n_tokens);
  for (TensorRef& rates : io.rope_rates) rates = make_tensor(kIo, 0, DType::kF32, hp.n_rot / 2);
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    io.k_cache.push_back(kv_cache_tensor(kIo, 0, kv_dtype, hp, n_cells));
    io.v_cache.push_back(kv_cache_tensor(kIo, 0, kv_dtype, hp, n_cells));
  }
  if (last && n_draws > 0) {
    io.n_draws = n_draws;
    io.draw_rows = make_tensor(kIo, 0, DType::kI32, n_draws);
    io.draw_settings = make_tensor(kIo, 0, DType::kI32, kSampleWords, n_draws);
    io.draw_entries = make_tensor(kIo, 0, DType::kI32, 2, 1, n_draws);
    io.draw_uniforms = make_tensor(kIo, 0, DType::kF32, n_draws);
    io.drawn = make_tensor(kIo, 0, DType::kI32, 1, n_draws);
  }
  GraphBuilder b;
  build_stage_graph(b, model, w, layer_begin, layer_end, first, last, io);
  b.plan();
  return b.finish(/*scratch_buffer=*/3);
}

// The shift graph of the stage, with one copied cell so that the copy's ops are in it.
Graph planning_shift_graph(const Model& model, int64_t layer_begin, int64_t layer_end,
                           DType kv_dtype) {
  const HParams& hp = model.hparams();
  constexpr uint64_t kIo = 2;
  ShiftTensors io;
  io.n_copies = 1;
  io.copy_src = make_tensor(kIo, 0, DType::kI32, 1);
  io.copy_dst = make_tensor(kIo, 0, DType::kI32, 1);
  io.cells = make_tensor(kIo, 0, DType::kI32, 1);
  io.delta = make_tensor(kIo, 0, DType::kI32, 1);
  for (TensorRef& rates : io.rope_rates) rates = make_tensor(kIo, 0, DType::kF32, hp.n_rot / 2);
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    io.k_cache.push_back(kv_cache_tensor(kIo, 0, kv_dtype, hp, 2));
    io.v_cache.push_back(kv_cache_tensor(kIo, 0, kv_dtype, hp, 2));
  }
  GraphBuilder b;
  build_stage_shift_graph(b, model, layer_begin, layer_end, io);
  b.plan();
  return b.finish(/*scratch_buffer=*/3);
}

}  // namespace

Result<DeviceCaps> stage_graph_needs(const Model& model, int64_t layer_begin, int64_t layer_end,
                                     bool first, bool last, DType kv_dtype, bool shift,
                                     bool sample) {
  PlanningDevice device;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DeviceWeights> w,
                          DeviceWeights::load(model, device, layer_begin, layer_end, first, last,
                                              /*use_mmap=*/false, /*progress=*/{}));
  DeviceCaps need;
  for (const auto& [n_tokens, n_outputs] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}}) {
    need |= graph_needs(planning_graph(model, *w, layer_begin, layer_end, first, last, kv_dtype,
                                       n_tokens, n_outputs, sample ? n_outputs : 0));
  }
  if (shift && layer_end > layer_begin) {
    need |= graph_needs(planning_shift_graph(model, layer_begin, layer_end, kv_dtype));
  }
  return need;
}

}  // namespace strata
