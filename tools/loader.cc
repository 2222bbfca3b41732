#include "loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backend/cpu_backend.h"
#include "rpc/auth.h"
#include "rpc/remote_backend.h"

namespace strata::tools {

std::vector<std::string> model_switches() { return {"--no-mmap"}; }

std::vector<std::string> model_flags() {
  return {"-m|--model",    "-t|--threads",       "-c|--ctx-size", "-b|--batch-size", "--kv-type",
          "--device|-dev", "--tensor-split|-ts", "--rpc",         "--rpc-token-file"};
}

namespace {

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

Result<std::vector<double>> parse_split(const std::string& text, size_t n_devices) {
  std::vector<double> split;
  for (const std::string& item : split_commas(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 0) || v > 1e9) {
      return invalid_argument("--tensor-split: '" + item + "' is not a share >= 0");
    }
    split.push_back(v);
  }
  if (split.size() != n_devices) {
    return invalid_argument("--tensor-split has " + std::to_string(split.size()) + " values for " +
                            std::to_string(n_devices) +
                            " devices (one per device, in --device order)");
  }
  return split;
}

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

// One device per --rpc endpoint, named RPC0, RPC1... in order.
Status add_remote_devices(const Flags& flags, std::vector<std::unique_ptr<Device>>& devices) {
  const std::optional<std::string> list = flags.get("--rpc");
  if (!list) return Status::ok();
  rpc::ClientOptions base;
  STRATA_RETURN_IF_ERROR(rpc::client_options_from_env(&base));
  STRATA_ASSIGN_OR_RETURN(base.token, rpc::auth_token_load(flags.get_or("--rpc-token-file", "")));
  const std::vector<std::string> endpoints = split_commas(*list);
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (endpoints[i].empty()) return invalid_argument("--rpc: empty endpoint in '" + *list + "'");
    rpc::ClientOptions o = base;
    o.endpoint = endpoints[i];
    o.name = "RPC" + std::to_string(i);
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> d, rpc::remote_device_new(o));
    devices.push_back(std::move(d));
  }
  return Status::ok();
}

}  // namespace

Result<Loaded> load_model(const Flags& flags, int32_t n_seq, int64_t min_ctx) {
  const std::optional<std::string> path = flags.get("-m");
  if (!path) return invalid_argument("-m FILE is required");
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  STRATA_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("-t", hw, 1, 1024));
  STRATA_ASSIGN_OR_RETURN(int64_t n_batch, flags.get_int("-b", 512, 1, 1 << 16));
  const std::string kv_name = flags.get_or("--kv-type", "f16");
  std::optional<DType> kv = dtype_from_name(kv_name);
  if (!kv || (*kv != DType::kF16 && *kv != DType::kF32)) {
    return invalid_argument("--kv-type must be f16 or f32, not '" + kv_name + "'");
  }

  ProgressBar bar("loading " + *path);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::open(*path));
  const int64_t train_ctx = model->hparams().n_ctx_train;
  STRATA_ASSIGN_OR_RETURN(int64_t n_ctx, flags.get_int("-c", 0, 0, 1 << 24));
  if (n_ctx == 0) n_ctx = std::min<int64_t>(train_ctx, 4096);
  n_ctx = std::max(n_ctx, min_ctx);

  std::vector<std::unique_ptr<Device>> all;
  CpuDeviceOptions cpu;
  cpu.n_threads = static_cast<int>(threads);
  all.push_back(cpu_device_new(cpu));
  STRATA_RETURN_IF_ERROR(add_remote_devices(flags, all));
  STRATA_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Device>> devices,
                          order_devices(std::move(all), flags.get("--device")));
  EngineOptions options;
  if (std::optional<std::string> ts = flags.get("--tensor-split")) {
    STRATA_ASSIGN_OR_RETURN(options.split, parse_split(*ts, devices.size()));
  }
  options.n_ctx = n_ctx;
  options.kv_dtype = *kv;
  options.n_batch = n_batch;
  options.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  options.use_mmap = !flags.has("--no-mmap");
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::create(std::move(model), std::move(devices), options));
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_seq = n_seq;
  cp.n_ctx_seq = n_ctx / std::max<int64_t>(n_seq, 1);  // what one sequence may use
  cp.kv_dtype = *kv;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(*engine, cp));
  return Loaded{std::move(engine), std::move(ctx)};
}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fprintf(stderr, "\n");
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (total == 0 || !isatty(STDERR_FILENO)) return;
  const int percent = static_cast<int>(done * 100 / total);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  drawn_ = true;
  const int width = 40;
  const int filled = percent * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled,
               "========================================", width - filled, "", percent);
  std::fflush(stderr);
}

}  // namespace strata::tools
