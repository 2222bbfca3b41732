#include "engine/engine.h"

#include <cmath>
#include <numeric>

namespace strata {

std::vector<int64_t> split_layers(int64_t n_layer, const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> bounds(weights.size() + 1, 0);
  double acc = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    acc += weights[i];
    bounds[i + 1] = static_cast<int64_t>(std::llround(acc / total * static_cast<double>(n_layer)));
  }
  bounds.back() = n_layer;
  return bounds;
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Model> model,
                                               std::vector<std::unique_ptr<Device>> devices,
                                               const EngineOptions& options) {
  if (devices.empty()) return invalid_argument("no devices to run the model on");
  std::vector<double> weights = options.split;
  if (weights.empty()) {
    for (const auto& d : devices) weights.push_back(static_cast<double>(d->info().memory_free));
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

  auto engine = std::unique_ptr<Engine>(new Engine());
  const int64_t n_layer = model->hparams().n_layer;
  const std::vector<int64_t> bounds = split_layers(n_layer, weights);
  for (size_t i = 0; i < devices.size(); ++i) {
    Stage s;
    s.device = devices[i].get();
    s.layer_begin = bounds[i];
    s.layer_end = bounds[i + 1];
    if (s.layer_begin == s.layer_end && i != 0 && i + 1 != devices.size()) continue;
    engine->stages_.push_back(std::move(s));
  }
  // The first and last stages may be empty of layers when the split says so; drop empty ones
  // at the ends only when a neighbour can take their role.
  while (engine->stages_.size() > 1 &&
         engine->stages_.front().layer_begin == engine->stages_.front().layer_end) {
    engine->stages_.erase(engine->stages_.begin());
  }
  while (engine->stages_.size() > 1 &&
         engine->stages_.back().layer_begin == engine->stages_.back().layer_end) {
    engine->stages_.pop_back();
  }
  engine->stages_.front().first = true;
  engine->stages_.back().last = true;

  for (Stage& s : engine->stages_) {
    STRATA_ASSIGN_OR_RETURN(
        s.weights, DeviceWeights::load(*model, *s.device, s.layer_begin, s.layer_end, s.first,
                                       s.last, options.progress));
  }
  engine->model_ = std::move(model);
  engine->devices_ = std::move(devices);
  return engine;
}

}  // namespace strata
