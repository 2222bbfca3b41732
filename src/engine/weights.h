// A model's weights placed on one device, for the layers of one stage.
//
// On a device with host memory (the CPU) the tensors are used in place in the file's mapping;
// elsewhere the stage's tensors are uploaded into one buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "backend/backend.h"
#include "model/model.h"

namespace strata {

using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

class DeviceWeights {
 public:
  // Places the weights of layers [layer_begin, layer_end), plus the token embedding when
  // `with_embd` and the output norm and projection when `with_output`.
  static Result<std::unique_ptr<DeviceWeights>> load(const Model& model, Device& device,
                                                     int64_t layer_begin, int64_t layer_end,
                                                     bool with_embd, bool with_output,
                                                     const ProgressFn& progress);

  // The tensor on this device; t must be one of the placed tensors.
  TensorRef ref(const GgufTensorInfo* t) const;

 private:
  std::unique_ptr<Buffer> buffer_;
  std::map<const GgufTensorInfo*, uint64_t> offsets_;  // offset of each tensor in buffer_
};

}  // namespace strata
