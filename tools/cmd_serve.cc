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
#include "server/chat_format.h"
#include "server/group.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/workers.h"

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
  auto port = flags.get_int("--port", 8080, 0, 65535);
  if (!port) return fail("serve", port.status());
  auto n_slots = flags.get_int("-np", 1, 1, 4096);
  if (!n_slots) return fail("serve", n_slots.status());
  auto n_groups = flags.get_int("--pipeline-groups", 1, 1, 64);
  if (!n_groups) return fail("serve", n_groups.status());
  if (*n_groups > *n_slots) {
    return fail("serve", invalid_argument("--pipeline-groups " + std::to_string(*n_groups) +
                                          " needs at least as many slots (-np " +
                                          std::to_string(*n_slots) + ")"));
  }
  auto n_http = flags.get_int("--threads-http", std::max<int64_t>(8, 2 * *n_slots + 2), 1, 1024);
  if (!n_http) return fail("serve", n_http.status());

  // Slots of group g: an even share, the first groups taking the remainder.
  std::vector<int32_t> slots_of;
  for (int64_t g = 0; g < *n_groups; ++g) {
    slots_of.push_back(static_cast<int32_t>(*n_slots / *n_groups + (g < *n_slots % *n_groups)));
  }
  auto loaded = load_model(flags, *n_groups == 1 ? static_cast<int32_t>(*n_slots) : slots_of[0]);
  if (!loaded) return fail("serve", loaded.status());
  const ContextParams base = loaded->context->params();
  const int64_t n_ctx_slot = base.n_ctx / *n_slots;
  if (n_ctx_slot < 2) {
    return fail("serve", invalid_argument("-c " + std::to_string(base.n_ctx) + " leaves " +
                                          std::to_string(n_ctx_slot) + " cells to each of " +
                                          std::to_string(*n_slots) + " slots (need 2 or more)"));
  }

  // Split over workers: their RPC counters join /metrics, and a lost one fails requests fast.
  server::RemoteWorkers workers(*loaded->engine);
  server::Metrics metrics;
  if (!workers.empty()) {
    metrics.add_hook([&workers](std::string& out) { workers.render_metrics(out); });
  }
  std::vector<std::unique_ptr<server::PipelineGroup>> groups;
  for (int64_t g = 0; g < *n_groups; ++g) {
    std::unique_ptr<Context> ctx;
    if (*n_groups == 1) {
      ctx = std::move(loaded->context);
    } else {
      // Each group gets its slots' share of the context; the KV memory in total is unchanged.
      ContextParams cp = base;
      cp.n_seq = slots_of[g];
      cp.n_ctx = n_ctx_slot * slots_of[g];
      cp.n_ctx_seq = n_ctx_slot;
      auto c = Context::create(*loaded->engine, cp);
      if (!c) return fail("serve", c.status());
      ctx = std::move(*c);
    }
    server::GroupParams gp;
    gp.n_slots = slots_of[g];
    gp.n_ctx_slot = static_cast<int32_t>(n_ctx_slot);
    gp.n_batch = base.n_batch;
    gp.publish_cache = *n_groups > 1;
    groups.push_back(std::make_unique<server::PipelineGroup>(static_cast<int32_t>(g),
                                                             std::move(ctx), gp, metrics));
  }
  loaded->context.reset();

  const Model& model = loaded->engine->model();
  auto chat = server::chat_formatter_for(model, flags.get_or("--chat-template", ""));
  if (!chat) return fail("serve", chat.status());

  server::ServerOptions options;
  options.host = flags.get_or("--host", "127.0.0.1");
  options.port = static_cast<int>(*port);
  options.api_key = flags.get_or("--api-key", "");
  options.model_path = *flags.get("-m");
  const size_t slash = options.model_path.find_last_of('/');
  options.model_name =
      flags.get_or("--alias", slash == std::string::npos ? options.model_path
                                                         : options.model_path.substr(slash + 1));
  options.n_threads_http = static_cast<int>(*n_http);
  if (!workers.empty()) options.backend_status = [&workers] { return workers.status(); };

  // A client that disconnects must fail a write, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  for (auto& g : groups) g->start();
  server::HttpServer http(options, model, groups, std::move(*chat), metrics);
  if (Status s = http.bind(); !s) return fail("serve", s);
  signals.start([&http] { http.stop(); });
  std::printf(
      "strata serve: listening on http://%s:%d (%lld slots, %lld pipeline groups, %lld "
      "cells per slot)\n",
      options.host.c_str(), http.port(), static_cast<long long>(*n_slots),
      static_cast<long long>(*n_groups), static_cast<long long>(n_ctx_slot));
  std::fflush(stdout);
  const bool ok = http.listen();
  for (auto& g : groups) g->stop();
  std::printf("strata serve: stopped\n");
  return ok ? 0 : 1;
}

}  // namespace strata::tools
