#include "server/model_load.h"

#include <algorithm>
#include <thread>

#include "backend/cpu_backend.h"
#include "rpc/auth.h"
#include "rpc/remote_backend.h"

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

}  // namespace

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
  if (options.kv_dtype != DType::kF16 && options.kv_dtype != DType::kF32) {
    return invalid_argument("the KV cache type must be f16 or f32");
  }
  const int threads = options.n_threads > 0
                          ? options.n_threads
                          : std::max<int>(1, static_cast<int>(std::thread::hardware_concurrency()));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::open(options.model_path));
  const int64_t train_ctx = model->hparams().n_ctx_train;
  const int64_t n_layer = model->hparams().n_layer;
  int64_t n_ctx = options.n_ctx;
  if (n_ctx == 0) n_ctx = std::min<int64_t>(train_ctx, 4096);
  n_ctx = std::max(n_ctx, options.min_ctx);

  std::vector<std::unique_ptr<Device>> all;
  CpuDeviceOptions cpu;
  cpu.n_threads = threads;
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
  eo.kv_dtype = options.kv_dtype;
  eo.n_batch = options.n_batch;
  eo.progress = options.progress;
  eo.use_mmap = options.use_mmap;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::create(std::move(model), std::move(devices), eo));
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = options.n_batch;
  cp.n_seq = n_seq;
  cp.n_ctx_seq = n_ctx / std::max<int64_t>(n_seq, 1);  // what one sequence may use
  cp.kv_dtype = options.kv_dtype;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(*engine, cp));
  return Loaded{std::move(engine), std::move(ctx)};
}

}  // namespace strata::server
