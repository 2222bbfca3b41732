#include "engine/placement.h"

#include <cmath>
#include <cstdio>

#include "engine/weights.h"

namespace strata {
namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

std::string pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

uint64_t margin_of(const std::vector<uint64_t>& margins, size_t i) {
  if (margins.empty()) return 0;
  return margins.size() == 1 ? margins[0] : (i < margins.size() ? margins[i] : 0);
}

}  // namespace

bool Placement::fits(const std::vector<uint64_t>& margins) const {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].fits(margin_of(margins, i))) return false;
  }
  return true;
}

std::string Placement::table(const std::vector<uint64_t>& margins) const {
  std::vector<std::vector<std::string>> rows = {
      {"device", "layers", "need MiB", "free MiB", "weights", "KV cache", "compute"}};
  for (const DevicePlan& d : devices) {
    rows.push_back(
        {d.name, d.layers.empty() ? "-" : d.layers, mib(d.need()),
         d.known ? mib(d.free) : "unknown", d.mapped ? "mapped" : mib(d.weights), mib(d.kv),
         (d.n_contexts > 1 ? std::to_string(d.n_contexts) + " x " : "") + mib(d.compute)});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line = " ";
    for (size_t c = 0; c < rows[i].size(); ++c) {
      line += (c == 0 ? " " : "  ") + pad(rows[i][c], width[c], c >= 2);
    }
    if (i > 0) {
      const size_t d = i - 1;
      const uint64_t m = margin_of(margins, d);
      if (!devices[d].fits(m)) {
        line += "  <- does not fit";
        if (m > 0) line += " (keeping " + mib(m) + " MiB free)";
      }
    }
    out += "\n" + line;
  }
  return out;
}

Result<Placement> placement_plan(const Model& model,
                                 const std::vector<std::unique_ptr<Device>>& devices,
                                 const EngineOptions& options) {
  if (devices.empty()) return invalid_argument("no devices to run the model on");
  if (options.n_contexts < 1) return invalid_argument("contexts must be at least 1");
  std::vector<DeviceInfo> infos;
  for (const auto& d : devices) infos.push_back(d->info());
  std::vector<double> weights = options.split;
  if (weights.empty()) {
    for (const DeviceInfo& info : infos) weights.push_back(static_cast<double>(info.memory_free));
  }
  if (weights.size() != devices.size()) {
    return invalid_argument("the split has " + std::to_string(weights.size()) + " entries for " +
                            std::to_string(devices.size()) + " devices");
  }
  double total = 0;
  for (double w : weights) {
    if (!(w >= 0) || !std::isfinite(w)) return invalid_argument("split values must be >= 0");
    total += w;
  }
  if (total <= 0) return invalid_argument("the split gives no device any layer");

  Placement plan;
  const int64_t n_layer = model.hparams().n_layer;
  const std::vector<int64_t> bounds = split_layers(n_layer, weights);
  for (size_t i = 0; i < devices.size(); ++i) {
    StagePlan s;
    s.device = i;
    s.layer_begin = bounds[i];
    s.layer_end = bounds[i + 1];
    if (s.layer_begin == s.layer_end && i != 0 && i + 1 != devices.size()) continue;
    plan.stages.push_back(s);
  }
  // The first and last stages may be empty of layers when the split says so; drop empty ones
  // at the ends only when a neighbour can take their role.
  while (plan.stages.size() > 1 &&
         plan.stages.front().layer_begin == plan.stages.front().layer_end) {
    plan.stages.erase(plan.stages.begin());
  }
  while (plan.stages.size() > 1 && plan.stages.back().layer_begin == plan.stages.back().layer_end) {
    plan.stages.pop_back();
  }
  plan.stages.front().first = true;
  plan.stages.back().last = true;

  for (const DeviceInfo& info : infos) {
    DevicePlan d;
    d.name = info.name;
    d.free = info.memory_free;
    d.known = info.memory_total != 0;
    d.n_contexts = options.n_contexts;
    plan.devices.push_back(d);
  }
  // Every context holds its share of the KV cells and its own step buffers, sized for its
  // largest micro-batch over its cells (the last context may hold fewer; this is the bound).
  EngineOptions per_context = options;
  per_context.n_ctx = (options.n_ctx + options.n_contexts - 1) / options.n_contexts;
  for (const StagePlan& s : plan.stages) {
    DevicePlan& d = plan.devices[s.device];
    const DeviceInfo& info = infos[s.device];
    d.layers = std::to_string(s.layer_begin) + "-" + std::to_string(s.layer_end) +
               (s.first ? ", embedding" : "") + (s.last ? ", output" : "");
    uint64_t weight_bytes = 0;
    d.mapped = options.use_mmap && device_maps_host(model, *devices[s.device]);
    if (!d.mapped) {
      weight_bytes = stage_weight_bytes(
          stage_weight_tensors(model, s.layer_begin, s.layer_end, s.first, s.last),
          std::max<uint64_t>(info.alignment, 32));
    }
    const StageNeeds all = stage_needs(model.hparams(), s.layer_begin, s.layer_end, s.first, s.last,
                                       weight_bytes, options);
    const StageNeeds one = stage_needs(model.hparams(), s.layer_begin, s.layer_end, s.first, s.last,
                                       weight_bytes, per_context);
    d.weights += all.weights;
    d.kv += all.kv;
    d.compute += one.compute;
  }
  return plan;
}

}  // namespace strata
