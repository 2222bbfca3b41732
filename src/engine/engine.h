// A model placed on devices: the layer split into stages, and each stage's weights.
// Immutable after creation; every Context (pipeline group) of the model shares it.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/weights.h"
#include "model/model.h"

namespace strata {

struct Stage {
  Device* device = nullptr;
  int64_t layer_begin = 0;
  int64_t layer_end = 0;
  bool first = false;  // holds the token embedding
  bool last = false;   // holds the output norm and projection
  std::unique_ptr<DeviceWeights> weights;
};

struct EngineOptions {
  // Share of the layers per device, in device order (like --tensor-split); empty: in
  // proportion to each device's free memory.
  std::vector<double> split;
  ProgressFn progress;
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

 private:
  Engine() = default;
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Stage> stages_;
};

// Splits n_layer layers over devices in proportion to `weights` (non-negative, not all zero):
// returns the first layer of each device and n_layer at the end.
std::vector<int64_t> split_layers(int64_t n_layer, const std::vector<double>& weights);

}  // namespace strata
