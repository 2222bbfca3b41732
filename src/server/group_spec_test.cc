// Speculative decoding in a pipeline group: with n-gram or draft-model drafts on, every request
// gets the same tokens as with them off (greedy and seeded, several requests at once, choices
// of one prompt, context shift, backend sampling), and the drafts were checked: some kept, some
// refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/group_test_util.h"
#include "unit/synth_file.h"

namespace strata::server {
namespace {

using group_testing::collect;
using group_testing::greedy_task;
using group_testing::GroupOutput;

std::string spec_model(DType dtype = DType::kQ8_0) {
  SynthParams p;
  p.n_embd = 256;
  p.n_layer = 2;
  p.n_ff = 512;
  p.n_vocab = 320;
  p.dtype = dtype;
  p.seed = 4;
  return testing::synth_file("group_spec_" + std::string(dtype_name(dtype)), p);
}

std::unique_ptr<Engine> engine_for(bool backend_sampling) {
  return group_testing::cpu_engine(spec_model(), backend_sampling);
}

std::vector<int32_t> prompt_of(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(5 + (seed * 53 + i * 29) % 300);
  return p;
}

// The requests, all posted at once to a group of 2 slots (so the third waits for one), and
// what each gave: greedy ones, a seeded one with penalties, one of two choices, and one that
// fills its slot and goes on by context shift.
std::vector<GroupOutput> serve(const Engine& e, const GroupParams& p) {
  group_testing::TestGroup g(e, p);
  std::vector<Task> tasks;
  tasks.push_back(greedy_task(prompt_of(1, 9), 40));
  tasks.push_back(greedy_task(prompt_of(2, 23), 40));
  Task seeded = greedy_task(prompt_of(3, 5), 40);
  seeded.params.sampling.temperature = 0.4f;
  seeded.params.sampling.top_k = 0;
  seeded.params.sampling.top_p = 1;
  seeded.params.sampling.min_p = 0;
  seeded.params.sampling.repeat_penalty = 1.2f;
  seeded.params.sampling.seed = 11;
  seeded.params.n = 2;
  tasks.push_back(std::move(seeded));
  // 20 prompt tokens and 70 more in slots of 64 positions: shifted at least once.
  tasks.push_back(greedy_task(prompt_of(4, 20), 70));
  std::vector<std::shared_ptr<ResultChannel>> channels;
  for (Task& t : tasks) {
    channels.push_back(t.channel);
    g.group->post(std::move(t));
  }
  std::vector<GroupOutput> out;
  for (auto& ch : channels) {
    // Choices come interleaved on one channel: split them by choice.
    GroupOutput all;
    std::vector<GroupOutput> by_choice(2);
    int done = 0;
    const int n = ch == channels[2] ? 2 : 1;
    while (done < n) {
      std::optional<Event> ev = ch->pop(std::chrono::milliseconds(60000));
      if (!ev) {
        ADD_FAILURE() << "no event for a minute";
        return out;
      }
      GroupOutput& o = by_choice[static_cast<size_t>(ev->index)];
      for (const TokenOut& t : ev->tokens) o.tokens.push_back(t.id);
      if (ev->kind == Event::Kind::kError) {
        ADD_FAILURE() << ev->error;
        return out;
      }
      if (ev->kind == Event::Kind::kDone) {
        o.finish_reason = ev->finish_reason;
        ++done;
      }
    }
    for (int c = 0; c < n; ++c) out.push_back(by_choice[static_cast<size_t>(c)]);
  }
  if (p.spec.type != SpecType::kNone) {
    const uint64_t drafted = g.metrics.spec_draft_tokens.load();
    const uint64_t accepted = g.metrics.spec_accepted_tokens.load();
    EXPECT_GT(g.metrics.spec_drafts.load(), 0u);
    EXPECT_GT(accepted, 0u) << "no draft was kept: the check's keeping path did not run";
    EXPECT_LT(accepted, drafted) << "every draft was kept: the refusing path did not run";
    std::printf("  drafts %llu, drafted %llu, accepted %llu\n",
                static_cast<unsigned long long>(g.metrics.spec_drafts.load()),
                static_cast<unsigned long long>(drafted),
                static_cast<unsigned long long>(accepted));
  }
  return out;
}

// A draft model for the group: the target's weights in f16 (it agrees with the q8_0 target on
// most greedy tokens), a context of the group's slots.
std::shared_ptr<DraftModel> draft_model_for(const Engine& target, const GroupParams& p) {
  std::shared_ptr<const Engine> e = group_testing::cpu_engine(spec_model(DType::kF16));
  ContextParams cp;
  cp.n_ctx = static_cast<int64_t>(p.n_slots) * p.n_ctx_slot;
  cp.n_seq = p.n_slots;
  cp.n_ctx_seq = p.n_ctx_slot;
  auto ctx = Context::create(*e, cp);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  auto d = DraftModel::create(e, std::move(ctx).value(), target.model());
  EXPECT_TRUE(d.is_ok()) << d.status().message();
  return std::move(d).value();
}

void expect_same_with_drafts(bool backend_sampling) {
  std::unique_ptr<Engine> e = engine_for(backend_sampling);
  GroupParams p;
  p.n_slots = 2;
  p.n_ctx_slot = 64;
  p.context_shift = true;
  p.n_keep = 4;
  p.backend_sampling = backend_sampling;
  const std::vector<GroupOutput> want = serve(*e, p);
  ASSERT_EQ(want.size(), 5u);
  for (const GroupOutput& w : want) ASSERT_FALSE(w.tokens.empty());
  EXPECT_EQ(want[4].tokens.size(), 70u);
  for (const SpecType type : {SpecType::kNgram, SpecType::kDraft}) {
    for (int32_t n_max : {3, 6}) {
      SCOPED_TRACE("n_max " + std::to_string(n_max) +
                   (type == SpecType::kDraft ? ", draft model" : ", n-grams"));
      GroupParams s = p;
      s.spec.type = type;
      s.spec.ngram_n = 1;
      s.spec.n_max = n_max;
      if (type == SpecType::kDraft) s.draft = draft_model_for(*e, s);
      const std::vector<GroupOutput> got = serve(*e, s);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
        EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
      }
    }
  }
}

TEST(GroupSpec, DraftsChangeNoToken) { expect_same_with_drafts(false); }

TEST(GroupSpec, DraftsChangeNoTokenWithBackendSampling) { expect_same_with_drafts(true); }

// A request's speculative.n_max of 0 turns drafting off for it; n_min above what a draft can
// hold leaves every draft unchecked.
TEST(GroupSpec, RequestsChooseTheirDraftLengths) {
  std::unique_ptr<Engine> e = engine_for(false);
  GroupParams p;
  p.n_slots = 1;
  p.n_ctx_slot = 128;
  p.spec.type = SpecType::kNgram;
  p.spec.ngram_n = 1;
  group_testing::TestGroup g(*e, p);
  for (auto [n_max, n_min] : {std::pair{0, -1}, std::pair{3, 4}}) {
    Task t = greedy_task(prompt_of(1, 9), 40);
    t.params.spec_n_max = n_max;
    t.params.spec_n_min = n_min;
    std::shared_ptr<ResultChannel> ch = t.channel;
    g.group->post(std::move(t));
    EXPECT_EQ(collect(*ch).tokens.size(), 40u);
  }
  EXPECT_EQ(g.metrics.spec_drafts.load(), 0u);
  Task t = greedy_task(prompt_of(1, 9), 40);
  std::shared_ptr<ResultChannel> ch = t.channel;
  g.group->post(std::move(t));
  EXPECT_EQ(collect(*ch).tokens.size(), 40u);
  EXPECT_GT(g.metrics.spec_drafts.load(), 0u);
}

}  // namespace
}  // namespace strata::server
