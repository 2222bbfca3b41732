// A pipeline group: one Context, its slots, its batch and the decode thread that owns them.
//
// Each decode step puts one token of every generating slot and chunks of pending prompts (at
// most n_batch tokens in all, generating slots first) into ONE Context::decode call. Tasks
// arrive through a queue; results leave through each task's ResultChannel. Only the decode
// thread touches the context and the slots; what other threads may read (load, /slots, KV
// use) is published in atomics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/context.h"
#include "engine/sampler.h"
#include "model/tokenizer.h"
#include "model/utf8.h"
#include "server/metrics.h"
#include "server/stop.h"
#include "server/task.h"

namespace strata::server {

struct GroupParams {
  int32_t n_slots = 1;     // sequences of the context
  int32_t n_ctx_slot = 0;  // KV positions one slot may hold: prompt + generated
  int64_t n_batch = 512;   // most tokens per decode step
  // An idle slot is reused for its cached prefix when the prefix covers at least this share of
  // the new prompt; otherwise the least recently used idle slot is taken.
  float cache_similarity = 0.5f;
  // Keep a copy of every slot's cached tokens for the dispatcher (only with several groups).
  bool publish_cache = false;
};

// What /slots shows of a slot; read without locks.
struct SlotView {
  int32_t id = 0;
  bool busy = false;
  uint64_t task_id = 0;
  int32_t n_cached = 0;  // tokens whose KV the slot holds
};

class PipelineGroup {
 public:
  PipelineGroup(int32_t index, std::unique_ptr<Context> context, const GroupParams& params,
                Metrics& metrics);
  ~PipelineGroup();
  PipelineGroup(const PipelineGroup&) = delete;
  PipelineGroup& operator=(const PipelineGroup&) = delete;

  void start();
  // Finishes the step in progress, fails what is queued or running, joins the thread.
  void stop();

  // Precondition: task.params.n <= n_slots() and the prompt fits n_ctx_slot().
  void post(Task task);

  int32_t index() const { return index_; }
  int32_t n_slots() const { return params_.n_slots; }
  int32_t n_ctx_slot() const { return params_.n_ctx_slot; }
  int64_t n_ctx() const { return n_ctx_; }
  // Slots that queued and running tasks need.
  int64_t load() const { return load_.load(std::memory_order_relaxed); }
  int64_t queued() const { return queued_.load(std::memory_order_relaxed); }
  int64_t busy_slots() const { return busy_.load(std::memory_order_relaxed); }
  int64_t kv_used() const { return kv_used_.load(std::memory_order_relaxed); }
  std::vector<SlotView> slot_views() const;
  // Longest prefix of `prompt` cached by any slot (needs publish_cache).
  size_t cache_match(const std::vector<int32_t>& prompt) const;

 private:
  struct Slot;
  struct Active;

  void loop();
  void take_new_tasks(bool block);
  void drop_cancelled();
  bool assign(Task& task);
  Slot* pick_slot(const std::vector<int32_t>& prompt, std::vector<Slot*>& idle);
  void step();
  void sample_slot(Slot& slot, const float* logits);
  void finish(Slot& slot, const std::string& reason);
  void fail(Slot& slot, int http_status, const std::string& message);
  void release(Slot& slot);
  void publish(Slot& slot);

  const int32_t index_;
  std::unique_ptr<Context> ctx_;
  const Tokenizer& tok_;
  const GroupParams params_;
  const int64_t n_ctx_;
  Metrics& metrics_;

  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<Task> waiting_;  // decode thread only
  uint64_t use_clock_ = 0;
  Batch batch_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Task> incoming_;  // guarded by queue_mu_
  bool stopping_ = false;      // guarded by queue_mu_
  std::thread thread_;

  std::atomic<int64_t> load_{0};
  std::atomic<int64_t> queued_{0};
  std::atomic<int64_t> busy_{0};
  std::atomic<int64_t> kv_used_{0};

  mutable std::mutex cache_mu_;
  std::vector<std::vector<int32_t>> cache_copy_;  // guarded by cache_mu_; per slot
};

}  // namespace strata::server
