// The workers a split model runs on, as the server sees them: whether each is up, down (its
// connection broke; reconnection attempts with backoff) or restoring (a new connection is open
// and its weights and buffers are being placed again), its RPC counters and its reconnections
// as Prometheus metrics, and its state for /health and /props.
//
// While a worker is not up every decode step would fail, so the server refuses generation
// requests at once (503 with the reason and a Retry-After) rather than queueing requests that
// can only fail. server/worker_recovery.h drives the states; this class keeps them, for the
// HTTP threads to read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/mutex_guarded.h"
#include "core/status.h"
#include "engine/engine.h"
#include "rpc/client.h"
#include "rpc/stats.h"
#include "server/api.h"
#include "server/worker_link.h"

namespace strata::server {

// One worker's counters at scrape time; `endpoint` is "host:port" as given to --rpc.
struct WorkerStats {
  std::string endpoint;
  bool up = true;
  rpc::StatsSnapshot stats;  // every connection to it since the start, added up
  uint64_t reconnect_attempts = 0;
  uint64_t reconnects = 0;  // recoveries: reconnected and restored
  double down_seconds = 0;  // every outage, the current one included
};

// Appends the RPC metric families (each with one # HELP and # TYPE) for `workers`:
//   strata_rpc_messages_total{endpoint, command}
//   strata_rpc_bytes_total{endpoint, command, direction="sent"|"received"}
//   strata_rpc_round_trips_total{endpoint}, strata_rpc_decode_steps_total{endpoint}
//   strata_rpc_weight_bytes_total{endpoint, source="network"|"cache"}
//   strata_rpc_handoff_bytes_total{endpoint}
//   strata_rpc_worker_up{endpoint}
//   strata_rpc_reconnect_attempts_total{endpoint}, strata_rpc_reconnects_total{endpoint}
//   strata_rpc_worker_down_seconds_total{endpoint}
void render_rpc_metrics(std::string& out, const std::vector<WorkerStats>& workers);

class RemoteWorkers {
 public:
  using Clock = WorkerLink::Clock;

  // The remote devices that hold a stage of `engine` (a device without layers is not used).
  // With a policy that is not enabled, a lost worker stays lost.
  RemoteWorkers(const Engine& engine, ReconnectPolicy policy);

  bool empty() const { return devices_.empty(); }
  size_t size() const { return devices_.size(); }
  bool reconnects() const { return policy_.enabled(); }

  // Ok while every worker is up; else kUnavailable naming the first that is not, what broke
  // it and what the server is doing about it ("reconnecting: attempt 3 in 2.0 s; retry later").
  Status status() const;
  // Seconds after which a refused request may be tried again (Retry-After); 0 while every
  // worker is up, or when a lost worker is not reconnected.
  int retry_after_seconds() const;
  // Each worker: name, endpoint, state, and while not up how long, why, the attempts so far
  // and when the next one is; for /health and /props.
  Json json() const;
  std::vector<WorkerStats> snapshot() const;
  void render_metrics(std::string& out) const { render_rpc_metrics(out, snapshot()); }

  // --- For the recovery (one thread) ---
  Device& device(size_t i) const { return *devices_[i]; }
  // "RPC1[127.0.0.1:50052]".
  std::string label(size_t i) const;
  LinkState state(size_t i) const;
  // Up workers whose connection broke are down from `now`; returns them.
  std::vector<size_t> mark_lost(Clock::time_point now);
  // Down workers whose next attempt is due.
  std::vector<size_t> due(Clock::time_point now) const;
  // An attempt: opens a new connection to worker i (with the options of its last one) and
  // makes it the device's (rpc::remote_device_set_connection); restoring on success, down
  // with the next attempt scheduled on failure. The connect runs without the lock.
  Status reconnect(size_t i);
  // The restore after a successful attempt: worker i is up (returns how long it was down and
  // after how many attempts, for the log), or down again (`why`).
  std::string restored(size_t i);
  void restore_failed(size_t i, const std::string& why);
  // Whether every worker is up; whether any is down (none restoring or up counts).
  bool all_up() const;
  bool any_down() const;
  // When the earliest due attempt is (Clock::time_point::max() when none is scheduled).
  Clock::time_point next_attempt() const;
  // "attempt 3 failed; the next in 2.0 s": worker i after a failed attempt, for the log.
  std::string backoff(size_t i) const;

 private:
  // What changes of worker i, under the lock.
  struct Link {
    WorkerLink link;
    rpc::StatsSnapshot retired;  // the counters of its earlier connections, added up
  };
  std::string describe_locked(size_t i, const Link& l, Clock::time_point now) const;

  ReconnectPolicy policy_;
  std::vector<Device*> devices_;           // fixed at construction
  MutexGuarded<std::vector<Link>> links_;  // one per device
};

}  // namespace strata::server
