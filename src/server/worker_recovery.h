// Brings lost workers back without restarting the server; RemoteWorkers keeps their states.
//
// A thread watches the connections (every 100 ms, and at each due attempt). When one breaks:
//   1. Every pipeline group is suspended (PipelineGroup::suspend): the requests that run or
//      wait fail with a 503 naming the worker (they could only fail), requests that arrive are
//      refused with the reason and a Retry-After, each slot keeps its tokens as lost (their KV
//      went with the worker: every context spans every stage), and the contexts free their
//      buffers (Context::sleep).
//   2. The worker is tried again after a wait that doubles with each failure up to a bound
//      (ReconnectPolicy), each attempt logged: a new connection (HELLO, authentication, and a
//      worker that runs at least what the old one ran).
//   3. Once no worker is down, the restore: the weights of the stages of every reconnected
//      worker are placed again (Engine::reload_device: offered by hash first, so a worker that
//      kept its --cache receives none of their bytes), every context's streams on those devices
//      are made anew and its buffers allocated (PipelineGroup::resume), and the groups serve
//      again. A restore that fails sends the worker back to step 2.
// With --sleep-idle-seconds the restore holds the sleeper's lock; while the model sleeps it
// only renews the streams, and waking the model places everything.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "core/mutex_guarded.h"
#include "engine/engine.h"
#include "server/group.h"
#include "server/group_services.h"
#include "server/log.h"
#include "server/workers.h"

namespace strata::server {

class WorkerRecovery {
 public:
  // Starts the thread. The groups must be started; everything outlives the recovery. `sleeper`
  // and `log` may be null.
  WorkerRecovery(RemoteWorkers& workers, Engine& engine,
                 std::vector<std::unique_ptr<PipelineGroup>>& groups, IdleSleeper* sleeper,
                 Log* log);
  ~WorkerRecovery();
  WorkerRecovery(const WorkerRecovery&) = delete;
  WorkerRecovery& operator=(const WorkerRecovery&) = delete;

 private:
  void run();
  // One pass: notices lost workers, suspends the groups, makes the attempts that are due, and
  // restores once no worker is down.
  void tick();
  void suspend_groups(const std::string& reason);
  Status restore();
  void log(LogLevel level, const std::string& line);

  RemoteWorkers& workers_;
  Engine& engine_;
  std::vector<std::unique_ptr<PipelineGroup>>& groups_;
  IdleSleeper* const sleeper_;
  Log* const log_;

  // The recovery thread's own.
  bool suspended_ = false;
  std::vector<size_t> renewed_;  // reconnected workers not restored yet

  MutexGuarded<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace strata::server
