// The workers a split model runs on, as the server sees them: whether each is still usable, and
// its RPC counters as Prometheus metrics.
//
// A connection to a worker is never re-opened: once one is broken every decode step that needs
// it fails, so the server refuses new requests at once (503, naming the worker) and /health
// reports the failure, rather than queueing requests that can only fail.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "rpc/client.h"
#include "rpc/stats.h"

namespace strata::server {

// One worker's counters at scrape time; `endpoint` is "host:port" as given to --rpc.
struct WorkerStats {
  std::string endpoint;
  bool up = true;
  rpc::StatsSnapshot stats;
};

// Appends the RPC metric families (each with one # HELP and # TYPE) for `workers`:
//   strata_rpc_messages_total{endpoint, command}
//   strata_rpc_bytes_total{endpoint, command, direction="sent"|"received"}
//   strata_rpc_round_trips_total{endpoint}, strata_rpc_decode_steps_total{endpoint}
//   strata_rpc_weight_bytes_total{endpoint, source="network"|"cache"}
//   strata_rpc_handoff_bytes_total{endpoint}
//   strata_rpc_worker_up{endpoint}
void render_rpc_metrics(std::string& out, const std::vector<WorkerStats>& workers);

class RemoteWorkers {
 public:
  // The remote devices that hold a stage of `engine` (a device without layers is not used).
  explicit RemoteWorkers(const Engine& engine);

  bool empty() const { return connections_.empty(); }
  // Ok while every worker is usable; else the error that broke the first broken one, naming it.
  Status status() const;
  std::vector<WorkerStats> snapshot() const;
  void render_metrics(std::string& out) const { render_rpc_metrics(out, snapshot()); }

 private:
  // Shared with the devices: the counters stay readable whatever is destroyed first.
  std::vector<std::shared_ptr<rpc::Connection>> connections_;
};

}  // namespace strata::server
