#include "engine/engine.h"

#include <cmath>
#include <cstdio>
#include <numeric>

#include "engine/placement.h"
#include "engine/stage_caps.h"
#include "engine/step_draws.h"

namespace strata {
namespace {

// "RPC0[host:port] (layers 2-4, output)": a stage as messages name it.
std::string stage_label(const Stage& s, const std::string& device) {
  return device + " (layers " + std::to_string(s.layer_begin) + "-" + std::to_string(s.layer_end) +
         (s.first ? ", embedding" : "") + (s.last ? ", output" : "") + ")";
}

}  // namespace

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

StageNeeds stage_needs(const HParams& hp, int64_t layer_begin, int64_t layer_end, bool first,
                       bool last, uint64_t weight_bytes, const EngineOptions& options) {
  StageNeeds n;
  n.weights = weight_bytes;
  const uint64_t n_layers = static_cast<uint64_t>(layer_end - layer_begin);
  const uint64_t n_ctx = static_cast<uint64_t>(std::max<int64_t>(options.n_ctx, 0));
  n.kv = n_layers * 2 * device_align_up(dtype_row_bytes(options.kv_dtype, hp.n_embd_kv()) * n_ctx);
  // The micro-batch's temporaries if none were reused (the planner reuses them, so this is an
  // upper bound), its inputs (cell lists of up to n_ctx cells per token), hidden in and out,
  // and the logits of every token on the last stage.
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(
      1, n_ctx > 0 ? std::min<int64_t>(options.n_batch, options.n_ctx) : options.n_batch));
  // With experts: router logits, the selected ids and weights, gate and up of every selected
  // expert, and their down projections before the weighted sum.
  const int64_t moe = hp.n_expert == 0 ? 0
                                       : hp.n_expert + 2 * hp.n_expert_used +
                                             hp.n_expert_used * (2 * hp.n_ff_exp + hp.n_embd);
  const uint64_t per_token = 4 * static_cast<uint64_t>(7 * hp.n_embd + 2 * hp.n_embd_q() +
                                                       2 * hp.n_embd_kv() + 2 * hp.n_ff + moe);
  n.compute = t * per_token + t * 4 * (8 + std::max<uint64_t>(n_ctx, 1)) +
              (first ? 0 : t * 4 * static_cast<uint64_t>(hp.n_embd)) +
              t * 4 * static_cast<uint64_t>(last ? hp.n_vocab : hp.n_embd);
  if (last && options.backend_sampling) {
    // The draws' inputs and results, and their logits gathered when the draws are not the
    // output rows in order.
    n.compute += t * 4 *
                 static_cast<uint64_t>(kSampleWords + 2 * StepDraws::kMaxEntries + 2 +
                                       sample_out_words(kSampleMaxNProbs) + hp.n_vocab);
  }
  return n;
}

Status kv_dtype_check(DType kv, const HParams& hp) {
  if (!kv_dtype_supported(kv)) {
    return unsupported("KV cache dtype must be f16, f32 or q8_0, not " +
                       std::string(dtype_name(kv)));
  }
  // Each head is whole blocks of the dtype (attention reads a head's segment on its own).
  if (const int64_t block = dtype_block_size(kv); hp.head_dim % block != 0) {
    return unsupported("a " + std::string(dtype_name(kv)) +
                       " KV cache needs head_dim a multiple of " + std::to_string(block) +
                       "; this model's is " + std::to_string(hp.head_dim));
  }
  return Status::ok();
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Model> model,
                                               std::vector<std::unique_ptr<Device>> devices,
                                               const EngineOptions& options) {
  STRATA_RETURN_IF_ERROR(kv_dtype_check(options.kv_dtype, model->hparams()));
  STRATA_ASSIGN_OR_RETURN(Placement plan, placement_plan(*model, devices, options));
  auto engine = std::unique_ptr<Engine>(new Engine());
  for (const StagePlan& p : plan.stages) {
    Stage s;
    s.device = devices[p.device].get();
    s.layer_begin = p.layer_begin;
    s.layer_end = p.layer_end;
    s.first = p.first;
    s.last = p.last;
    engine->stages_.push_back(std::move(s));
  }

  // Refuse a stage whose device cannot run its graph (an older worker without an op or a
  // weight dtype) before a byte is loaded: it would fail at its first step, after the upload.
  std::string lacking;
  for (size_t si = 0; si < engine->stages_.size(); ++si) {
    const Stage& s = engine->stages_[si];
    STRATA_ASSIGN_OR_RETURN(
        DeviceCaps need,
        stage_graph_needs(*model, s.layer_begin, s.layer_end, s.first, s.last, options.kv_dtype,
                          options.context_shift, options.backend_sampling));
    const std::string missing = caps_missing(need, s.device->caps());
    if (!missing.empty()) {
      lacking += "\n  " + stage_label(s, plan.devices[plan.stages[si].device].name) +
                 ": cannot run " + missing;
    }
  }
  if (!lacking.empty()) {
    return unsupported(
        "a device cannot run the layers placed on it (update its worker, or give those layers "
        "to another device with --tensor-split):" +
        lacking);
  }

  // Refuse a model that does not fit before a byte of it is loaded, naming what each device
  // needs and has. A device that reports no memory size (0: unknown) is not checked.
  if (!plan.fits()) {
    return out_of_range("the model does not fit on its devices with " +
                        std::to_string(options.n_ctx) + " KV cells" +
                        (options.n_contexts > 1
                             ? " over " + std::to_string(options.n_contexts) + " contexts"
                             : std::string()) +
                        " (use a smaller -c, fewer pipeline groups, --tensor-split or more "
                        "devices):" +
                        plan.table());
  }

  engine->model_ = std::move(model);
  engine->devices_ = std::move(devices);
  engine->options_ = options;
  STRATA_RETURN_IF_ERROR(engine->load_weights());
  return engine;
}

Status Engine::load_weights() {
  for (Stage& s : stages_) {
    auto w = DeviceWeights::load(*model_, *s.device, s.layer_begin, s.layer_end, s.first, s.last,
                                 options_.use_mmap, options_.progress, options_.repack);
    if (!w.is_ok()) {
      for (Stage& t : stages_) t.weights.reset();
      return w.status();
    }
    s.weights = std::move(w).value();
  }
  return Status::ok();
}

void Engine::sleep() {
  for (Stage& s : stages_) s.weights.reset();
  asleep_ = true;
}

Status Engine::wake() {
  if (!asleep_) return Status::ok();
  STRATA_RETURN_IF_ERROR(load_weights());
  asleep_ = false;
  return Status::ok();
}

Status Engine::reload_device(const Device& device) {
  if (asleep_) return Status::ok();
  for (Stage& s : stages_) {
    if (s.device != &device) continue;
    s.weights.reset();  // the buffers of the lost connection
    // No progress report: this runs in the background of a serving process.
    STRATA_ASSIGN_OR_RETURN(
        s.weights, DeviceWeights::load(*model_, *s.device, s.layer_begin, s.layer_end, s.first,
                                       s.last, options_.use_mmap, nullptr, options_.repack));
  }
  return Status::ok();
}

}  // namespace strata
