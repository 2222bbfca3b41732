// A pipeline group: one Context, its slots, its batch and the decode thread that owns them.
//
// Each decode step puts one token of every generating slot and chunks of pending prompts (at
// most n_batch tokens in all, generating slots first) into ONE Context::decode call. Tasks
// arrive through a queue; results leave through each task's ResultChannel. Only the decode
// thread touches the context and the slots; what other threads may read (load, /slots, KV
// use) is published in atomics.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex_guarded.h"
#include "core/utf8.h"
#include "engine/context.h"
#include "engine/grammar.h"
#include "engine/prompt_cache.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "engine/step_draws.h"
#include "model/tokenizer.h"
#include "server/metrics.h"
#include "server/slot_store.h"
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
  // Context shift (--context-shift): a slot that fills n_ctx_slot while generating drops half
  // of its tokens after the first n_keep (-1: the whole prompt; one more with a BOS) and goes
  // on, as llama-server does, instead of finishing with "length". The engine must have been
  // created with EngineOptions::context_shift.
  bool context_shift = false;
  int32_t n_keep = 0;
  // Special tokens (control tokens such as <|im_end|>) appear in the generated text (-sp).
  bool render_special = false;
  // Host memory for the states of prompts that slots give up (--cache-ram), in bytes; 0: none.
  // A new prompt restores the stored state that shares the longest prefix with it when that
  // beats what an idle slot holds.
  uint64_t cache_ram_bytes = 0;
  // Backend sampling (--backend-sampling): each step's tokens are sampled on the last stage's
  // device (StepDraws); a row the device cannot take is sampled on the CPU from its logits,
  // which alone are read back. The engine must have been created with
  // EngineOptions::backend_sampling.
  bool backend_sampling = false;
  // Speculative decoding (--spec-type): each generating slot's step checks a draft of its next
  // tokens (engine/speculative.h); the text is the same as without.
  SpecParams spec;
  // draft-simple: the group's draft model, its context's sequences those of the slots.
  std::shared_ptr<DraftModel> draft;
};

// What a slot file action did (/slots/{id}?action=save|restore|erase).
// What /slots shows of a slot; read without locks.
struct SlotView {
  int32_t id = 0;
  bool busy = false;
  uint64_t task_id = 0;
  int32_t n_cached = 0;  // tokens whose KV the slot holds
  int32_t n_lost = 0;    // tokens whose KV was lost with a worker (slot_rebuild)
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
  // Decode steps this group ran, and the busy slots they carried summed over them.
  uint64_t decode_steps() const { return decode_steps_.load(std::memory_order_relaxed); }
  uint64_t busy_slots_summed() const { return busy_summed_.load(std::memory_order_relaxed); }
  std::vector<SlotView> slot_views() const;
  // Longest prefix of `prompt` cached by any slot (needs publish_cache).
  size_t cache_match(const std::vector<int32_t>& prompt) const;

  // Slot actions, by slot id within the group. Each runs on the decode thread between steps
  // (the caller waits; call after start()); a slot that is serving a request is refused, as is
  // every action once the group stops. A file that is truncated, corrupt or from another model is
  // refused and the slot keeps what it held. `path` is used as given: the caller confines it.
  Result<SlotFileResult> slot_save(int32_t id, const std::string& path);
  Result<SlotFileResult> slot_restore(int32_t id, const std::string& path);
  Result<SlotFileResult> slot_erase(int32_t id);
  // Stored prompt states (cache_ram_bytes), read on the decode thread: bytes and entries.
  std::pair<uint64_t, size_t> cache_ram_use();

  // Sleep (--sleep-idle-seconds), on the decode thread: the context frees its device memory
  // and the slots forget their prompts (stored in the RAM cache first, when there is one, so
  // that they come back without being evaluated again). Refused while a request is queued or
  // running. The server puts every group to sleep, then the engine (Engine::sleep); before
  // the next request it wakes the engine, then every group. A request that reaches a
  // sleeping group fails with 503.
  Status sleep();
  Status wake();

  // Recovery from a lost worker (server/worker_recovery.h), on the decode thread. suspend()
  // fails every running and queued request with `reason` (503), keeps the tokens each slot
  // held as lost (their KV is gone; slot_rebuild evaluates them again), puts the context to
  // sleep, and fails every request that arrives with `reason` until resume(). resume() makes
  // the streams of the `renewed` devices anew (their workers are on new connections) and, with
  // `wake`, places the context's buffers again (without: the model sleeps, and waking it does).
  Status suspend(const std::string& reason);
  Status resume(const std::vector<const Device*>& renewed, bool wake);
  // Evaluates again the tokens whose KV an idle slot lost with a worker, so that its prompt
  // cache is what it was (/slots/{id}?action=rebuild); n_tokens 0 when it lost none.
  Result<SlotFileResult> slot_rebuild(int32_t id);

 private:
  struct Slot;
  struct Active;

  void loop();
  void take_new_tasks(bool block);
  void drop_cancelled();
  bool assign(Task& task);
  Slot* pick_slot(const std::vector<int32_t>& prompt, std::vector<Slot*>& idle);
  void step();
  // Adds the draws of the slots that sample after this step's decode (backend sampling).
  void add_draws();
  // The slot's next token: its draw's, or sampled from `logits` on the CPU.
  void sample_slot(Slot& slot, const float* logits);
  // Speculative decoding: the drafts the generating slots' step checks (from `budget`, which
  // they take from),
  // and the check after the decode: the rows sampled in turn, the draft kept up to the first
  // token that differs, the KV past what is kept dropped.
  // The most tokens a slot's draft may hold this step (before the step's budget).
  int64_t draft_limit(const Slot& slot) const;
  void make_drafts(int64_t& budget);
  void check_draft(Slot& slot);
  void finish(Slot& slot, const std::string& reason);
  void fail(Slot& slot, int http_status, const std::string& message);
  void release(Slot& slot);
  void publish(Slot& slot);
  // Runs fn on the decode thread before its next step; an error when the group is stopping.
  Status on_decode_thread(std::function<void()> fn);
  void run_control();
  Result<Slot*> idle_slot(int32_t id);
  // Runs `action` on the decode thread on slot `id` if it is idle (else the refusal); the
  // result's ms is the time the action took.
  Result<SlotFileResult> slot_action(int32_t id,
                                     const std::function<Result<SlotFileResult>(Slot&)>& action);
  // Context shift of a full slot; false when nothing can be dropped.
  Result<bool> shift(Slot& slot);
  // Before the slot gives up what it holds past its first `keep` tokens: its whole state into
  // the RAM cache.
  void cache_ram_store(Slot& slot, size_t keep);
  // Restores the stored state that best matches the prompt when it beats `keep`; returns
  // the tokens the slot now holds of the prompt.
  size_t cache_ram_restore(Slot& slot, const std::vector<int32_t>& prompt, size_t keep);

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
  StepDraws draws_;  // with backend sampling
  // The vocabulary as grammars see it (each token's text), made for the first request with a
  // grammar; decode thread only.
  std::unique_ptr<GrammarVocab> grammar_vocab_;
  std::vector<int32_t> eog_tokens_;  // made with it
  const GrammarVocab& grammar_vocab();
  // The slot's token mask from its grammar: what may come next, and the end-of-generation
  // tokens where the text is a whole sentence. An error when nothing can.
  Status grammar_mask(Slot& slot);
  // A slot whose grammar is lazy: `token` joins its text, and the grammar starts when a trigger
  // word has come (or is dropped when none can come any more).
  void start_lazy_grammar(Slot& slot, int32_t token);

  std::optional<PromptCache> cache_ram_;  // decode thread only
  std::string suspended_;                 // decode thread only; why, while suspended
  // Fails the tasks that wait for slots (a suspended group takes none).
  void fail_waiting(const std::string& message);

  struct Control {
    std::function<void()> fn;
    std::promise<bool> ran;  // false: dropped because the group stopped
  };
  // What other threads hand the decode thread.
  struct Inbox {
    std::deque<Task> incoming;
    std::deque<Control> control;
    bool stopping = false;
  };
  MutexGuarded<Inbox> inbox_;
  std::thread thread_;

  std::atomic<int64_t> load_{0};
  std::atomic<int64_t> queued_{0};
  std::atomic<int64_t> busy_{0};
  std::atomic<int64_t> kv_used_{0};
  std::atomic<uint64_t> decode_steps_{0};
  std::atomic<uint64_t> busy_summed_{0};

  MutexGuarded<std::vector<std::vector<int32_t>>> cache_copy_;  // per slot
};

}  // namespace strata::server
