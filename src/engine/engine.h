// A model placed on devices: the layer split into stages, and each stage's weights.
// Immutable after creation; every Context (pipeline group) of the model shares it.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/weights.h"
#include "model/model.h"

namespace strata {

// Buffers on a device, and the tensors placed in them, start at multiples of this.
inline constexpr uint64_t kDeviceAlign = 64;
inline constexpr uint64_t device_align_up(uint64_t v) {
  return (v + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
}

struct Stage {
  Device* device = nullptr;
  int64_t layer_begin = 0;
  int64_t layer_end = 0;
  bool first = false;  // holds the token embedding
  bool last = false;   // holds the output norm and projection
  std::unique_ptr<DeviceWeights> weights;
};

// The KV cache dtypes a context takes: f16, f32, and q8_0 (about half of f16's memory; a model's
// head_dim must then be a multiple of 32, the q8_0 block).
inline bool kv_dtype_supported(DType t) {
  return t == DType::kF16 || t == DType::kF32 || t == DType::kQ8_0;
}
// The error for a KV dtype this model cannot have (kv_dtype_supported, and q8_0's head size).
Status kv_dtype_check(DType kv, const HParams& hp);

struct EngineOptions {
  // Share of the layers per device, in device order (like --tensor-split); empty: in
  // proportion to each device's free memory.
  std::vector<double> split;
  ProgressFn progress;
  // Devices with host memory use the weights in place in the file's mapping; false copies them
  // into the device's own buffers (for the CPU: 2 MiB pages, which stream faster than the
  // mapping's 4 KiB pages, at the cost of a copy at load and of the memory it takes).
  bool use_mmap = true;
  // Copied weights go in a device layout where the device offers one (core/rows16.h; llama.cpp's
  // --repack): the same results, faster kernels.
  bool repack = true;
  // What the contexts will need, for the check that the model fits before anything loads:
  // KV cells over all contexts (0: no KV counted), their dtype, and the largest micro-batch.
  int64_t n_ctx = 0;
  DType kv_dtype = DType::kF16;
  int64_t n_batch = 512;
  // Contexts that share the n_ctx cells (pipeline groups): each has its own step buffers.
  int32_t n_contexts = 1;
  // The contexts will shift sequences (Context::seq_shift): a device that cannot run the shift's
  // graph (an older worker without rope_shift) is refused at split time too.
  bool context_shift = false;
  // The contexts will sample on the last stage's device (StepDraws): a device that cannot run
  // the sample op (an older worker) is refused at split time.
  bool backend_sampling = false;
};

// Memory a stage needs on its device.
struct StageNeeds {
  uint64_t weights = 0;  // 0 where the device uses the file mapping in place
  uint64_t kv = 0;
  uint64_t compute = 0;  // scratch and step inputs/outputs of the largest micro-batch (estimate)
  uint64_t total() const { return weights + kv + compute; }
};

class Engine {
 public:
  // Devices in stage order. A device that gets no layers gets no stage, except that the
  // first and last stages always exist.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Model> model,
                                                std::vector<std::unique_ptr<Device>> devices,
                                                const EngineOptions& options);

  const Model& model() const { return *model_; }
  const std::vector<Stage>& stages() const { return stages_; }

  // Sleep (llama-server's --sleep-idle-seconds): frees every stage's weights on its device (a
  // worker's buffers, a CPU copy; weights used in place in the file's mapping are page cache
  // and stay mapped). Every context of the engine must be asleep first (Context::sleep), and
  // nothing may use the engine until wake() has placed the weights again (a worker that keeps
  // a blob cache gets only the hashes). Not thread-safe: the caller has stopped every context.
  void sleep();
  Status wake();
  bool asleep() const { return asleep_; }

  // Reconnection: places the weights of the stages on `device` again, after its worker came
  // back on a new connection (rpc::remote_device_set_connection); a worker that kept its blob
  // cache gets only the hashes. The other stages keep theirs. Every context must be asleep
  // (Context::sleep) and stays so until woken onto the new connection (renew_streams, wake).
  // While the engine sleeps there is nothing to place: wake() loads every stage. On error the
  // stage has no weights until a later call (or a sleep and wake) succeeds. Not thread-safe,
  // as sleep().
  Status reload_device(const Device& device);

 private:
  Engine() = default;
  Status load_weights();

  EngineOptions options_;
  bool asleep_ = false;
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Stage> stages_;
};

// The memory a stage of layers [layer_begin, layer_end) needs for `options` (weights counted
// with `weight_bytes`, already known to the caller).
StageNeeds stage_needs(const HParams& hp, int64_t layer_begin, int64_t layer_end, bool first,
                       bool last, uint64_t weight_bytes, const EngineOptions& options);

// Splits n_layer layers over devices in proportion to `weights` (non-negative, not all zero):
// returns the first layer of each device and n_layer at the end.
std::vector<int64_t> split_layers(int64_t n_layer, const std::vector<double>& weights);

}  // namespace strata
