// What the tests of a pipeline group share: a CPU engine, a started group, and greedy requests
// posted to it and collected as the server would.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/group.h"
#include "unit/cpu_engine.h"

namespace strata::server::group_testing {

// The model at `path` on a 2-thread CPU device, with context shift allowed (and backend
// sampling, when asked).
inline std::unique_ptr<Engine> cpu_engine(const std::string& path, bool backend_sampling = false) {
  EngineOptions eo;
  eo.context_shift = true;
  eo.backend_sampling = backend_sampling;
  return testing::cpu_engine(path, 2, eo);
}

// A started group of p.n_slots slots of p.n_ctx_slot positions each; stopped at the end.
struct TestGroup {
  Metrics metrics;
  std::unique_ptr<PipelineGroup> group;
  TestGroup(const Engine& e, const GroupParams& p) {
    ContextParams cp;
    cp.n_ctx = static_cast<int64_t>(p.n_slots) * p.n_ctx_slot;
    cp.n_seq = p.n_slots;
    auto ctx = Context::create(e, cp);
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    group = std::make_unique<PipelineGroup>(0, std::move(ctx).value(), p, metrics);
    group->start();
  }
  ~TestGroup() { group->stop(); }
};

// What a request gave: its tokens, and how it ended.
struct GroupOutput {
  std::vector<int32_t> tokens;
  std::string finish_reason;
  int32_t n_cached = -1;
  int http_status = 0;
  std::string error;  // "timeout" when nothing came for a minute
};

// A greedy request of n_predict tokens that ignores EOS; its events carry the token ids.
inline Task greedy_task(std::vector<int32_t> prompt, int32_t n_predict) {
  static uint64_t next_id = 1;
  Task t;
  t.id = next_id++;
  t.prompt = std::move(prompt);
  t.params.sampling.temperature = 0;
  t.params.n_predict = n_predict;
  t.params.ignore_eos = true;
  t.params.logprobs = true;
  t.channel = std::make_shared<ResultChannel>();
  return t;
}

inline GroupOutput collect(ResultChannel& ch) {
  GroupOutput out;
  for (;;) {
    std::optional<Event> e = ch.pop(std::chrono::milliseconds(60000));
    if (!e) {
      out.error = "timeout";
      return out;
    }
    for (const TokenOut& t : e->tokens) out.tokens.push_back(t.id);
    if (e->kind == Event::Kind::kDone) {
      out.finish_reason = e->finish_reason;
      out.n_cached = e->n_cached;
      return out;
    }
    if (e->kind == Event::Kind::kError) {
      out.http_status = e->http_status;
      out.error = e->error;
      return out;
    }
  }
}

// Posts a greedy request; its channel.
inline std::shared_ptr<ResultChannel> post_greedy(PipelineGroup& g, std::vector<int32_t> prompt,
                                                  int32_t n_predict) {
  Task t = greedy_task(std::move(prompt), n_predict);
  std::shared_ptr<ResultChannel> ch = t.channel;
  g.post(std::move(t));
  return ch;
}

inline GroupOutput generate(PipelineGroup& g, std::vector<int32_t> prompt, int32_t n_predict) {
  return collect(*post_greedy(g, std::move(prompt), n_predict));
}

}  // namespace strata::server::group_testing
