#include "server/model_load.h"

#include <algorithm>
#include <thread>

#include "backend/cpu_backend.h"
#include "core/host_memory.h"
#include "engine/placement.h"
#include "rpc/auth.h"
#include "rpc/remote_backend.h"
#include "server/arg_table.h"

namespace strata::server {
namespace {

// Orders `all` by the comma list of names; each name once. Without a list: remote devices
// first, in --rpc order, then the CPU (so the output layer stays local).
Result<std::vector<std::unique_ptr<Device>>> order_devices(std::vector<std::unique_ptr<Device>> all,
                                                           const std::optional<std::string>& list) {
  // "RPC0[host:port]" answers to "RPC0" too.
  std::vector<std::string> names;
  for (const auto& d : all) {
    const std::string name = d->info().name;
    names.push_back(name.substr(0, name.find('[')));
  }
  std::vector<std::string> wanted;
  if (list) {
    wanted = split_commas(*list);
  } else {
    for (size_t i = 1; i < names.size(); ++i) wanted.push_back(names[i]);
    wanted.push_back(names[0]);
  }
  std::vector<std::unique_ptr<Device>> out;
  for (const std::string& w : wanted) {
    auto it = std::find(names.begin(), names.end(), w);
    if (it == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      return invalid_argument("--device: unknown device '" + w + "' (devices: " + known + ")");
    }
    const size_t i = static_cast<size_t>(it - names.begin());
    if (!all[i]) return invalid_argument("--device: '" + w + "' named twice");
    out.push_back(std::move(all[i]));
  }
  return out;
}

// One device per endpoint, named RPC0, RPC1... in order.
Status add_remote_devices(const LoadOptions& options,
                          std::vector<std::unique_ptr<Device>>& devices) {
  if (options.rpc.empty()) return Status::ok();
  rpc::ClientOptions base;
  STRATA_RETURN_IF_ERROR(rpc::client_options_from_env(&base));
  STRATA_ASSIGN_OR_RETURN(base.token, rpc::auth_token_load(options.rpc_token_file));
  for (size_t i = 0; i < options.rpc.size(); ++i) {
    if (options.rpc[i].empty()) return invalid_argument("--rpc: empty endpoint");
    rpc::ClientOptions o = base;
    o.endpoint = options.rpc[i];
    o.name = "RPC" + std::to_string(i);
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> d, rpc::remote_device_new(o));
    devices.push_back(std::move(d));
  }
  return Status::ok();
}

// The split as layer counts when -ngl says how many layers leave the CPU: the CPU keeps
// n_layer - ngl, the other devices share ngl (by the tensor split, else evenly).
Result<std::vector<double>> split_for_gpu_layers(const LoadOptions& options,
                                                 const std::vector<std::unique_ptr<Device>>& devs,
                                                 int64_t n_layer) {
  const int64_t ngl = std::clamp<int64_t>(*options.n_gpu_layers, 0, n_layer);
  std::vector<double> shares(devs.size(), 0.0);
  double other_total = 0;
  size_t n_other = 0;
  for (size_t i = 0; i < devs.size(); ++i) {
    if (devs[i]->info().name == "CPU") continue;
    ++n_other;
    shares[i] = options.tensor_split.empty() ? 1.0 : options.tensor_split[i];
    other_total += shares[i];
  }
  if (n_other == 0 || other_total <= 0) {
    // Nothing but the CPU to put layers on: -ngl has no device to act on, as in llama.cpp.
    for (size_t i = 0; i < devs.size(); ++i) shares[i] = devs[i]->info().name == "CPU" ? 1.0 : 0;
    return shares;
  }
  for (size_t i = 0; i < devs.size(); ++i) {
    if (devs[i]->info().name == "CPU") {
      shares[i] = static_cast<double>(n_layer - ngl);
    } else {
      shares[i] = shares[i] / other_total * static_cast<double>(ngl);
    }
  }
  return shares;
}

// Whether the plan for n_ctx cells over n contexts fits, keeping the margins free.
Result<bool> plan_fits(const Model& model, const std::vector<std::unique_ptr<Device>>& devices,
                       const LoadOptions::Fit& fit, EngineOptions o, int64_t n_ctx, int32_t n) {
  o.n_ctx = n_ctx;
  o.n_contexts = n;
  STRATA_ASSIGN_OR_RETURN(Placement plan, placement_plan(model, devices, o));
  return plan.fits(fit.margins);
}

// The largest context in [lo, hi] that fits with n contexts; 0 when not even lo fits. The need
// grows with the context, so a bisection finds it; a result of 256 or more is rounded down to
// a multiple of 256 (as the cell lists are padded), never below lo.
Result<int64_t> largest_context(const Model& model,
                                const std::vector<std::unique_ptr<Device>>& devices,
                                const LoadOptions::Fit& fit, const EngineOptions& eo, int64_t lo,
                                int64_t hi, int32_t n) {
  STRATA_ASSIGN_OR_RETURN(bool ok, plan_fits(model, devices, fit, eo, hi, n));
  if (ok) return hi;
  STRATA_ASSIGN_OR_RETURN(ok, plan_fits(model, devices, fit, eo, lo, n));
  if (!ok) return int64_t{0};
  int64_t good = lo, bad = hi;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    STRATA_ASSIGN_OR_RETURN(ok, plan_fits(model, devices, fit, eo, mid, n));
    (ok ? good : bad) = mid;
  }
  return good >= 256 ? std::max(lo, good / 256 * 256) : good;
}

// --fit: when the asked plan does not fit with the margins kept free, the largest context down
// to fit.min_ctx with the contexts asked; failing that, at that context, the most contexts
// that fit (each context's step buffers are what another one costs), with their largest
// context. Changes eo and says what it chose; changes nothing when the asked plan fits or when
// nothing smaller does (Engine::create then checks the asked plan, without margins).
Result<std::string> fit_plan(const Model& model,
                             const std::vector<std::unique_ptr<Device>>& devices,
                             const LoadOptions::Fit& fit, int64_t min_cells, EngineOptions& eo) {
  const int64_t asked = eo.n_ctx;
  const int32_t asked_n = eo.n_contexts;
  const int64_t lo = std::min(asked, std::max(fit.min_ctx, min_cells));
  for (int32_t n = asked_n; n >= 1; --n) {
    STRATA_ASSIGN_OR_RETURN(int64_t best, largest_context(model, devices, fit, eo, lo, asked, n));
    if (best == 0) continue;
    eo.n_ctx = best;
    eo.n_contexts = n;
    if (best == asked && n == asked_n) return std::string();
    return "--fit: " + std::to_string(best) + " KV cells (asked " + std::to_string(asked) + ")" +
           (n != asked_n ? ", " + std::to_string(n) + " pipeline groups (asked " +
                               std::to_string(asked_n) + ")"
                         : std::string()) +
           ": the largest that fits the devices' free memory";
  }
  return "--fit: no plan down to " + std::to_string(lo) +
         " KV cells (--fit-ctx) and 1 pipeline group keeps the --fit-target margins free; "
         "trying what was asked";
}

}  // namespace

const std::vector<RopeFlag>& rope_flags() {
  static const std::vector<RopeFlag> flags = {
      {"--rope-scaling", "LLAMA_ARG_ROPE_SCALING_TYPE", "{none,linear,yarn}",
       "rope scaling type (default: the model's)"},
      {"--rope-scale", "LLAMA_ARG_ROPE_SCALE", "N",
       "rope context scaling factor: the context grows N times (freq scale 1/N)"},
      {"--rope-freq-base", "LLAMA_ARG_ROPE_FREQ_BASE", "N",
       "rope base frequency (0: the model's); sliding layers keep theirs"},
      {"--rope-freq-scale", "LLAMA_ARG_ROPE_FREQ_SCALE", "N",
       "rope frequency scale: the context grows 1/N times (0: the model's)"},
      {"--yarn-orig-ctx", "LLAMA_ARG_YARN_ORIG_CTX", "N",
       "YaRN: the context the model was trained with (0: the model's)"},
      {"--yarn-ext-factor", "LLAMA_ARG_YARN_EXT_FACTOR", "N",
       "YaRN: extrapolation mix, 0..1 (negative: the model's, 1 for YaRN)"},
      {"--yarn-attn-factor", "LLAMA_ARG_YARN_ATTN_FACTOR", "N",
       "YaRN: magnitude factor, before YaRN's 1 + 0.1 ln(scale) (negative: the model's)"},
      {"--yarn-beta-slow", "LLAMA_ARG_YARN_BETA_SLOW", "N",
       "YaRN: high correction dim, in rotations (negative: the model's, 1)"},
      {"--yarn-beta-fast", "LLAMA_ARG_YARN_BETA_FAST", "N",
       "YaRN: low correction dim, in rotations (negative: the model's, 32)"},
  };
  return flags;
}

Status set_rope_flag(RopeOverrides& o, std::string_view flag, const std::string& text) {
  if (flag == "--rope-scaling") {
    const std::optional<RopeScaling> t = rope_scaling_from_name(text);
    if (!t || *t == RopeScaling::kLongrope) {
      return invalid_argument("'" + text + "' is not one of none, linear, yarn");
    }
    o.type = t;
    return Status::ok();
  }
  if (flag == "--yarn-orig-ctx") {
    Result<int64_t> n = parse_arg_int(text, 0, int64_t{1} << 24);
    if (!n.is_ok()) return n.status();
    if (n.value() > 0) o.yarn_orig_ctx = n.value();
    return Status::ok();
  }
  // The float flags: where the value goes, its range, and which values are llama.cpp's
  // "from the model".
  enum class Unset { kNever, kZero, kNegative };
  struct Float {
    std::string_view name;
    std::optional<float> RopeOverrides::*field;
    double lo, hi;
    Unset unset;
  };
  static constexpr Float kFloats[] = {
      {"--rope-scale", &RopeOverrides::scale, 1e-3, 1e4, Unset::kNever},
      {"--rope-freq-base", &RopeOverrides::freq_base, 1, 1e10, Unset::kZero},
      {"--rope-freq-scale", &RopeOverrides::freq_scale, 1e-4, 1e3, Unset::kZero},
      {"--yarn-ext-factor", &RopeOverrides::yarn_ext_factor, 0, 1, Unset::kNegative},
      {"--yarn-attn-factor", &RopeOverrides::yarn_attn_factor, 1e-3, 100, Unset::kNegative},
      {"--yarn-beta-slow", &RopeOverrides::yarn_beta_slow, 1e-3, 1e4, Unset::kNegative},
      {"--yarn-beta-fast", &RopeOverrides::yarn_beta_fast, 1e-3, 1e4, Unset::kNegative},
  };
  for (const Float& f : kFloats) {
    if (f.name != flag) continue;
    Result<double> x = parse_arg_double(text, -1e30, 1e30);
    if (!x.is_ok()) return x.status();
    if ((f.unset == Unset::kZero && x.value() == 0) ||
        (f.unset == Unset::kNegative && x.value() < 0)) {
      (o.*f.field).reset();
      return Status::ok();
    }
    x = parse_arg_double(text, f.lo, f.hi);
    if (!x.is_ok()) return x.status();
    o.*f.field = static_cast<float>(x.value());
    return Status::ok();
  }
  return invalid_argument(std::string(flag) + " is not a rope flag");
}

Status add_kv_overrides(std::vector<GgufKv>& out, const std::string& text) {
  for (const std::string& item : split_commas(text)) {
    STRATA_ASSIGN_OR_RETURN(GgufKv kv, parse_kv_override(item));
    out.push_back(std::move(kv));
  }
  return Status::ok();
}

bool weights_mapped(std::optional<bool> use_mmap, uint64_t weight_bytes, uint64_t free_bytes) {
  if (use_mmap) return *use_mmap;
  return weight_bytes > free_bytes / 2;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Result<Loaded> load_model(const LoadOptions& options, int32_t n_seq) {
  if (options.model_path.empty()) return invalid_argument("-m FILE is required");
  if (!kv_dtype_supported(options.kv_dtype)) {
    return invalid_argument("the KV cache type must be f16, f32 or q8_0");
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                          Model::open(options.model_path, options.kv_overrides));
  return load_model(std::move(model), options, n_seq);
}

Result<Loaded> load_model(std::unique_ptr<Model> model, const LoadOptions& options, int32_t n_seq) {
  STRATA_RETURN_IF_ERROR(model->override_rope(options.rope));
  // Before any plan is made for it (--fit sizes KV caches of this dtype).
  STRATA_RETURN_IF_ERROR(kv_dtype_check(options.kv_dtype, model->hparams()));
  if (options.n_contexts < 1) return invalid_argument("contexts must be at least 1");
  const int threads = options.n_threads > 0
                          ? options.n_threads
                          : std::max<int>(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t train_ctx = model->hparams().n_ctx_train;
  const int64_t n_layer = model->hparams().n_layer;
  int64_t n_ctx = options.n_ctx;
  if (n_ctx == 0) n_ctx = std::min<int64_t>(train_ctx, 4096);
  n_ctx = std::max(n_ctx, options.min_ctx);

  std::vector<std::unique_ptr<Device>> all;
  CpuDeviceOptions cpu;
  cpu.n_threads = threads;
  cpu.memory_limit = options.cpu_memory_limit;
  all.push_back(cpu_device_new(cpu));
  STRATA_RETURN_IF_ERROR(add_remote_devices(options, all));
  STRATA_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Device>> devices,
                          order_devices(std::move(all), options.devices));
  if (!options.tensor_split.empty() && options.tensor_split.size() != devices.size()) {
    return invalid_argument("--tensor-split has " + std::to_string(options.tensor_split.size()) +
                            " values for " + std::to_string(devices.size()) +
                            " devices (one per device, in --device order)");
  }
  EngineOptions eo;
  eo.split = options.tensor_split;
  eo.context_shift = options.context_shift;
  eo.backend_sampling = options.backend_sampling;
  if (options.n_gpu_layers) {
    STRATA_ASSIGN_OR_RETURN(eo.split, split_for_gpu_layers(options, devices, n_layer));
  }
  eo.n_ctx = n_ctx;
  eo.n_contexts = options.n_contexts;
  eo.kv_dtype = options.kv_dtype;
  eo.n_batch = options.n_batch;
  eo.progress = options.progress;
  eo.repack = options.repack;
  eo.use_mmap = weights_mapped(
      options.use_mmap, model->total_weight_bytes(),
      options.cpu_memory_limit != 0 ? options.cpu_memory_limit : host_memory_available());
  Loaded out;
  if (options.fit.on) {
    const int64_t min_cells = std::max<int64_t>({options.min_ctx, 2 * int64_t{n_seq}, 1});
    STRATA_ASSIGN_OR_RETURN(out.fit_note, fit_plan(*model, devices, options.fit, min_cells, eo));
  }
  auto engine = Engine::create(std::move(model), std::move(devices), eo);
  if (!engine.is_ok()) {
    return out.fit_note.empty() ? engine.status() : engine.status().with_context(out.fit_note);
  }
  out.engine = std::move(engine).value();
  out.n_ctx = eo.n_ctx;
  out.n_contexts = eo.n_contexts;
  if (eo.n_contexts > 1 || !options.make_context) return out;
  ContextParams cp;
  cp.n_ctx = eo.n_ctx;
  cp.n_batch = options.n_batch;
  cp.n_seq = n_seq;
  cp.n_ctx_seq = eo.n_ctx / std::max<int64_t>(n_seq, 1);  // what one sequence may use
  cp.kv_dtype = options.kv_dtype;
  cp.embeddings = options.embeddings;
  STRATA_ASSIGN_OR_RETURN(out.context, Context::create(*out.engine, cp));
  return out;
}

}  // namespace strata::server
