#include "server/group_services.h"

namespace strata::server {

GroupSlotStore::GroupSlotStore(std::vector<std::unique_ptr<PipelineGroup>>& groups)
    : groups_(groups) {}

Result<std::pair<PipelineGroup*, int32_t>> GroupSlotStore::locate(int32_t slot) {
  int32_t first = 0;
  for (auto& g : groups_) {
    if (slot >= first && slot < first + g->n_slots()) {
      return std::pair<PipelineGroup*, int32_t>{g.get(), slot - first};
    }
    first += g->n_slots();
  }
  return out_of_range("slot " + std::to_string(slot) + " outside [0, " + std::to_string(first) +
                      ")");
}

Result<SlotFileResult> GroupSlotStore::save(int32_t slot, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto at, locate(slot));
  return at.first->slot_save(at.second, path);
}

Result<SlotFileResult> GroupSlotStore::restore(int32_t slot, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto at, locate(slot));
  return at.first->slot_restore(at.second, path);
}

Result<SlotFileResult> GroupSlotStore::erase(int32_t slot) {
  STRATA_ASSIGN_OR_RETURN(auto at, locate(slot));
  return at.first->slot_erase(at.second);
}

Result<SlotFileResult> GroupSlotStore::rebuild(int32_t slot) {
  STRATA_ASSIGN_OR_RETURN(auto at, locate(slot));
  return at.first->slot_rebuild(at.second);
}

IdleSleeper::IdleSleeper(std::chrono::seconds idle, Engine& engine,
                         std::vector<std::unique_ptr<PipelineGroup>>& groups)
    : idle_(idle), engine_(engine), groups_(groups) {
  state_.lock()->last_begin = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { run(); });
}

IdleSleeper::~IdleSleeper() {
  state_.lock()->stopping = true;
  state_.notify_all();
  thread_.join();
}

bool IdleSleeper::asleep() { return state_.lock()->asleep; }

Status IdleSleeper::exclusive(const std::function<Status(bool asleep)>& fn) {
  auto st = state_.lock();
  return fn(st->asleep);
}

Status IdleSleeper::begin() {
  auto st = state_.lock();
  st->last_begin = std::chrono::steady_clock::now();
  if (!st->asleep) return Status::ok();
  STRATA_RETURN_IF_ERROR(engine_.wake().with_context("waking the model"));
  for (auto& g : groups_) STRATA_RETURN_IF_ERROR(g->wake().with_context("waking the model"));
  st->asleep = false;
  return Status::ok();
}

// All groups, then the engine; a group that refuses (a request is queued or running) undoes
// the ones before it, and the model stays awake.
Status IdleSleeper::sleep_locked(State& st) {
  size_t slept = 0;
  Status s;
  for (; slept < groups_.size(); ++slept) {
    s = groups_[slept]->sleep();
    if (!s.is_ok()) break;
  }
  if (!s.is_ok()) {
    for (size_t i = 0; i < slept; ++i) (void)groups_[i]->wake();
    return s;
  }
  engine_.sleep();
  st.asleep = true;
  return Status::ok();
}

void IdleSleeper::run() {
  auto st = state_.lock();
  while (!st->stopping) {
    const auto due = st->last_begin + idle_;
    if (!st->asleep && std::chrono::steady_clock::now() >= due) {
      if (!sleep_locked(*st).is_ok()) st->last_begin = std::chrono::steady_clock::now();
      continue;
    }
    st.wait_until(st->asleep ? std::chrono::steady_clock::now() + idle_ : due,
                  [](const State& s) { return s.stopping; });
  }
}

}  // namespace strata::server
