// A pipeline group through the loss of a worker, as the server's recovery drives it: suspend
// fails what runs, what waits and what arrives with the reason; resume serves again with the
// same greedy tokens; a slot rebuilt from its lost tokens serves its cached prefix again and
// gives the tokens it gave before the loss. The model is on the CPU: the group's side of the
// recovery does not depend on the device (tests/unit/engine_reconnect_test.cc covers that).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/cpu_backend.h"
#include "server/group.h"
#include "server/group_test_util.h"
#include "unit/synth_file.h"

namespace strata::server {
namespace {

std::string recovery_model_path() { return testing::small_llama_file("group_recovery", 3, 71); }

using group_testing::collect;
using group_testing::generate;
using Output = group_testing::GroupOutput;

std::unique_ptr<Engine> make_engine() { return group_testing::cpu_engine(recovery_model_path()); }

// A started group of n_slots slots of 128 positions, n_batch tokens per step.
struct RecoveryGroup : group_testing::TestGroup {
  RecoveryGroup(const Engine& e, int32_t n_slots, int64_t n_batch, bool context_shift = false)
      : TestGroup(e, params(n_slots, n_batch, context_shift)) {}
  static GroupParams params(int32_t n_slots, int64_t n_batch, bool context_shift) {
    GroupParams p;
    p.n_slots = n_slots;
    p.context_shift = context_shift;
    p.n_ctx_slot = 128;
    p.n_batch = n_batch;
    return p;
  }
};

std::shared_ptr<ResultChannel> post(PipelineGroup& g, const std::vector<int32_t>& prompt,
                                    int32_t n_predict) {
  return group_testing::post_greedy(g, prompt, n_predict);
}

std::vector<int32_t> recovery_prompt(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(2 + (seed * 89 + i * 37) % 290);
  return p;
}

const char* const kReason = "worker RPC1[127.0.0.1:9] is down: retry later";

TEST(GroupRecovery, SuspendFailsWhatRunsWaitsAndArrivesThenResumeServesAgain) {
  auto e = make_engine();
  // With context shift a request that ignores EOS never ends by itself: it runs until the
  // suspension fails it.
  RecoveryGroup g(*e, 1, 64, true);
  const std::vector<int32_t> p = recovery_prompt(1, 12);
  const Output before = generate(*g.group, p, 6);
  ASSERT_EQ(before.tokens.size(), 6u) << before.error;

  // One slot: the first request runs, the second waits for the slot.
  std::shared_ptr<ResultChannel> running = post(*g.group, recovery_prompt(2, 8), 100000);
  for (int i = 0; i < 2000 && !g.group->slot_views()[0].busy; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(g.group->slot_views()[0].busy);
  std::shared_ptr<ResultChannel> waiting = post(*g.group, p, 4);

  ASSERT_TRUE(g.group->suspend(kReason).is_ok());
  for (ResultChannel* ch : {running.get(), waiting.get()}) {
    const Output o = collect(*ch);
    EXPECT_EQ(o.http_status, 503);
    EXPECT_EQ(o.error, kReason);
  }
  const Output arrived = generate(*g.group, p, 4);
  EXPECT_EQ(arrived.http_status, 503);
  EXPECT_EQ(arrived.error, kReason);
  EXPECT_EQ(g.metrics.requests_failed.load(), 3u);
  EXPECT_EQ(g.group->load(), 0);
  EXPECT_EQ(g.group->queued(), 0);
  EXPECT_EQ(g.group->slot_views()[0].n_cached, 0) << "the KV is gone";
  EXPECT_GT(g.group->slot_views()[0].n_lost, 0);
  EXPECT_FALSE(g.group->slot_rebuild(0).is_ok()) << "nothing is rebuilt while suspended";

  ASSERT_TRUE(g.group->resume({}, true).is_ok());
  const Output after = generate(*g.group, p, 6);
  EXPECT_TRUE(after.error.empty()) << after.error;
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.n_cached, 0) << "the prompt was evaluated again";
}

TEST(GroupRecovery, ARebuiltSlotServesItsPrefixWithTheSameTokens) {
  auto e = make_engine();
  // A batch of 16 tokens: the rebuild of 35 tokens takes three steps.
  RecoveryGroup g(*e, 2, 16);
  const std::vector<int32_t> p = recovery_prompt(3, 28);
  const Output before = generate(*g.group, p, 8);
  ASSERT_EQ(before.tokens.size(), 8u) << before.error;
  const Output again = generate(*g.group, p, 8);
  ASSERT_EQ(again.tokens, before.tokens);
  ASSERT_EQ(again.n_cached, 27) << "the slot's cache served the prompt";

  ASSERT_TRUE(g.group->suspend(kReason).is_ok());
  ASSERT_TRUE(g.group->resume({}, true).is_ok());
  int32_t slot = -1;
  for (const SlotView& v : g.group->slot_views()) {
    EXPECT_EQ(v.n_cached, 0);
    if (v.n_lost > 0) slot = v.id;
  }
  ASSERT_GE(slot, 0);
  // The prompt and the generated tokens but the last (never evaluated).
  EXPECT_EQ(g.group->slot_views()[slot].n_lost, 28 + 7);

  Result<SlotFileResult> r = g.group->slot_rebuild(slot);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->n_tokens, 35);
  EXPECT_EQ(g.group->slot_views()[slot].n_cached, 35);
  EXPECT_EQ(g.group->slot_views()[slot].n_lost, 0);
  Result<SlotFileResult> twice = g.group->slot_rebuild(slot);
  ASSERT_TRUE(twice.is_ok());
  EXPECT_EQ(twice->n_tokens, 0) << "nothing left to rebuild";

  const Output after = generate(*g.group, p, 8);
  EXPECT_EQ(after.n_cached, 27) << "the rebuilt cache served the prompt";
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_FALSE(g.group->slot_rebuild(7).is_ok()) << "no slot 7";
}

}  // namespace
}  // namespace strata::server
