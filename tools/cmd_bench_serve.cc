#include <cstdio>
#include <fstream>

#include "commands.h"
#include "flags.h"
#include "load_client.h"

namespace strata::tools {

int cmd_bench_serve(const Args& args) {
  Flags flags({"--url", "-c|--concurrency", "-n|--requests", "--duration", "--prompt-tokens",
               "--max-tokens", "--json", "--model", "--timeout", "--stream-fraction",
               "--disconnect-fraction", "--seed"},
              {"-h|--help", "--stream", "--no-stream"});
  if (Status s = flags.parse(args); !s) return fail("bench serve", s);
  if (flags.has("-h")) {
    std::printf(
        "usage: strata bench serve [--url http://127.0.0.1:8080] [-c CONCURRENCY]\n"
        "         (-n REQUESTS | --duration SECONDS) [--prompt-tokens 128] [--max-tokens 256]\n"
        "         [--json OUT] [--no-stream] [--model NAME] [--timeout SECONDS]\n"
        "         [--stream-fraction F] [--disconnect-fraction F] [--seed N]\n"
        "Closed-loop load on an OpenAI-compatible /v1/completions endpoint: CONCURRENCY\n"
        "clients each keep one request in flight, with a prompt of exactly --prompt-tokens\n"
        "tokens (checked with the server's /tokenize), greedy, --max-tokens with ignore_eos.\n"
        "Prints output tok/s, requests/s, and mean/p50/p99 of time to first token (TTFT),\n"
        "time per output token after the first (TPOT) and latency. Streams by default\n"
        "(--stream); --no-stream measures latency only. Soaks: --stream-fraction streams\n"
        "that share of the requests, --disconnect-fraction makes that share of the clients\n"
        "go away mid-request (counted apart, not as errors); draws per request from --seed.\n");
    return 0;
  }
  bench::LoadConfig config;
  config.url = flags.get_or("--url", config.url);
  config.model = flags.get_or("--model", "");
  config.stream = !flags.has("--no-stream");
  auto concurrency = flags.get_int("-c", 1, 1, 4096);
  auto requests = flags.get_int("-n", 0, 0, int64_t{1} << 40);
  auto duration = flags.get_double("--duration", 0);
  auto prompt_tokens = flags.get_int("--prompt-tokens", 128, 1, 1 << 20);
  auto max_tokens = flags.get_int("--max-tokens", 256, 1, 1 << 20);
  auto timeout = flags.get_double("--timeout", 600);
  auto stream_fraction = flags.get_double("--stream-fraction", -1);
  auto disconnect_fraction = flags.get_double("--disconnect-fraction", 0);
  auto seed = flags.get_int("--seed", 1, 0, int64_t{1} << 62);
  for (const Status* s :
       {&concurrency.status(), &requests.status(), &duration.status(), &prompt_tokens.status(),
        &max_tokens.status(), &timeout.status(), &stream_fraction.status(),
        &disconnect_fraction.status(), &seed.status()}) {
    if (!s->is_ok()) return fail("bench serve", *s);
  }
  config.concurrency = static_cast<int>(*concurrency);
  config.n_requests = *requests;
  config.duration_s = *duration;
  config.prompt_tokens = static_cast<int>(*prompt_tokens);
  config.max_tokens = static_cast<int>(*max_tokens);
  config.timeout_s = *timeout;
  config.stream_fraction = *stream_fraction;
  config.disconnect_fraction = *disconnect_fraction;
  config.seed = static_cast<uint64_t>(*seed);
  if (config.stream_fraction > 1 || config.disconnect_fraction < 0 ||
      config.disconnect_fraction > 1) {
    return fail("bench serve",
                invalid_argument("--stream-fraction and --disconnect-fraction are in [0, 1]"));
  }
  if (config.n_requests == 0 && config.duration_s <= 0) {
    return fail("bench serve", invalid_argument("give -n REQUESTS or --duration SECONDS"));
  }
  if (*timeout <= 0) {
    return fail("bench serve", invalid_argument("--timeout must be positive"));
  }

  auto report = bench::run_load(config);
  if (!report) return fail("bench serve", report.status());
  std::fputs(bench::report_text(config, *report).c_str(), stdout);
  if (auto path = flags.get("--json")) {
    std::ofstream out(*path);
    out << bench::report_json(config, *report);
    if (!out) return fail("bench serve", io_error("--json: cannot write '" + *path + "'"));
  }
  return report->errors == 0 ? 0 : 2;
}

}  // namespace strata::tools
