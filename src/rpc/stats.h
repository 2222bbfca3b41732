// Counters of what a client sends to one worker, and how they read per decode step.
//
// Every message is counted by command: how many, bytes sent and bytes received (headers
// included). Messages are split into the ones a stream sends while decoding (writes, graphs,
// reads, synchronize) and the rest (handshake, buffers, weights), so that "messages per decode
// step" means what a step costs, not the load. A step is one graph sent (GRAPH_COMPUTE or
// GRAPH_RECOMPUTE, or HANDOFF_COMPUTE). A hand-off is counted too: the bytes a worker sent
// straight to the next stage's worker on the client's behalf, which cross a network without
// passing through the client's counters otherwise. Counters are atomics: any thread may count, any
// thread may read a snapshot (the server exports them as Prometheus metrics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "rpc/protocol.h"

namespace strata::rpc {

struct CommandCounters {
  uint64_t count = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// A copy of the counters at one moment; differences of two give a period's numbers.
struct StatsSnapshot {
  std::array<CommandCounters, kCommandLast + 1> commands{};  // indexed by Command
  uint64_t steps = 0;                                        // graphs sent
  uint64_t step_messages = 0;                                // messages sent by streams
  uint64_t step_round_trips = 0;  // requests of streams (each waits for its response)
  uint64_t step_bytes_sent = 0;
  uint64_t step_bytes_received = 0;
  uint64_t round_trips = 0;              // all requests
  uint64_t weight_bytes_sent = 0;        // weight bytes that crossed the network
  uint64_t weight_bytes_cached = 0;      // weight bytes the worker had in its cache (not sent)
  uint64_t weight_bytes_large_sent = 0;  // of weight_bytes_sent: chunks of >= 1 MiB
  uint64_t handoffs = 0;                 // outputs sent to the next stage's worker
  uint64_t handoff_bytes = 0;            // their bytes, worker to worker

  StatsSnapshot operator-(const StatsSnapshot& before) const;
};

class RpcStats {
 public:
  // A message sent; `step` when a stream sent it while decoding.
  void on_send(Command c, uint64_t bytes, bool request, bool step);
  // A response received for a request of command c.
  void on_receive(Command c, uint64_t bytes, bool step);
  void on_weights(uint64_t sent, uint64_t cached, bool large);
  // A computation that sends `bytes` of its output to the next stage's worker.
  void on_handoff(uint64_t bytes);
  StatsSnapshot snapshot() const;

 private:
  struct Atomic {
    std::atomic<uint64_t> count{0}, bytes_sent{0}, bytes_received{0};
  };
  std::array<Atomic, kCommandLast + 1> commands_;
  std::atomic<uint64_t> steps_{0}, step_messages_{0}, step_round_trips_{0}, step_bytes_sent_{0},
      step_bytes_received_{0}, round_trips_{0}, weight_sent_{0}, weight_cached_{0},
      weight_large_sent_{0}, handoffs_{0}, handoff_bytes_{0};
};

// The report of one period (or of the whole connection when `period` is "total"), one line per
// command used, then the per-step averages:
//   rpc RPC0[127.0.0.1:5000] total: 41 messages, 12 round trips, 1.2 MiB sent, 80.0 KiB received
//     GRAPH_RECOMPUTE        count 32  sent 1024  received 0
//   ...
//     per step (32 steps): 3.00 messages, 1.00 round trips, 1200 bytes sent, 1600 bytes received
//     hand-off: 32 sends to the next stage's worker, 4096 bytes per step, worker to worker
//     weights: 0 bytes sent (0 in chunks >= 1 MiB), 5242880 bytes from the worker's cache
std::string rpc_stats_format(const std::string& endpoint, const std::string& period,
                             const StatsSnapshot& s);

}  // namespace strata::rpc
