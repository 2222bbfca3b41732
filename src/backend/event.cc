#include <condition_variable>
#include <mutex>

#include "backend/backend.h"

namespace strata {

struct Event::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  Status status;
};

std::shared_ptr<Event::State> event_state_new() { return std::make_shared<Event::State>(); }

void event_state_complete(Event::State& state, Status status) {
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.done = true;
    state.status = std::move(status);
  }
  state.done_cv.notify_all();
}

Status Event::wait() const {
  if (!state_) return Status::ok();
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

bool Event::ready() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

}  // namespace strata
