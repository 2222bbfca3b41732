// A child `strata serve` of the router: started, watched, its output relayed to the router's
// log line by line with the model's name in front, and stopped.
//
// Children never outlive the router: they are stopped when it stops, and each one asks the
// kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), which covers a router killed
// without a chance to clean up. That signal fires when the *thread* that forked the child
// exits, so every fork happens on the Spawner's own thread, which lives as long as the router.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex_guarded.h"
#include "core/status.h"
#include "server/log.h"

namespace strata::server {

struct SpawnedProcess {
  pid_t pid = -1;
  int out_fd = -1;  // the child's stdout (read end)
  int err_fd = -1;  // the child's stderr (read end)
};

class Spawner {
 public:
  Spawner();
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Runs `exe` with `argv` (argv[0] excluded) and exactly the environment `env` ("K=V").
  Result<SpawnedProcess> spawn(const std::string& exe, const std::vector<std::string>& argv,
                               const std::vector<std::string>& env);

 private:
  struct Job {
    const std::string* exe;
    const std::vector<std::string>* argv;
    const std::vector<std::string>* env;
    std::promise<Result<SpawnedProcess>> done;
  };
  struct Queue {
    std::deque<Job*> jobs;
    bool quit = false;
  };
  void run();
  MutexGuarded<Queue> queue_;
  std::thread thread_;
};

struct ChildSpec {
  std::string name;  // the model's: prefixes the child's log lines
  std::string exe;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::chrono::seconds start_timeout{600};
};

class ChildServer {
 public:
  // Called once from the child's reader thread when the process has exited: the exit code, or
  // 128 + the signal, and how it ended in words ("exit code 1", "killed by signal 9").
  using ExitFn = std::function<void(int code, const std::string& how)>;

  // Starts the child and waits until it listens (its "listening on 127.0.0.1:PORT" line). A
  // child that exits first, or is not listening within the spec's timeout, is an error naming
  // the model, how it ended and the tail of its output.
  static Result<std::unique_ptr<ChildServer>> start(Spawner& spawner, const ChildSpec& spec,
                                                    Log* log, ExitFn on_exit);
  // Kills the child if it still runs and waits for its reader. Never call it from `on_exit`,
  // nor while holding a lock that `on_exit` takes.
  ~ChildServer();
  ChildServer(const ChildServer&) = delete;
  ChildServer& operator=(const ChildServer&) = delete;

  pid_t pid() const { return pid_; }
  int port() const;
  bool exited() const;
  // SIGTERM (the child shuts down cleanly) and waits up to `grace`; then SIGKILL.
  void stop(std::chrono::seconds grace);
  // SIGTERM without waiting, so that several children shut down at once.
  void terminate();
  // The last lines the child wrote (stdout and stderr), for error messages.
  std::string output_tail() const;

 private:
  ChildServer(const ChildSpec& spec, SpawnedProcess p, Log* log, ExitFn on_exit);
  void read_output();
  void take_line(const std::string& line, bool from_stdout);
  void signal(int sig);
  bool wait_exited(std::chrono::milliseconds timeout);

  struct State {
    int port = 0;
    bool exited = false;
    int exit_code = 0;
    std::string how;
    std::deque<std::string> tail;
  };
  std::string name_;
  pid_t pid_;
  int out_fd_;
  int err_fd_;
  Log* log_;
  ExitFn on_exit_;
  MutexGuarded<State> state_;
  std::thread reader_;
};

}  // namespace strata::server
