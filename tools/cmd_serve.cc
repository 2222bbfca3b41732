// `strata serve`: the OpenAI-compatible HTTP server over one model, with -np slots in
// --pipeline-groups contexts.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "flags.h"
#include "loader.h"
#include "server/serve_args.h"
#include "server/server.h"

namespace strata::tools {
namespace {

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
  ~SignalWaiter() { stop(); }
  // Ends the wait (and waits for an on_signal that has begun): what on_signal uses may go after.
  void stop() {
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
  // Before any thread starts (loading starts the CPU device's), so that all inherit the mask.
  SignalWaiter signals;
  server::ServeArgs parsed;
  Result<server::ArgReport> report = server::parse_serve_args(
      args, [](const char* name) { return std::getenv(name); }, parsed);
  if (!report) return fail("serve", report.status());
  if (parsed.help) {
    std::printf("%s", server::serve_help().c_str());
    return 0;
  }
  if (parsed.version) {
    std::printf("strata serve (llama-server compatible flags and endpoints)\n");
    return 0;
  }
  server::ServerOptions& options = parsed.options;
  if (parsed.list_devices) {
    std::printf("CPU\n");
    for (size_t i = 0; i < options.load.rpc.size(); ++i) {
      std::printf("RPC%zu %s\n", i, options.load.rpc[i].c_str());
    }
    return 0;
  }
  auto log = server::Log::open(parsed.log);
  if (!log) return fail("serve", log.status());
  options.log = std::move(*log);
  for (const std::string& note : report->notes) {
    options.log->write(server::LogLevel::kWarning, "strata serve: " + note);
  }

  options.router.args = args;
  ProgressBar bar("loading " + options.load.model_path);
  options.load.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  auto server = server::Server::create(options);
  if (!server) return fail("serve", server.status());
  // A client that disconnects must fail a write, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  if (Status s = (*server)->bind(); !s) return fail("serve", s);
  server::Server& srv = **server;
  signals.start([&srv] { srv.stop(); });
  const bool tls = !options.http.ssl_cert_file.empty();
  std::printf("strata serve: listening on %s://%s:%d%s (%s)\n", tls ? "https" : "http",
              options.http.host.c_str(), srv.port(), options.http.api_prefix.c_str(),
              srv.summary().c_str());
  std::fflush(stdout);
  const bool ok = srv.listen();
  signals.stop();  // before the server it stops goes
  std::printf("strata serve: stopped\n");
  return ok ? 0 : 1;
}

}  // namespace strata::tools
