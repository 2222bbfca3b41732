// A model's weights placed on one device, for the layers of one stage.
//
// On a device with host memory (the CPU) the tensors are used in place in the file's mapping;
// elsewhere the stage's tensors are uploaded into one buffer, each in the file's type or in a
// device layout of it that the device offers (its caps' weight dtypes: core/rows16.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace strata {

using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// The tensors of layers [layer_begin, layer_end), plus the token embedding when `with_embd`
// and the output norm and projection when `with_output`, each once.
std::vector<const GgufTensorInfo*> stage_weight_tensors(const Model& model, int64_t layer_begin,
                                                        int64_t layer_end, bool with_embd,
                                                        bool with_output);

// Bytes the tensors take once uploaded into one buffer with the given alignment.
uint64_t stage_weight_bytes(const std::vector<const GgufTensorInfo*>& tensors, uint64_t alignment);

// Whether `device` uses the model's file mapping in place (its weights then take no device
// memory of their own: they are page cache of the file).
bool device_maps_host(const Model& model, Device& device);

class DeviceWeights {
 public:
  // Places the weights of stage_weight_tensors(...) on the device. repack: uploaded tensors go
  // in a layout where the device offers one (llama.cpp's --repack).
  static Result<std::unique_ptr<DeviceWeights>> load(const Model& model, Device& device,
                                                     int64_t layer_begin, int64_t layer_end,
                                                     bool with_embd, bool with_output,
                                                     bool use_mmap, const ProgressFn& progress,
                                                     bool repack = true);

  // The tensor on this device (in its device dtype); t must be one of the placed tensors.
  TensorRef ref(const GgufTensorInfo* t) const;

 private:
  std::unique_ptr<Buffer> buffer_;
  std::map<const GgufTensorInfo*, uint64_t> offsets_;  // offset of each tensor in buffer_
  std::map<const GgufTensorInfo*, DType> layouts_;     // the tensors stored in a layout
};

}  // namespace strata
