// `strata serve`: the OpenAI-compatible HTTP server over one model, with -np slots in
// --pipeline-groups contexts.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "commands.h"
#include "flags.h"
#include "loader.h"
#include "server/server.h"

namespace strata::tools {
namespace {

constexpr const char* kHelp =
    "usage: strata serve -m FILE [options]\n"
    "An OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /completion,\n"
    "/v1/models, /tokenize, /detokenize, /health, /props, /slots, /metrics.\n\n"
    "  -m, --model FILE          GGUF model\n"
    "      --host HOST           address to listen on (default 127.0.0.1)\n"
    "      --port PORT           port (default 8080; 0 picks a free one, printed at start)\n"
    "  -c, --ctx-size N          KV cells in total, split evenly between the slots\n"
    "                            (default: the training context, at most 4096)\n"
    "  -np, --parallel N         slots: requests decoded together (default 1)\n"
    "  -t, --threads N           CPU threads (default: all cores)\n"
    "  -b, --batch-size N        most tokens per decode step (default 512)\n"
    "      --kv-type f16|f32     KV cache dtype (default f16)\n"
    "      --no-mmap             copy the weights into memory with 2 MiB pages (faster\n"
    "                            decode, slower load) instead of using the file in place\n"
    "      --api-key KEY         require `Authorization: Bearer KEY` (all but /health)\n"
    "      --alias NAME          the model name the API reports and accepts\n"
    "      --chat-template NAME  chat format (default: the model's own template): chatml,\n"
    "                            qwen3, llama2, llama3, llama3.1, mistral-v1, mistral-v3,\n"
    "                            mistral-v3-tekken, mistral-v7, mistral-v7-tekken, gemma,\n"
    "                            phi3, deepseek3, deepseek-r1\n"
    "      --pipeline-groups N   contexts decoded concurrently, each with its share of the\n"
    "                            slots and of the context (default 1)\n"
    "      --threads-http N      HTTP worker threads (default: max(8, 2 x slots + 2))\n"
    "      --rpc H:P,...         split the model over `strata worker`s (devices RPC0, RPC1...)\n"
    "      --device LIST         devices in stage order, e.g. RPC0,RPC1,CPU\n"
    "      --tensor-split S,...  share of the layers per device, in --device order\n"
    "      --rpc-token-file F    the workers' shared secret\n"
    "Requests without a seed get a random one; choice i of an n > 1 request samples with\n"
    "seed + i.\n";

// Waits for SIGINT or SIGTERM on its own thread (signals are blocked everywhere else), so
// that stopping the server is ordinary code rather than a signal handler.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  template <typename F>
  void start(F on_signal) {
    thread_ = std::thread([this, on_signal] {
      int sig = 0;
      sigwait(&set_, &sig);
      if (!quitting_.load()) on_signal();
    });
  }
  ~SignalWaiter() {
    if (thread_.joinable()) {
      quitting_.store(true);
      pthread_kill(thread_.native_handle(), SIGTERM);
      thread_.join();
    }
  }

 private:
  sigset_t set_;
  std::atomic<bool> quitting_{false};  // woken by the destructor, not by a signal
  std::thread thread_;
};

}  // namespace

int cmd_serve(const Args& args) {
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(), {"--host", "--port", "-np|--parallel", "--api-key", "--alias",
                                       "--chat-template", "--pipeline-groups", "--threads-http"});
  // Before any thread starts (loading starts the CPU device's), so that all inherit the mask.
  SignalWaiter signals;
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(), {"-h|--help"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("serve", s);
  if (flags.has("-h")) {
    std::printf("%s", kHelp);
    return 0;
  }
  server::ServerOptions options;
  auto port = flags.get_int("--port", 8080, 0, 65535);
  if (!port) return fail("serve", port.status());
  auto n_slots = flags.get_int("-np", 1, 1, 4096);
  if (!n_slots) return fail("serve", n_slots.status());
  auto n_groups = flags.get_int("--pipeline-groups", 1, 1, 64);
  if (!n_groups) return fail("serve", n_groups.status());
  auto n_http = flags.get_int("--threads-http", 0, 0, 1024);
  if (!n_http) return fail("serve", n_http.status());
  auto load = load_options(flags);
  if (!load) return fail("serve", load.status());
  options.load = std::move(*load);
  options.n_slots = static_cast<int32_t>(*n_slots);
  options.n_groups = static_cast<int32_t>(*n_groups);
  options.http.host = flags.get_or("--host", "127.0.0.1");
  options.http.port = static_cast<int>(*port);
  if (flags.has("--api-key")) options.http.api_keys = {*flags.get("--api-key")};
  options.http.n_threads = static_cast<int>(*n_http);
  options.alias = flags.get_or("--alias", "");
  options.chat_template = flags.get_or("--chat-template", "");

  ProgressBar bar("loading " + options.load.model_path);
  options.load.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  auto server = server::Server::create(options);
  if (!server) return fail("serve", server.status());
  // A client that disconnects must fail a write, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  if (Status s = (*server)->bind(); !s) return fail("serve", s);
  server::Server& srv = **server;
  signals.start([&srv] { srv.stop(); });
  std::printf("strata serve: listening on http://%s:%d (%s)\n", options.http.host.c_str(),
              srv.port(), srv.summary().c_str());
  std::fflush(stdout);
  const bool ok = srv.listen();
  std::printf("strata serve: stopped\n");
  return ok ? 0 : 1;
}

}  // namespace strata::tools
