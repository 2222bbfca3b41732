#include "server/worker_link.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/check.h"

namespace strata::server {

namespace {
constexpr int64_t kMaxDelayMs = 3600 * 1000;
}  // namespace

Result<ReconnectPolicy> ReconnectPolicy::from_text(const char* value) {
  ReconnectPolicy p;
  if (value == nullptr || *value == '\0') return p;
  errno = 0;
  char* end = nullptr;
  const long long ms = std::strtoll(value, &end, 10);
  if (*end != '\0' || errno == ERANGE || ms < 0 || ms > kMaxDelayMs) {
    return invalid_argument(std::string("STRATA_RPC_RECONNECT_MS='") + value +
                            "' is not an integer in [0, " + std::to_string(kMaxDelayMs) +
                            "] (milliseconds; 0: no reconnection)");
  }
  p.max = std::chrono::milliseconds(ms);
  p.first = std::min(p.first, p.max);
  return p;
}

Result<ReconnectPolicy> ReconnectPolicy::from_env() {
  return from_text(std::getenv("STRATA_RPC_RECONNECT_MS"));
}

std::chrono::milliseconds ReconnectPolicy::delay(uint32_t failures) const {
  std::chrono::milliseconds d = first;
  for (uint32_t i = 0; i < failures && d < max; ++i) d *= 2;
  return std::min(d, max);
}

const char* link_state_name(LinkState s) {
  switch (s) {
    case LinkState::kUp:
      return "up";
    case LinkState::kDown:
      return "down";
    case LinkState::kRestoring:
      return "restoring";
  }
  return "?";
}

void WorkerLink::lost(Clock::time_point now, std::string reason) {
  STRATA_CHECK(state_ == LinkState::kUp, "a worker is lost once per outage");
  state_ = LinkState::kDown;
  reason_ = std::move(reason);
  last_error_.clear();
  failures_ = 0;
  since_ = now;
  next_ = now + policy_.delay(0);
}

bool WorkerLink::due(Clock::time_point now) const {
  return state_ == LinkState::kDown && now >= next_;
}

void WorkerLink::connected() {
  STRATA_CHECK(state_ == LinkState::kDown, "an attempt is made while down");
  ++attempts_;
  state_ = LinkState::kRestoring;
}

void WorkerLink::failed(Clock::time_point now, std::string why) {
  STRATA_CHECK(state_ != LinkState::kUp, "only an attempt or a restore fails");
  // A restore that failed was counted as an attempt when it connected.
  if (state_ == LinkState::kDown) ++attempts_;
  state_ = LinkState::kDown;
  last_error_ = std::move(why);
  next_ = now + policy_.delay(++failures_);
}

void WorkerLink::restored(Clock::time_point now) {
  STRATA_CHECK(state_ == LinkState::kRestoring, "restored after connecting");
  ++reconnects_;
  down_before_ += now - since_;
  state_ = LinkState::kUp;
  reason_.clear();
  last_error_.clear();
  failures_ = 0;
}

WorkerLink::Clock::duration WorkerLink::down_for(Clock::time_point now) const {
  return state_ == LinkState::kUp ? Clock::duration{0} : now - since_;
}

}  // namespace strata::server
