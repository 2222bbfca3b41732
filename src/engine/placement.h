// Where the model goes and what that costs, before anything is loaded: the layer split into
// stages over the devices, and per device the memory its stages need (weights once, the KV
// cache and compute buffers of every context that will run on the model) against what the
// device reports free. Engine::create refuses a placement that does not fit; the server's --fit
// searches over contexts and groups with it. Planning reads the GGUF's tensor table and asks
// the devices for their info; it never reads a weight.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"

namespace strata {

struct StagePlan {
  size_t device = 0;  // index into the devices
  int64_t layer_begin = 0;
  int64_t layer_end = 0;
  bool first = false;
  bool last = false;
};

struct DevicePlan {
  std::string name;        // DeviceInfo::name: "CPU", "RPC0[127.0.0.1:50052]"
  std::string layers;      // "0-12, embedding" or "" without a stage
  uint64_t free = 0;       // what the device reports free
  bool known = true;       // false: the device reports no memory size, and is not checked
  uint64_t weights = 0;    // 0 where the device uses the file's mapping in place
  bool mapped = false;     // the weights are the file's mapping (page cache, not counted)
  uint64_t kv = 0;         // the KV cache of every context
  uint64_t compute = 0;    // of one context
  int32_t n_contexts = 1;  // contexts, each with its own compute buffers
  uint64_t need() const { return weights + kv + compute * static_cast<uint64_t>(n_contexts); }
  // Fits with `margin` bytes left free.
  bool fits(uint64_t margin = 0) const { return !known || need() + margin <= free; }
};

struct Placement {
  std::vector<StagePlan> stages;
  std::vector<DevicePlan> devices;  // in the devices' order, one per device
  bool fits(const std::vector<uint64_t>& margins = {}) const;
  // The table of need and free per device, in MiB, marking the devices that do not fit.
  std::string table(const std::vector<uint64_t>& margins = {}) const;
};

// The stages of `options.split` (empty: in proportion to the devices' free memory) and what
// each device needs for them with options.n_ctx KV cells over options.n_contexts contexts. A
// device that gets no layers gets no stage, except that the first and last stages always
// exist. Errors: a split that does not name every device, or gives no device a layer.
Result<Placement> placement_plan(const Model& model,
                                 const std::vector<std::unique_ptr<Device>>& devices,
                                 const EngineOptions& options);

}  // namespace strata
