#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "commands.h"
#include "core/membw.h"
#include "core/thread_pool.h"
#include "flags.h"
#include "loader.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Token ids that are valid for any vocabulary and not all the same.
int32_t bench_token(int64_t i, int64_t n_vocab) {
  return static_cast<int32_t>((i * 7919 + 11) % n_vocab);
}

Result<std::vector<int64_t>> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 4096) {
      return invalid_argument("--batches: '" + item + "' is not a batch size in [1, 4096]");
    }
    out.push_back(v);
  }
  if (out.empty()) return invalid_argument("--batches is empty");
  return out;
}

}  // namespace

int cmd_bench_serve(const Args& args);  // cmd_bench_serve.cc

int cmd_bench(const Args& args) {
  if (!args.empty() && args[0] == "serve") {
    return cmd_bench_serve(Args(args.begin() + 1, args.end()));
  }
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(),
                    {"--batches", "-p|--n-prompt", "-n|--n-gen", "-r|--repetitions"});
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(), {"-h|--help"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("bench", s);
  if (flags.has("-h")) {
    std::printf(
        "usage: strata bench -m FILE [-t THREADS] [--batches 1,4,16] [-p 128] [-n 32] [-r 3]\n"
        "Prompt tok/s (one sequence of -p tokens) and decode tok/s at each batch size (that\n"
        "many sequences, one token each per step, -n steps), best of -r runs; for batch 1 also\n"
        "the bound that memory bandwidth sets (weight bytes per token / measured read rate).\n");
    return 0;
  }
  auto batches = parse_list(flags.get_or("--batches", "1,4,16"));
  if (!batches) return fail("bench", batches.status());
  auto n_prompt = flags.get_int("-p", 128, 1, 1 << 16);
  auto n_gen = flags.get_int("-n", 32, 1, 1 << 16);
  auto reps = flags.get_int("-r", 3, 1, 100);
  if (!n_prompt || !n_gen || !reps) {
    return fail("bench", !n_prompt ? n_prompt.status() : !n_gen ? n_gen.status() : reps.status());
  }
  const int64_t max_batch = *std::max_element(batches->begin(), batches->end());
  const int64_t per_seq = std::max<int64_t>(*n_prompt, 16 + *n_gen);
  auto loaded = load_model(flags, static_cast<int32_t>(max_batch), max_batch * per_seq + 256);
  if (!loaded) return fail("bench", loaded.status());
  Context& ctx = *loaded->context;
  const Model& model = ctx.model();
  const int64_t n_vocab = ctx.n_vocab();

  // Bytes a batch-1 decode step must read: every weight but the embedding table, of which it
  // reads one row (unless the output projection is the embedding table itself).
  uint64_t step_bytes = model.total_weight_bytes() - model.token_embd()->size_bytes;
  if (model.output() == model.token_embd()) step_bytes += model.token_embd()->size_bytes;
  const auto threads =
      flags.get_int("-t", std::max<int64_t>(1, std::thread::hardware_concurrency()), 1, 1024);
  double bandwidth = 0;
  {
    ThreadPool pool(static_cast<int>(*threads));
    bandwidth = measure_read_bandwidth(pool);
  }
  std::printf("model: %s, %s, %.1f MiB of weights; %lld threads\n",
              model.hparams().arch_name.c_str(), model.file().path().c_str(),
              model.total_weight_bytes() / 1048576.0, static_cast<long long>(*threads));
  std::printf("memory read bandwidth: %.2f GB/s -> batch-1 bound %.1f tok/s (%.1f MiB/token)\n",
              bandwidth / 1e9, bandwidth / static_cast<double>(step_bytes), step_bytes / 1048576.0);

  // Prompt processing.
  double best_prompt = 0;
  for (int64_t r = 0; r < *reps; ++r) {
    ctx.clear();
    Batch b;
    for (int64_t i = 0; i < *n_prompt; ++i) {
      b.add(bench_token(i, n_vocab), static_cast<int32_t>(i), 0, i + 1 == *n_prompt);
    }
    const auto t = Clock::now();
    if (Status s = ctx.decode(b); !s) return fail("bench", s);
    best_prompt = std::max(best_prompt, *n_prompt / seconds_since(t));
  }
  std::printf("prompt (%lld tokens): %.1f tok/s\n", static_cast<long long>(*n_prompt), best_prompt);

  std::printf("%8s %14s %12s\n", "batch", "decode tok/s", "of bound");
  for (int64_t batch : *batches) {
    double best = 0;
    for (int64_t r = 0; r < *reps; ++r) {
      ctx.clear();
      Batch b;
      for (int64_t s = 0; s < batch; ++s) {
        for (int64_t i = 0; i < 16; ++i) {
          b.add(bench_token(s * 16 + i, n_vocab), static_cast<int32_t>(i), static_cast<int32_t>(s),
                i == 15);
        }
      }
      if (Status s = ctx.decode(b); !s) return fail("bench", s);
      const auto t = Clock::now();
      for (int64_t step = 0; step < *n_gen; ++step) {
        b.clear();
        for (int64_t s = 0; s < batch; ++s) {
          b.add(bench_token(step + s, n_vocab), ctx.seq_len(static_cast<int32_t>(s)),
                static_cast<int32_t>(s), true);
        }
        if (Status s = ctx.decode(b); !s) return fail("bench", s);
      }
      best = std::max(best, static_cast<double>(batch * *n_gen) / seconds_since(t));
    }
    if (batch == 1) {
      std::printf("%8lld %14.1f %11.2f\n", static_cast<long long>(batch), best,
                  best / (bandwidth / static_cast<double>(step_bytes)));
    } else {
      std::printf("%8lld %14.1f %12s\n", static_cast<long long>(batch), best, "");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace strata::tools
