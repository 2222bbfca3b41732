#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "core/isa.h"
#include "core/membw.h"
#include "core/thread_pool.h"
#include "flags.h"
#include "graph/graph.h"
#include "graph/op_table.h"
#include "load_client.h"
#include "loader.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Context::create refuses a larger KV cache; say so before loading the model.
constexpr int64_t kMaxCells = int64_t{1} << 24;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Token ids that are valid for any vocabulary and not all the same.
int32_t bench_token(int64_t i, int64_t n_vocab) {
  return static_cast<int32_t>((i * 7919 + 11) % n_vocab);
}

// A flag that takes a comma list of sizes in [1, max]; `what` names one item in errors.
struct ListFlag {
  const char* name;
  const char* fallback;
  const char* what;
  int64_t max;
};

// Sequences: a context holds at most 4096. Tokens: the range -p always had.
constexpr ListFlag kPromptSizes = {"-p", "128", "a prompt size", 1 << 16};
constexpr ListFlag kBatches = {"--batches", "1,4,16", "a batch size", 4096};
constexpr ListFlag kBatchedPrompts = {"--pp", "128", "a prompt size", 1 << 16};
constexpr ListFlag kBatchedGen = {"--tg", "32", "a generation length", 1 << 16};
constexpr ListFlag kBatchedSeqs = {"--pl", "1,4,16", "a number of sequences", 4096};

Result<std::vector<int64_t>> parse_list(const Flags& flags, const ListFlag& flag) {
  std::vector<int64_t> out;
  for (const std::string& item : server::split_commas(flags.get_or(flag.name, flag.fallback))) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > flag.max) {
      return invalid_argument(std::string(flag.name) + ": '" + item + "' is not " + flag.what +
                              " in [1, " + std::to_string(flag.max) + "]");
    }
    out.push_back(v);
  }
  return out;
}

int64_t largest(const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

Status check_cells(int64_t cells, const std::string& why) {
  if (cells <= kMaxCells) return Status::ok();
  return out_of_range(why + " needs " + std::to_string(cells) + " KV cells, more than " +
                      std::to_string(kMaxCells));
}

void print_model_line(const Model& model, int64_t threads) {
  std::printf("model: %s, %s, %.1f MiB of weights; %lld threads; isa %s\n",
              model.hparams().arch_name.c_str(), model.file().path().c_str(),
              model.total_weight_bytes() / 1048576.0, static_cast<long long>(threads),
              isa_name(isa_active()));
}

// The read rate the bound divides by, from a pool of its own that is gone before any run
// (its threads would otherwise poll beside the context's), over a buffer of `mib` MiB.
double probe_bandwidth(int64_t threads, int64_t mib) {
  ThreadPool pool(static_cast<int>(threads));
  return measure_read_bandwidth(pool, static_cast<size_t>(mib) << 20);
}

// A profile (--ops): the time by op of `steps` decode steps that took `seconds`, `what` naming
// them.
struct OpProfile {
  explicit OpProfile(std::string w) : what(std::move(w)) {}
  std::string what;
  OpTimes times;
  int64_t steps = 0;
  double seconds = 0;
};

// Per step, largest first, then what the steps spent outside the CPU's ops (sampling, the
// graph's inputs and outputs, other devices). With several CPU stages their ops overlap in
// time, and the shares can add up past 100%.
void print_op_profile(const OpProfile& p) {
  const double seconds = p.seconds;
  std::array<double, kOpIdLimit> op_s{};
  std::array<int64_t, kOpIdLimit> calls{};
  for (uint32_t id = 0; id < kOpIdLimit; ++id) {
    op_s[id] = static_cast<double>(p.times[id].ns.load()) * 1e-9;
    calls[id] = p.times[id].calls.load();
  }
  std::printf("ops of %s (CPU stages, mean of %lld steps):\n", p.what.c_str(),
              static_cast<long long>(p.steps));
  std::printf("  %-16s %9s %7s %11s %9s\n", "op", "ms/step", "share", "calls/step", "us/call");
  std::vector<uint32_t> ids;
  double in_ops = 0;
  for (uint32_t id = 0; id < kOpIdLimit; ++id) {
    if (calls[id] == 0) continue;
    ids.push_back(id);
    in_ops += op_s[id];
  }
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) { return op_s[a] > op_s[b]; });
  const auto n = static_cast<double>(p.steps);
  for (uint32_t id : ids) {
    const auto c = static_cast<double>(calls[id]);
    std::printf("  %-16s %9.3f %6.1f%% %11.2f %9.2f\n", op_name(static_cast<Op>(id)),
                op_s[id] / n * 1e3, 100 * op_s[id] / seconds, c / n, op_s[id] / c * 1e6);
  }
  const double outside = std::max(0.0, seconds - in_ops);
  std::printf("  %-16s %9.3f %6.1f%%\n", "(outside ops)", outside / n * 1e3,
              100 * outside / seconds);
}

// Prompt tok/s for each -p size, then decode tok/s at each --batches size.
Status bench_decode(const Flags& flags, int64_t reps, int64_t threads) {
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> prompts, parse_list(flags, kPromptSizes));
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> batches, parse_list(flags, kBatches));
  STRATA_ASSIGN_OR_RETURN(int64_t n_gen, flags.get_int("-n", 32, 1, 1 << 16));
  STRATA_ASSIGN_OR_RETURN(const int64_t probe_mib,
                          flags.get_int("--probe-mib", kMemBwDefaultBytes >> 20, 1, 1 << 16));
  const int64_t max_batch = largest(batches);
  // The cache is cleared between runs: it holds the longest prompt or the largest decode run.
  const int64_t cells = std::max(largest(prompts), max_batch * (16 + n_gen)) + 256;
  STRATA_RETURN_IF_ERROR(check_cells(cells, "-p, --batches and -n"));
  STRATA_ASSIGN_OR_RETURN(Loaded loaded, load_model(flags, static_cast<int32_t>(max_batch), cells));
  Context& ctx = *loaded.context;
  const Model& model = ctx.model();
  const int64_t n_vocab = ctx.n_vocab();

  // Bytes a batch-1 decode step must read: every weight but the embedding table, of which it
  // reads one row (unless the output projection is the embedding table itself), and of each
  // layer's experts only the n_expert_used its router picks.
  uint64_t step_bytes = model.total_weight_bytes() - model.token_embd()->size_bytes;
  if (model.output() == model.token_embd()) step_bytes += model.token_embd()->size_bytes;
  const HParams& hp = model.hparams();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    step_bytes -= model.layer_bytes(il) - model.layer_bytes_per_token(il);
  }
  const double bandwidth = probe_bandwidth(threads, probe_mib);
  print_model_line(model, threads);
  std::printf("memory read bandwidth: %.2f GB/s -> batch-1 bound %.1f tok/s (%.1f MiB/token)\n",
              bandwidth / 1e9, bandwidth / static_cast<double>(step_bytes), step_bytes / 1048576.0);
  if (hp.n_expert > 0) {
    std::printf("experts: %lld of %lld per token; %.1f MiB/token active of %.1f MiB of weights\n",
                static_cast<long long>(hp.n_expert_used), static_cast<long long>(hp.n_expert),
                step_bytes / 1048576.0, model.total_weight_bytes() / 1048576.0);
  }

  // Prompt processing: one sequence of n tokens in one call (the context cuts it into
  // micro-batches of -b tokens).
  for (int64_t n : prompts) {
    double best = 1e300;
    for (int64_t r = 0; r < reps; ++r) {
      ctx.clear();
      Batch b;
      for (int64_t i = 0; i < n; ++i) {
        b.add(bench_token(i, n_vocab), static_cast<int32_t>(i), 0, i + 1 == n);
      }
      const auto t = Clock::now();
      STRATA_RETURN_IF_ERROR(ctx.decode(b));
      best = std::min(best, seconds_since(t));
    }
    std::printf("pp%-8lld %10.1f tok/s %10.1f ms\n", static_cast<long long>(n), n / best,
                best * 1e3);
    std::fflush(stdout);
  }

  std::printf("%8s %14s %12s\n", "batch", "decode tok/s", "of bound");
  // --ops: each batch size's steps timed by op, printed after the table.
  const bool ops = flags.has("--ops");
  std::deque<OpProfile> profiles;  // not movable: their counters are atomic
  for (int64_t batch : batches) {
    double best = 0;
    OpProfile& profile = profiles.emplace_back("a decode step at batch " + std::to_string(batch));
    // Batch 1: each run against the mean of the read rates probed just before and just after
    // it. On a shared machine that rate moves by up to 2x within minutes, so a run set against
    // the start-up probe alone could land anywhere from 0.5 to 1 of its bound.
    std::vector<double> fractions, rates;
    for (int64_t r = 0; r < reps; ++r) {
      ctx.clear();
      Batch b;
      for (int64_t s = 0; s < batch; ++s) {
        for (int64_t i = 0; i < 16; ++i) {
          b.add(bench_token(s * 16 + i, n_vocab), static_cast<int32_t>(i), static_cast<int32_t>(s),
                i == 15);
        }
      }
      STRATA_RETURN_IF_ERROR(ctx.decode(b));
      const double rate_before = batch == 1 ? probe_bandwidth(threads, probe_mib) : 0;
      if (ops) ctx.set_op_times(&profile.times);
      const auto t = Clock::now();
      for (int64_t step = 0; step < n_gen; ++step) {
        b.clear();
        for (int64_t s = 0; s < batch; ++s) {
          b.add(bench_token(step + s, n_vocab), ctx.seq_len(static_cast<int32_t>(s)),
                static_cast<int32_t>(s), true);
        }
        STRATA_RETURN_IF_ERROR(ctx.decode(b));
      }
      const double seconds = seconds_since(t);
      ctx.set_op_times(nullptr);
      profile.steps += n_gen;
      profile.seconds += seconds;
      const double tok_s = static_cast<double>(batch * n_gen) / seconds;
      best = std::max(best, tok_s);
      if (batch == 1) {
        rates.push_back(0.5 * (rate_before + probe_bandwidth(threads, probe_mib)));
        fractions.push_back(tok_s * static_cast<double>(step_bytes) / rates.back());
      }
    }
    if (batch == 1) {
      // The median run's fraction: the best run's tok/s over the fastest probe would mix two
      // different minutes of the machine.
      std::printf("%8lld %14.1f %11.2f\n", static_cast<long long>(batch), best,
                  bench::distribution(fractions).p50);
      std::printf("%8s each run: ", "");
      for (size_t i = 0; i < fractions.size(); ++i) {
        std::printf("%s%.2f of %.1f GB/s", i ? ", " : "", fractions[i], rates[i] / 1e9);
      }
      std::printf("\n");
    } else {
      std::printf("%8lld %14.1f %12s\n", static_cast<long long>(batch), best, "");
    }
    std::fflush(stdout);
  }
  if (ops) {
    for (const OpProfile& p : profiles) print_op_profile(p);
  }
  return Status::ok();
}

struct BatchedTimes {
  double pp = 0;  // seconds for all the prompts
  double tg = 0;  // seconds for all the generation steps
};

// One row of the batched mode: pl sequences of pp prompt tokens each, decoded in one call (the
// context cuts it into micro-batches of -b tokens), then tg steps of one token per sequence,
// whose ops are timed into `profile` when given.
Result<BatchedTimes> run_batched(Context& ctx, int64_t pp, int64_t tg, int64_t pl,
                                 OpProfile* profile = nullptr) {
  const int64_t n_vocab = ctx.n_vocab();
  ctx.clear();
  Batch b;
  for (int64_t s = 0; s < pl; ++s) {
    for (int64_t i = 0; i < pp; ++i) {
      // Each sequence wants the logits of its last prompt token, as a server's would.
      b.add(bench_token(s * pp + i, n_vocab), static_cast<int32_t>(i), static_cast<int32_t>(s),
            i + 1 == pp);
    }
  }
  BatchedTimes times;
  auto t = Clock::now();
  STRATA_RETURN_IF_ERROR(ctx.decode(b));
  times.pp = seconds_since(t);
  if (profile != nullptr) ctx.set_op_times(&profile->times);
  t = Clock::now();
  for (int64_t step = 0; step < tg; ++step) {
    b.clear();
    for (int64_t s = 0; s < pl; ++s) {
      b.add(bench_token(step + s, n_vocab), static_cast<int32_t>(pp + step),
            static_cast<int32_t>(s), true);
    }
    STRATA_RETURN_IF_ERROR(ctx.decode(b));
  }
  times.tg = seconds_since(t);
  ctx.set_op_times(nullptr);
  if (profile != nullptr) {
    profile->steps += tg;
    profile->seconds += times.tg;
  }
  return times;
}

// llama-batched-bench's table (prompts not shared): one row per (--pp, --tg, --pl).
Status bench_batched(const Flags& flags, int64_t reps, int64_t threads) {
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> pps, parse_list(flags, kBatchedPrompts));
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> tgs, parse_list(flags, kBatchedGen));
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> pls, parse_list(flags, kBatchedSeqs));
  const int64_t max_pl = largest(pls);
  const int64_t cells = max_pl * (largest(pps) + largest(tgs));
  STRATA_RETURN_IF_ERROR(check_cells(cells, "--pl x (--pp + --tg)"));
  STRATA_ASSIGN_OR_RETURN(Loaded loaded, load_model(flags, static_cast<int32_t>(max_pl), cells));
  Context& ctx = *loaded.context;
  print_model_line(ctx.model(), threads);
  const std::string runs =
      reps == 1 ? "one run" : "the least T of " + std::to_string(reps) + " runs";
  std::printf("n_kv_max %lld, micro-batch %lld tokens (-b), %s per row\n",
              static_cast<long long>(ctx.params().n_ctx),
              static_cast<long long>(ctx.params().n_batch), runs.c_str());

  // Warm-up (first touch of the weights and buffers), outside every row.
  STRATA_RETURN_IF_ERROR(run_batched(ctx, 16, 1, 1).status());

  std::printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B",
              "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
  std::printf(
      "|-------|--------|------|--------|----------|----------|----------|----------|"
      "----------|----------|\n");
  // --ops: each row's generation steps timed by op, printed after the table.
  const bool ops = flags.has("--ops");
  std::deque<OpProfile> profiles;  // not movable: their counters are atomic
  for (int64_t pp : pps) {
    for (int64_t tg : tgs) {
      for (int64_t pl : pls) {
        BatchedTimes best;
        OpProfile& profile =
            profiles.emplace_back("a generation step at PP " + std::to_string(pp) + ", TG " +
                                  std::to_string(tg) + ", B " + std::to_string(pl));
        for (int64_t r = 0; r < reps; ++r) {
          STRATA_ASSIGN_OR_RETURN(BatchedTimes t,
                                  run_batched(ctx, pp, tg, pl, ops ? &profile : nullptr));
          if (r == 0 || t.pp + t.tg < best.pp + best.tg) best = t;
        }
        const int64_t n_kv = pl * (pp + tg);
        const double total = best.pp + best.tg;
        std::printf(
            "|%6lld | %6lld | %4lld | %6lld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n",
            static_cast<long long>(pp), static_cast<long long>(tg), static_cast<long long>(pl),
            static_cast<long long>(n_kv), best.pp, pl * pp / best.pp, best.tg, pl * tg / best.tg,
            total, n_kv / total);
        std::fflush(stdout);
      }
    }
  }
  if (ops) {
    for (const OpProfile& p : profiles) print_op_profile(p);
  }
  return Status::ok();
}

}  // namespace

int cmd_bench_serve(const Args& args);  // cmd_bench_serve.cc

int cmd_bench(const Args& args) {
  if (!args.empty() && args[0] == "serve") {
    return cmd_bench_serve(Args(args.begin() + 1, args.end()));
  }
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(), {"--batches", "-p|--n-prompt", "-n|--n-gen",
                                       "-r|--repetitions", "--pp", "--tg", "--pl", "--probe-mib"});
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(), {"-h|--help", "--ops"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("bench", s);
  if (flags.has("-h")) {
    std::printf(
        "usage: strata bench -m FILE [-t THREADS] [-p 128[,512,...]] [--batches 1,4,16] [-n 32]\n"
        "                    [-r 3] [--ops] [--probe-mib 512]\n"
        "       strata bench -m FILE [-t THREADS] --pp 128[,...] --tg 32[,...] --pl 1,4,16\n"
        "                    [-r 1] [-b 512] [--ops]\n"
        "       strata bench serve ... (a server under load; see strata bench serve --help)\n"
        "Decode mode (the default): prompt tok/s for each -p size (one sequence of that many\n"
        "tokens, a line 'ppN' with the rate and the time), and decode tok/s at each --batches\n"
        "size (that many sequences, one token each per step, -n steps), best of -r runs; for\n"
        "batch 1 also the fraction of the bound that memory bandwidth sets (weight bytes per\n"
        "token / measured read rate; with experts, only the expert_used_count experts a token\n"
        "is routed to count). The rate is probed again just before and after each batch-1 run;\n"
        "each run is set against the mean of its two probes, and the median run is shown.\n"
        "--probe-mib: the probe reads a buffer of this many MiB (1..65536; default 512, past\n"
        "the last-level cache of most CPUs: give more where the cache is larger, less for a\n"
        "quick run whose fractions need not be exact).\n"
        "--ops: then, for each batch size (each row in the batched mode: its generation\n"
        "steps, over all its runs), a decode step's time by op on the CPU's stages\n"
        "(ms per step, share of the step, calls per step, us per call; a pass over several\n"
        "matmuls, with the norm or activation that feeds it, is one mul_mat call), and the\n"
        "time outside them (sampling, the step's inputs and outputs, other devices).\n"
        "Batched mode (given any of --pp, --tg, --pl; the table of llama.cpp's\n"
        "llama-batched-bench, prompts not shared): for every combination of the lists, B (--pl)\n"
        "sequences each get a prompt of PP (--pp) tokens, all decoded in one call cut into\n"
        "micro-batches of -b tokens, then TG (--tg) steps each generate one token per\n"
        "sequence. Columns: N_KV = B*(PP+TG) KV cells; T_PP the prompts' time and S_PP =\n"
        "B*PP/T_PP; T_TG the generation time and S_TG = B*TG/T_TG; T = T_PP+T_TG and S =\n"
        "N_KV/T. One run per row after a warm-up, or with -r N the run of least T of N.\n"
        "Both modes name the kernels' instruction set ('isa', which\n"
        "STRATA_ISA=scalar|avx2|avxvnni|avx512 lowers).\n");
    return 0;
  }
  const bool batched = flags.has("--pp") || flags.has("--tg") || flags.has("--pl");
  if (batched &&
      (flags.has("--batches") || flags.has("-p") || flags.has("-n") || flags.has("--probe-mib"))) {
    return fail("bench", invalid_argument("--batches, -p, -n and --probe-mib are the decode "
                                          "mode's; the batched mode (--pp, --tg, --pl) does not "
                                          "take them"));
  }
  auto reps = flags.get_int("-r", batched ? 1 : 3, 1, 100);
  if (!reps) return fail("bench", reps.status());
  auto threads =
      flags.get_int("-t", std::max<int64_t>(1, std::thread::hardware_concurrency()), 1, 1024);
  if (!threads) return fail("bench", threads.status());
  const Status s =
      batched ? bench_batched(flags, *reps, *threads) : bench_decode(flags, *reps, *threads);
  return s ? 0 : fail("bench", s);
}

}  // namespace strata::tools
