#include <optional>

#include "backend/backend.h"
#include "core/mutex_guarded.h"

namespace strata {

struct Event::State {
  MutexGuarded<std::optional<Status>> result;  // set once, when the event completes
};

std::shared_ptr<Event::State> event_state_new() { return std::make_shared<Event::State>(); }

void event_state_complete(Event::State& state, Status status) {
  *state.result.lock() = std::move(status);
  state.result.notify_all();
}

Status Event::wait() const {
  if (!state_) return Status::ok();
  auto r = state_->result.lock();
  r.wait([](const std::optional<Status>& s) { return s.has_value(); });
  return **r;
}

bool Event::ready() const {
  if (!state_) return true;
  return state_->result.lock()->has_value();
}

}  // namespace strata
