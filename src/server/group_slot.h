// The slots of a pipeline group, as its decode thread keeps them: shared by the files that
// implement PipelineGroup (group.cc: tasks and steps; group_recovery.cc: a lost worker).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/group.h"

namespace strata::server {

// The part of a task shared by its n slots.
struct PipelineGroup::Active {
  Task task;
  int32_t n_cached = 0;
};

// A lazy grammar not yet started (outside Slot: clang needs it complete for optional).
struct LazyGrammarStart {
  std::string text;
  size_t scanned = 0;
};

struct PipelineGroup::Slot {
  enum class State {
    kIdle,
    kWait,      // a follower of an n > 1 task: waits for its leader's prompt
    kPrompt,    // evaluating the prompt in chunks
    kGenerate,  // one token per step
  };

  int32_t id = 0;  // the sequence id in the context
  State state = State::kIdle;
  std::vector<int32_t> cache;  // tokens whose KV sequence `id` holds, from position 0
  std::vector<int32_t> lost;   // what `cache` was when a worker took the KV with it
  std::shared_ptr<Active> active;
  int32_t choice = 0;
  std::vector<Slot*> followers;
  std::optional<Sampler> sampler;
  std::optional<GrammarMatcher> grammar;  // the request's grammar, where it has one
  // A lazy grammar not yet started: the text generated so far (the grammar vocabulary's
  // pieces), and how far scan_trigger has looked.
  std::optional<LazyGrammarStart> lazy;
  std::vector<uint8_t> allowed;     // its mask of this step's tokens
  int32_t draw = -1;                // this step's draw on the device (backend sampling), or -1
  const char* stop_type = "limit";  // why generation ended: eos, word or limit
  std::string stopping_word;        // the stop string, when a word ended it
  bool truncated = false;           // the context was shifted during this request
  bool seen_newline = false;        // a newline has been sent (t_max_predict_ms)
  int32_t pending = -1;             // sampled, not yet in the KV
  std::vector<int32_t> draft;       // this step's draft, decoded after `pending`
  int64_t draft_row = -1;           // the output row of its first token
  int32_t n_generated = 0;
  int64_t row = -1;  // output row in the current batch
  int32_t n_in_batch = 0;
  Utf8Stream utf8;
  StopMatcher stop;
  uint64_t last_used = 0;
  Clock::time_point t_first;

  std::atomic<bool> busy_pub{false};
  std::atomic<uint64_t> task_pub{0};
  std::atomic<int32_t> cached_pub{0};
  std::atomic<int32_t> lost_pub{0};
};

}  // namespace strata::server
