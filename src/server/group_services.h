// What the server does across its pipeline groups that no single group can: slot files by the
// server-wide slot id (/slots/{id}?action=...), and putting the model to sleep when idle
// (--sleep-idle-seconds).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/mutex_guarded.h"
#include "engine/engine.h"
#include "server/group.h"
#include "server/slot_store.h"

namespace strata::server {

// Slot ids run over the groups in order: group 0's slots first. Each action runs on the owning
// group's decode thread between steps.
class GroupSlotStore : public SlotStore {
 public:
  explicit GroupSlotStore(std::vector<std::unique_ptr<PipelineGroup>>& groups);
  Result<SlotFileResult> save(int32_t slot, const std::string& path) override;
  Result<SlotFileResult> restore(int32_t slot, const std::string& path) override;
  Result<SlotFileResult> erase(int32_t slot) override;
  Result<SlotFileResult> rebuild(int32_t slot) override;

 private:
  // The group of a server-wide id and the id within it.
  Result<std::pair<PipelineGroup*, int32_t>> locate(int32_t slot);
  std::vector<std::unique_ptr<PipelineGroup>>& groups_;
};

// After `idle` without a request, every group and then the engine free their device memory;
// the next request (begin()) wakes them before it is posted. A sleep that a busy group refuses
// is tried again after another idle period.
class IdleSleeper {
 public:
  IdleSleeper(std::chrono::seconds idle, Engine& engine,
              std::vector<std::unique_ptr<PipelineGroup>>& groups);
  ~IdleSleeper();
  IdleSleeper(const IdleSleeper&) = delete;
  IdleSleeper& operator=(const IdleSleeper&) = delete;

  // A request that needs the model is starting: wakes it when it sleeps. Thread-safe.
  Status begin();
  bool asleep();
  // Runs `fn` with the model neither put to sleep nor woken meanwhile, telling it whether the
  // model sleeps (the recovery of a lost worker places weights only on an awake model).
  Status exclusive(const std::function<Status(bool asleep)>& fn);

 private:
  // Held for every sleep and wake, as well as to read or change these fields.
  struct State {
    bool stopping = false;
    bool asleep = false;
    std::chrono::steady_clock::time_point last_begin;
  };
  void run();
  Status sleep_locked(State& st);

  const std::chrono::seconds idle_;
  Engine& engine_;
  std::vector<std::unique_ptr<PipelineGroup>>& groups_;
  MutexGuarded<State> state_;
  std::thread thread_;
};

}  // namespace strata::server
