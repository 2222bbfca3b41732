#include "loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "backend/cpu_backend.h"

namespace strata::tools {

std::vector<std::string> model_flags() {
  return {"-m|--model",      "-t|--threads", "-c|--ctx-size",
          "-b|--batch-size", "--kv-type",    "--tensor-split|-ts"};
}

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

  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions cpu;
  cpu.n_threads = static_cast<int>(threads);
  devices.push_back(cpu_device_new(cpu));
  EngineOptions options;
  options.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::create(std::move(model), std::move(devices), options));
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_seq = n_seq;
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
