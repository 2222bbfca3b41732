// A generation request as the decode loop sees it, and the channel its results come back on.
//
// HTTP threads never touch a Context: they build a Task, post it to a pipeline group and read
// Events from the task's ResultChannel. The channel is the only thing both sides share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex_guarded.h"
#include "engine/sampler.h"

namespace strata {
class Grammar;
struct GrammarTrigger;
}  // namespace strata

namespace strata::server {

using Clock = std::chrono::steady_clock;

// A duration as seconds, for metrics and JSON.
inline double to_seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Added to a token's logit before sampling; -infinity bans the token.
struct TokenBias {
  int32_t token = 0;
  float bias = 0.0f;
};

struct GenParams {
  SamplerParams sampling;
  int32_t n_predict = -1;  // -1: until the slot's context is full
  // Choices of one prompt: the prompt is evaluated once and its KV shared. Choice i samples
  // with seed + i, so a seeded request with n = 3 gives the same three texts every time.
  int32_t n = 1;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Reuse the KV of a slot's cached prefix. False evaluates the whole prompt (benchmarks that
  // repeat one prompt measure the prompt's cost, not the cache's).
  bool cache_prompt = true;
  bool logprobs = false;  // report the chosen tokens' log-probabilities (and n_probs alternatives)
  std::vector<TokenBias> logit_bias;  // ids checked against the vocabulary by the parser
  // llama-server's t_max_predict_ms: once a newline has been generated, generation ends (as a
  // length limit) when this many ms have passed since the first token. 0: no limit.
  int64_t t_max_predict_ms = 0;
  // Constrained output (a GBNF `grammar`, a JSON schema or response_format json_object): only
  // tokens the grammar allows are sampled, and the end of generation only where the text is a
  // whole sentence of it. Null: free text.
  std::shared_ptr<const Grammar> grammar;
  // With `grammar`: it applies only from the first trigger word on (a tool call's opening under
  // tool_choice auto); the text before is free. Null: from the first token.
  std::shared_ptr<const GrammarTrigger> grammar_trigger;
  // llama-server's speculative.n_max and speculative.n_min: this request's longest and
  // shortest draft (-1: the server's --spec-draft-n-max / -n-min). 0 drafts nothing.
  int32_t spec_n_max = -1;
  int32_t spec_n_min = -1;
  float spec_p_min = -1.0f;  // speculative.p_min (-1: --spec-draft-p-min)
};

// One generated token with what `logprobs` reports.
struct TokenOut {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

struct Event {
  enum class Kind { kText, kDone, kError };
  Kind kind = Kind::kText;
  int32_t index = 0;             // choice
  std::string text;              // complete UTF-8 characters, never the start of a stop string
  std::vector<TokenOut> tokens;  // with `logprobs`
  std::vector<int32_t> ids;      // the tokens generated since the last event
  // kDone
  std::string finish_reason;  // "stop" or "length"
  int32_t n_prompt = 0;
  int32_t n_cached = 0;  // prompt tokens whose KV was reused
  int32_t n_generated = 0;
  std::string stop_type;      // eos, word or limit
  std::string stopping_word;  // the stop string that ended it (stop_type word)
  bool truncated = false;     // context shift dropped part of the sequence
  double prompt_ms = 0;       // from arrival to the first generated token (queue and prompt)
  double predicted_ms = 0;    // from the first generated token to the last
  // kError
  int http_status = 500;
  std::string error;
};

// Many producers (in practice one decode thread), one consumer (the request's HTTP thread).
class ResultChannel {
 public:
  void push(Event e) {
    events_.lock()->push_back(std::move(e));
    events_.notify_one();
  }

  // The next event, or nothing when none arrives within `timeout`.
  std::optional<Event> pop(std::chrono::milliseconds timeout) {
    auto events = events_.lock();
    if (!events.wait_for(timeout, [](const auto& q) { return !q.empty(); })) return std::nullopt;
    Event e = std::move(events->front());
    events->pop_front();
    return e;
  }

  // The client went away: the decode loop frees the request's slots at its next step.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  MutexGuarded<std::deque<Event>> events_;
  std::atomic<bool> cancelled_{false};
};

struct Task {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  GenParams params;
  std::shared_ptr<ResultChannel> channel;
  Clock::time_point t_arrival = Clock::now();
};

}  // namespace strata::server
