#include "server/worker_recovery.h"

#include <algorithm>

#include "rpc/remote_backend.h"

namespace strata::server {
namespace {

// How often the thread looks at the connections when no attempt is due sooner.
constexpr std::chrono::milliseconds kPoll{100};

}  // namespace

WorkerRecovery::WorkerRecovery(RemoteWorkers& workers, Engine& engine,
                               std::vector<std::unique_ptr<PipelineGroup>>& groups,
                               IdleSleeper* sleeper, Log* log)
    : workers_(workers), engine_(engine), groups_(groups), sleeper_(sleeper), log_(log) {
  thread_ = std::thread([this] { run(); });
}

WorkerRecovery::~WorkerRecovery() {
  *stopping_.lock() = true;
  stopping_.notify_all();
  thread_.join();
}

void WorkerRecovery::log(LogLevel level, const std::string& line) {
  if (log_ != nullptr) log_->write(level, line);
}

void WorkerRecovery::run() {
  while (!*stopping_.lock()) {
    tick();
    const auto due = std::min(RemoteWorkers::Clock::now() + kPoll, workers_.next_attempt());
    stopping_.lock().wait_until(due, [](bool stopping) { return stopping; });
  }
}

void WorkerRecovery::suspend_groups(const std::string& reason) {
  for (auto& g : groups_) {
    // Refused only while the server stops: nothing is left to recover then.
    (void)g->suspend(reason);
  }
  suspended_ = true;
}

void WorkerRecovery::tick() {
  for (size_t i : workers_.mark_lost(RemoteWorkers::Clock::now())) {
    const std::string reason =
        rpc::remote_device_connection(workers_.device(i))->broken().message();
    log(LogLevel::kWarning, "worker " + workers_.label(i) + " lost: " + reason +
                                "; requests are refused (503) until it is back");
    if (!suspended_) {
      suspend_groups("worker " + workers_.label(i) + " was lost (" + reason +
                     "): the server is reconnecting to it; retry later");
    }
  }
  if (!suspended_ && !workers_.all_up()) suspend_groups(workers_.status().message());

  for (size_t i : workers_.due(RemoteWorkers::Clock::now())) {
    const Status s = workers_.reconnect(i);
    if (!s.is_ok()) {
      log(LogLevel::kWarning, "reconnecting: " + s.message() + " (" + workers_.backoff(i) + ")");
      continue;
    }
    log(LogLevel::kInfo,
        "worker " + workers_.label(i) + " reached again: placing its weights and buffers again");
    if (std::find(renewed_.begin(), renewed_.end(), i) == renewed_.end()) renewed_.push_back(i);
  }

  if (!suspended_ || workers_.any_down()) return;
  const Status s = restore();
  if (s.is_ok()) {
    for (size_t i : renewed_) {
      log(LogLevel::kInfo, "worker " + workers_.label(i) + " restored " + workers_.restored(i) +
                               "; requests are served again");
    }
    renewed_.clear();
    suspended_ = false;
    return;
  }
  // A restored worker that broke again goes back to its attempts; so does every restoring
  // worker when none broke (the cause is on its side: memory, a refused upload). A worker that
  // was up and broke is noticed at the next pass, and the restore waits for it.
  std::vector<size_t> broken;
  bool other_broke = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const bool bad = !rpc::remote_device_connection(workers_.device(i))->broken().is_ok();
    const bool restoring = workers_.state(i) == LinkState::kRestoring;
    if (bad && restoring) broken.push_back(i);
    if (bad && !restoring) other_broke = true;
  }
  if (broken.empty() && !other_broke) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_.state(i) == LinkState::kRestoring) broken.push_back(i);
    }
  }
  for (size_t i : broken) {
    workers_.restore_failed(i, "restore: " + s.message());
    log(LogLevel::kWarning, "restoring worker " + workers_.label(i) + " failed: " + s.message() +
                                " (" + workers_.backoff(i) + ")");
  }
  // A group that resumed before the failure sleeps again.
  suspend_groups(s.message());
}

Status WorkerRecovery::restore() {
  std::vector<const Device*> devices;
  for (size_t i : renewed_) devices.push_back(&workers_.device(i));
  auto body = [&](bool asleep) -> Status {
    if (!asleep) {
      for (size_t i : renewed_) {
        STRATA_RETURN_IF_ERROR(engine_.reload_device(workers_.device(i))
                                   .with_context("placing the weights on " + workers_.label(i)));
      }
    }
    for (auto& g : groups_) {
      STRATA_RETURN_IF_ERROR(
          g->resume(devices, !asleep).with_context("pipeline group " + std::to_string(g->index())));
    }
    return Status::ok();
  };
  return sleeper_ != nullptr ? sleeper_->exclusive(body) : body(false);
}

}  // namespace strata::server
