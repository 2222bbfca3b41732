// strata worker [--host [ucx://]127.0.0.1[:PORT]] [--port 50052] [--unix PATH] [-t THREADS]
//               [--mem BYTES] [--cache DIR] [--auth-token-file FILE] [--idle-timeout SECONDS]
//               [--hide-caps MASK]
// Serves this machine's CPU to `strata run/serve --rpc`. Stops on SIGINT or SIGTERM.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "commands.h"
#include "flags.h"
#include "rpc/auth.h"
#include "rpc/worker.h"

namespace strata::tools {
namespace {

// The listening address from --host (which may name a transport: "ucx://10.0.0.1", or carry
// the port itself: "ucx://10.0.0.1:50052"), --port and --unix.
Result<std::string> worker_address(const Flags& flags) {
  if (flags.has("--unix")) return "unix:" + *flags.get("--unix");
  STRATA_ASSIGN_OR_RETURN(int64_t port, flags.get_int("--port", 50052, 0, 65535));
  std::string host = flags.get_or("--host", "127.0.0.1");
  std::string scheme;
  for (const char* s : {"tcp", "ucx"}) {
    for (const std::string& prefix : {std::string(s) + "://", std::string(s) + ":"}) {
      if (scheme.empty() && host.rfind(prefix, 0) == 0) {
        scheme = std::string(s) + ":";
        host = host.substr(prefix.size());
      }
    }
  }
  const size_t colons = static_cast<size_t>(std::count(host.begin(), host.end(), ':'));
  const bool bracketed = !host.empty() && host.front() == '[';
  const bool has_port =
      (colons == 1 && !bracketed) || (bracketed && host.find("]:") != std::string::npos);
  if (has_port) {
    if (flags.has("--port")) {
      return invalid_argument("--host " + *flags.get("--host") +
                              " names a port, and so does --port");
    }
    return scheme + host;
  }
  return scheme + (colons > 0 && !bracketed ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// "67108864", "64M", "64MiB", "2G": bytes, or with a binary unit (K, M, G; "iB" optional).
Result<uint64_t> parse_bytes(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string unit = text.substr(digits);
  if (unit.size() == 3 && unit.compare(1, 2, "iB") == 0) unit = unit.substr(0, 1);
  int shift = -1;
  for (auto [name, s] : {std::pair{"", 0}, {"K", 10}, {"M", 20}, {"G", 30}}) {
    if (unit == name) shift = s;
  }
  // At most 2^50 bytes (a PiB): a cap past that is a typo, and the shift below stays in range.
  if (digits == 0 || digits > 16 || shift < 0) {
    return invalid_argument("--mem '" + text + "': a byte count, optionally with K, M or G");
  }
  const uint64_t n = std::stoull(text.substr(0, digits));
  if (n > (uint64_t{1} << (50 - shift))) {
    return invalid_argument("--mem '" + text + "': more than 2^50 bytes");
  }
  return n << shift;
}

Result<rpc::WorkerOptions> worker_options(const Flags& flags) {
  rpc::WorkerOptions o;
  STRATA_ASSIGN_OR_RETURN(o.address, worker_address(flags));
  STRATA_ASSIGN_OR_RETURN(int64_t threads,
                          flags.get_int("--threads", std::thread::hardware_concurrency(), 1, 1024));
  o.n_threads = static_cast<int>(threads);
  if (auto mem = flags.get("--mem")) {
    STRATA_ASSIGN_OR_RETURN(o.memory_limit, parse_bytes(*mem));
  }
  o.cache_dir = flags.get_or("--cache", "");
  STRATA_ASSIGN_OR_RETURN(o.auth_token,
                          rpc::auth_token_load(flags.get_or("--auth-token-file", "")));
  STRATA_ASSIGN_OR_RETURN(int64_t hide, flags.get_int("--hide-caps", 0, 0, INT64_MAX));
  o.hide_caps = static_cast<uint64_t>(hide);
  STRATA_ASSIGN_OR_RETURN(int64_t idle, flags.get_int("--idle-timeout", 600, 0, INT32_MAX / 1000));
  o.idle_timeout_ms = static_cast<int>(idle * 1000);
  // For tests only (not in --help): pose as a worker of another major protocol version.
  STRATA_ASSIGN_OR_RETURN(int64_t major,
                          flags.get_int("--protocol-major", rpc::kVersionMajor, 0, 65535));
  o.version_major = static_cast<uint16_t>(major);
  // For tests only (not in --help): pose as a worker without these ops or weight dtypes.
  STRATA_ASSIGN_OR_RETURN(o.hide_ops, op_set_from_names(flags.get_or("--hide-ops", "")));
  STRATA_ASSIGN_OR_RETURN(o.hide_weight_dtypes,
                          dtype_set_from_names(flags.get_or("--hide-dtypes", "")));
  return o;
}

}  // namespace

int cmd_worker(const Args& args) {
  Flags flags(
      {"--host", "--port", "--unix", "-t|--threads", "--mem", "--cache", "--auth-token-file",
       "--hide-caps", "--protocol-major", "--idle-timeout", "--hide-ops", "--hide-dtypes"},
      {"-h|--help"});
  if (Status s = flags.parse(args); !s) return fail("worker", s);
  if (flags.has("--help")) {
    std::printf(
        "usage: strata worker [options]\n"
        "  --host ADDR             address to listen on (default 127.0.0.1: this machine only);\n"
        "                          ucx://ADDR listens with UCX (RDMA, shared memory or TCP, as\n"
        "                          UCX_TLS says) instead of plain TCP; ADDR:PORT sets the port\n"
        "  --port N                port (default 50052; 0 picks a free port)\n"
        "  --unix PATH             listen on a Unix seqpacket socket instead of TCP\n"
        "  -t, --threads N         compute threads (default: all cores)\n"
        "  --mem BYTES             cap on the bytes all clients may allocate, also what the\n"
        "                          worker reports free (64M, 2G...; default: MemAvailable at\n"
        "                          start, under the cgroup's limit)\n"
        "  --cache DIR             keep uploaded weights by content hash, so that a restart\n"
        "                          does not send them again\n"
        "  --auth-token-file FILE  require clients to prove they know this token (or set %s)\n"
        "  --idle-timeout SECONDS  close a client connection silent for this long and free its\n"
        "                          buffers (default 600; 0: never)\n"
        "  --hide-caps MASK        do not advertise these capability bits (compatibility tests)\n",
        rpc::kTokenEnv);
    return 0;
  }
  Result<rpc::WorkerOptions> options = worker_options(flags);
  if (!options) return fail("worker", options.status());
  // A restarted UCX worker takes its port back at once, as the TCP listener's SO_REUSEADDR
  // lets it (UCX reads this when the listener is made; a value set by the user stands).
  ::setenv("UCX_TCP_CM_REUSEADDR", "y", 0);

  // Block the stop signals in every thread; one thread waits for them and stops the worker.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Result<std::unique_ptr<rpc::Worker>> worker = rpc::Worker::start(*options);
  if (!worker) return fail("worker", worker.status());
  if ((*worker)->beyond_loopback() && options->auth_token.empty()) {
    std::fprintf(stderr,
                 "strata worker: WARNING: listening on %s beyond this machine WITHOUT a token:\n"
                 "strata worker: WARNING: anyone who can reach this port can run code on its\n"
                 "strata worker: WARNING: memory. Use --auth-token-file or %s.\n",
                 (*worker)->address().c_str(), rpc::kTokenEnv);
  }
  std::printf("strata worker: listening on %s (%d threads, %s)\n", (*worker)->address().c_str(),
              options->n_threads, options->auth_token.empty() ? "no token" : "token required");
  std::fflush(stdout);

  rpc::Worker* w = worker->get();
  std::thread waiter([w, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "strata worker: signal %d, stopping\n", sig);
    w->stop();
  });
  w->wait();
  waiter.join();
  return 0;
}

}  // namespace strata::tools
