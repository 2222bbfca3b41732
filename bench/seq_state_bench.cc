// What saving and restoring a sequence's state costs, beside the prompt evaluation a restore
// saves. Needs a model: STRATA_BENCH_MODEL=FILE (for instance `strata gguf gen --n-embd 2048
// --n-layer 16 --n-head 32 --n-head-kv 8 --n-ff 5632 --n-vocab 32000 --dtype q4_0 -o FILE`);
// STRATA_BENCH_TOKENS sets the sequence length (default 2048). "local" runs on one CPU device,
// "worker" puts the second half of the layers on a worker over loopback. Nothing is asserted.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"

namespace strata {
namespace {

int64_t bench_tokens() {
  const char* env = std::getenv("STRATA_BENCH_TOKENS");
  return env != nullptr ? std::max<int64_t>(1, std::atoll(env)) : 2048;
}

// One engine (and worker) and context per configuration for the whole run: loading is not
// measured, and the prompt is evaluated once for all the benchmarks that need it.
struct Setup {
  std::unique_ptr<rpc::Worker> worker;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Context> ctx;  // destroyed first
  std::string error;
};

std::unique_ptr<Context> make_context(const Engine& e);

Setup make_setup(bool with_worker) {
  Setup s;
  const char* path = std::getenv("STRATA_BENCH_MODEL");
  if (path == nullptr) {
    s.error = "set STRATA_BENCH_MODEL to a GGUF file";
    return s;
  }
  auto model = Model::open(path);
  if (!model.is_ok()) {
    s.error = model.status().message();
    return s;
  }
  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions co;
  co.n_threads = 2;
  devices.push_back(cpu_device_new(co));
  EngineOptions eo;
  eo.split = {1};
  if (with_worker) {
    rpc::WorkerOptions wo;
    wo.address = "127.0.0.1:0";
    wo.n_threads = 2;
    wo.log = false;
    auto w = rpc::Worker::start(wo);
    if (!w.is_ok()) {
      s.error = w.status().message();
      return s;
    }
    s.worker = std::move(w).value();
    rpc::ClientOptions rc;
    rc.endpoint = s.worker->address();
    rc.name = "RPC0";
    auto remote = rpc::remote_device_new(rc);
    if (!remote.is_ok()) {
      s.error = remote.status().message();
      return s;
    }
    devices.push_back(std::move(remote).value());
    eo.split = {1, 1};
  }
  auto e = Engine::create(std::move(model).value(), std::move(devices), eo);
  if (!e.is_ok()) {
    s.error = e.status().message();
    return s;
  }
  s.engine = std::move(e).value();
  s.ctx = make_context(*s.engine);
  if (!s.ctx) s.error = "cannot create the context";
  return s;
}

Setup& setup(bool with_worker) {
  static Setup local = make_setup(false);
  if (!with_worker) return local;
  static Setup remote = make_setup(true);
  return remote;
}

std::unique_ptr<Context> make_context(const Engine& e) {
  ContextParams cp;
  cp.n_ctx = bench_tokens() + 16;
  cp.n_batch = 512;
  auto c = Context::create(e, cp);
  return c.is_ok() ? std::move(c).value() : nullptr;
}

Status prefill(Context& ctx, int64_t n) {
  ctx.clear();
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.add(static_cast<int32_t>(1 + (i * 7919) % (ctx.n_vocab() - 1)), static_cast<int32_t>(i), 0,
          i + 1 == n);
  }
  return ctx.decode(b);
}

// arg 0: local, 1: with a worker.
void BM_SeqStatePromptEval(benchmark::State& state) {
  Setup& s = setup(state.range(0) == 1);
  if (!s.ctx) return state.SkipWithError(s.error.c_str());
  for (auto _ : state) {
    if (Status st = prefill(*s.ctx, bench_tokens()); !st)
      return state.SkipWithError(st.message().c_str());
  }
  state.counters["tokens"] = static_cast<double>(bench_tokens());
}

void BM_SeqStateSave(benchmark::State& state) {
  Setup& s = setup(state.range(0) == 1);
  if (!s.ctx) return state.SkipWithError(s.error.c_str());
  Context* ctx = s.ctx.get();
  if (ctx->seq_len(0) != bench_tokens()) {
    if (Status st = prefill(*ctx, bench_tokens()); !st)
      return state.SkipWithError(st.message().c_str());
  }
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto saved = ctx->seq_state_save(0);
    if (!saved.is_ok()) return state.SkipWithError(saved.status().message().c_str());
    bytes = saved->size();
    benchmark::DoNotOptimize(saved->data());
  }
  state.counters["MiB"] = static_cast<double>(bytes) / (1 << 20);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_SeqStateRestore(benchmark::State& state) {
  Setup& s = setup(state.range(0) == 1);
  if (!s.ctx) return state.SkipWithError(s.error.c_str());
  Context* ctx = s.ctx.get();
  if (ctx->seq_len(0) != bench_tokens()) {
    if (Status st = prefill(*ctx, bench_tokens()); !st)
      return state.SkipWithError(st.message().c_str());
  }
  auto saved = ctx->seq_state_save(0);
  if (!saved.is_ok()) return state.SkipWithError(saved.status().message().c_str());
  for (auto _ : state) {
    if (Status st = ctx->seq_state_restore(0, *saved); !st) {
      return state.SkipWithError(st.message().c_str());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * saved->size()));
}

// Writing to and reading from the temp directory's file system (page cache on a warm run).
void BM_SeqStateFile(benchmark::State& state) {
  Setup& s = setup(false);
  if (!s.ctx) return state.SkipWithError(s.error.c_str());
  Context* ctx = s.ctx.get();
  if (ctx->seq_len(0) != bench_tokens()) {
    if (Status st = prefill(*ctx, bench_tokens()); !st)
      return state.SkipWithError(st.message().c_str());
  }
  auto saved = ctx->seq_state_save(0);
  if (!saved.is_ok()) return state.SkipWithError(saved.status().message().c_str());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata_bench_state_" + std::to_string(::getpid())))
                               .string();
  for (auto _ : state) {
    if (state.range(0) == 0) {
      if (Status st = seq_state_write_file(path, *saved); !st) {
        return state.SkipWithError(st.message().c_str());
      }
    } else {
      state.PauseTiming();
      (void)seq_state_write_file(path, *saved);
      state.ResumeTiming();
      auto back = seq_state_read_file(path, ctx->seq_state_max_bytes());
      if (!back.is_ok()) return state.SkipWithError(back.status().message().c_str());
    }
  }
  std::filesystem::remove(path);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * saved->size()));
}

BENCHMARK(BM_SeqStatePromptEval)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SeqStateSave)->Arg(0)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SeqStateRestore)->Arg(0)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);
// arg 0: write, 1: read.
BENCHMARK(BM_SeqStateFile)->Arg(0)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata
