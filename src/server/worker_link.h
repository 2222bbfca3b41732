// One worker's connection as the server sees it, and when to try to reach the worker again.
//
//   up --lost--> down --connected--> restoring --restored--> up
//                 ^ |                    |
//                 | +------failed--------+   (a failed attempt, or a failed restore)
//                 +--------(waits the backoff, then the next attempt)
//
// "down": the connection broke; an attempt to open a new one is due after a wait that doubles
// with every failure, up to a bound. "restoring": a new connection is open and the server is
// placing the worker's weights and the contexts' buffers on it again. Requests are refused
// until every worker is up again.
//
// Pure state: the caller passes the time (so that tests drive it with a fake clock) and does
// the work (connecting, placing weights) itself. Not thread-safe: the owner locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::server {

struct ReconnectPolicy {
  // The wait before the first attempt: a worker restarted by a supervisor is back soon.
  std::chrono::milliseconds first{250};
  // The wait doubles after each failed attempt, up to this. Bounded so that a worker that
  // comes back after a long outage is found within this much time; each attempt costs one
  // connect (refused at once while nothing listens).
  std::chrono::milliseconds max{8000};

  // STRATA_RPC_RECONNECT_MS: the longest wait in milliseconds (default 8000, at most one
  // hour); 0 turns reconnection off (a lost worker stays lost until the server restarts).
  static Result<ReconnectPolicy> from_env();
  // The same from the variable's text (null or empty: the default).
  static Result<ReconnectPolicy> from_text(const char* value);

  bool enabled() const { return max.count() > 0; }
  // The wait after `failures` failed attempts since the worker was lost.
  std::chrono::milliseconds delay(uint32_t failures) const;
};

enum class LinkState { kUp, kDown, kRestoring };
// "up", "down", "restoring": as /health and /props show it.
const char* link_state_name(LinkState s);

class WorkerLink {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkerLink(ReconnectPolicy policy = {}) : policy_(policy) {}

  LinkState state() const { return state_; }
  // up -> down: the connection broke for `reason`. The first attempt is due after policy.first.
  void lost(Clock::time_point now, std::string reason);
  // down: whether an attempt is due.
  bool due(Clock::time_point now) const;
  Clock::time_point next_attempt() const { return next_; }
  // down -> restoring: an attempt opened a new connection.
  void connected();
  // down or restoring -> down: the attempt, or the restore after it, failed for `why`; the
  // next attempt is due after the doubled wait.
  void failed(Clock::time_point now, std::string why);
  // restoring -> up.
  void restored(Clock::time_point now);

  // Why the worker went down (the connection's error); empty while up.
  const std::string& reason() const { return reason_; }
  // The error of the last failed attempt of this outage; empty when none failed.
  const std::string& last_error() const { return last_error_; }
  // Failed attempts of this outage.
  uint32_t failures() const { return failures_; }
  // Every attempt (failed or not) and every recovery since the server started.
  uint64_t attempts() const { return attempts_; }
  uint64_t reconnects() const { return reconnects_; }
  // This outage so far (zero while up), and every outage since the server started.
  Clock::duration down_for(Clock::time_point now) const;
  Clock::duration down_total(Clock::time_point now) const { return down_before_ + down_for(now); }

 private:
  ReconnectPolicy policy_;
  LinkState state_ = LinkState::kUp;
  std::string reason_;
  std::string last_error_;
  uint32_t failures_ = 0;
  uint64_t attempts_ = 0;
  uint64_t reconnects_ = 0;
  Clock::time_point since_;  // when this outage began
  Clock::time_point next_;   // when the next attempt is due (down)
  Clock::duration down_before_{0};
};

}  // namespace strata::server
