// A pipeline group's slot actions (save, restore, erase), its RAM cache of prompts and its
// context shift, driven through the group as the server drives it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/cpu_backend.h"
#include "server/group.h"
#include "server/group_test_util.h"
#include "unit/synth_file.h"

namespace strata::server {
namespace {

std::string slots_model_path(uint64_t seed = 41) {
  return testing::small_llama_file("group_slots_" + std::to_string(seed), 3, seed);
}

using group_testing::collect;
using group_testing::generate;
using group_testing::greedy_task;
using Group = group_testing::TestGroup;
using Output = group_testing::GroupOutput;

GroupParams params(int32_t n_slots, int32_t n_ctx_slot) {
  GroupParams p;
  p.n_slots = n_slots;
  p.n_ctx_slot = n_ctx_slot;
  return p;
}

std::vector<int32_t> slots_prompt(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(2 + (seed * 83 + i * 41) % 290);
  return p;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("strata_slots_" + name + "_" + std::to_string(::getpid())))
      .string();
}

TEST(GroupSlots, SaveEraseRestoreContinuesAsIfTheSlotHadKeptIt) {
  auto e = group_testing::cpu_engine(slots_model_path());
  const std::vector<int32_t> first = slots_prompt(1, 20);
  const std::vector<int32_t> more = slots_prompt(2, 7);

  // The reference: the conversation's second turn right after its first, in one group.
  Group ref(*e, params(2, 96));
  const Output a = generate(*ref.group, first, 9);
  ASSERT_EQ(a.tokens.size(), 9u) << a.error;
  // The slot holds the prompt and 8 generated tokens (the 9th was never evaluated).
  const std::vector<int32_t> turn2 =
      concat(concat(first, std::vector<int32_t>(a.tokens.begin(), a.tokens.end())), more);
  const Output want = generate(*ref.group, turn2, 6);
  ASSERT_EQ(want.tokens.size(), 6u) << want.error;
  EXPECT_EQ(want.n_cached, 28) << "the slot's own cache served the first turn";

  // Saved, erased, restored (into a new group): the second turn reuses the restored KV and
  // gives the same tokens.
  const std::string path = temp_file("save");
  Group g(*e, params(2, 96));
  ASSERT_EQ(generate(*g.group, first, 9).tokens, a.tokens);
  const int32_t slot = 0;  // the least recently used of two fresh slots: the first
  Result<SlotFileResult> saved = g.group->slot_save(slot, path);
  ASSERT_TRUE(saved.is_ok()) << saved.status().message();
  EXPECT_EQ(saved->n_tokens, 28);
  EXPECT_EQ(saved->n_bytes, std::filesystem::file_size(path));
  Result<SlotFileResult> erased = g.group->slot_erase(slot);
  ASSERT_TRUE(erased.is_ok());
  EXPECT_EQ(erased->n_tokens, 28);
  EXPECT_EQ(g.group->slot_views()[slot].n_cached, 0);

  Group h(*e, params(2, 96));
  Result<SlotFileResult> restored = h.group->slot_restore(1, path);
  ASSERT_TRUE(restored.is_ok()) << restored.status().message();
  EXPECT_EQ(restored->n_tokens, 28);
  EXPECT_EQ(h.group->slot_views()[1].n_cached, 28);
  const Output got = generate(*h.group, turn2, 6);
  EXPECT_EQ(got.n_cached, 28) << "the restored slot served the prompt";
  EXPECT_EQ(got.tokens, want.tokens);
  // Slot views are published when a slot is released, after the last event: read them only
  // after an action has run on the decode thread.
  const int32_t held = 36 + 5;

  // Refused files leave the slot as it was: truncated, foreign, too long for a slot, absent.
  const std::string bad = temp_file("bad");
  std::filesystem::copy_file(path, bad, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(bad, std::filesystem::file_size(path) - 1);
  Result<SlotFileResult> r = h.group->slot_restore(1, bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  EXPECT_EQ(h.group->slot_views()[1].n_cached, held);

  auto other = group_testing::cpu_engine(slots_model_path(42));
  Group f(*other, params(1, 96));
  ASSERT_EQ(generate(*f.group, first, 3).tokens.size(), 3u);
  ASSERT_TRUE(f.group->slot_save(0, bad).is_ok());
  r = h.group->slot_restore(1, bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("another model"), std::string::npos) << r.status().message();
  Group small(*e, params(2, 16));  // a context of 32 cells, slots of 16
  r = small.group->slot_restore(0, path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("a slot holds 16"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(h.group->slot_restore(1, temp_file("absent")).is_ok());
  EXPECT_FALSE(h.group->slot_save(5, path).is_ok()) << "no slot 5";
  EXPECT_EQ(h.group->slot_views()[1].n_cached, held);
  EXPECT_EQ(generate(*h.group, turn2, 6).tokens, want.tokens) << "the slot still serves";
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

TEST(GroupSlots, TheRamCacheBringsBackAnEvictedPrompt) {
  auto e = group_testing::cpu_engine(slots_model_path());
  const std::vector<int32_t> a = slots_prompt(3, 30), b = slots_prompt(4, 12);
  const std::vector<int32_t> a2 = concat(a, slots_prompt(5, 5));

  Group plain(*e, params(1, 64));
  generate(*plain.group, a, 4);
  generate(*plain.group, b, 4);
  const Output want = generate(*plain.group, a2, 5);
  EXPECT_EQ(want.n_cached, 0) << "without the RAM cache the one slot forgot `a`";

  GroupParams p = params(1, 64);
  p.cache_ram_bytes = 16 << 20;
  Group cached(*e, p);
  generate(*cached.group, a, 4);
  generate(*cached.group, b, 4);  // evicts `a` (and what was generated after it) to RAM
  auto [bytes, entries] = cached.group->cache_ram_use();
  EXPECT_EQ(entries, 1u);
  EXPECT_GT(bytes, 0u);
  EXPECT_LE(bytes, p.cache_ram_bytes);
  const Output got = generate(*cached.group, a2, 5);
  EXPECT_EQ(got.n_cached, 30) << "restored from RAM, cut to the shared prefix";
  EXPECT_EQ(got.tokens, want.tokens);
  std::tie(bytes, entries) = cached.group->cache_ram_use();
  EXPECT_EQ(entries, 2u) << "`b` went to RAM when `a2` took the slot";
}

TEST(GroupSlots, ContextShiftGoesOnPastTheSlotWithTheSameTokensInAnyCompany) {
  auto e = group_testing::cpu_engine(slots_model_path());
  const std::vector<int32_t> p = slots_prompt(6, 10);

  Group no_shift(*e, params(1, 32));
  const Output cut = generate(*no_shift.group, p, 60);
  EXPECT_EQ(cut.finish_reason, "length");
  EXPECT_EQ(cut.tokens.size(), 23u) << "the slot is full after 32 positions";

  GroupParams sp = params(3, 32);
  sp.context_shift = true;
  sp.n_keep = 4;
  Group alone(*e, sp);
  const Output ref = generate(*alone.group, p, 60);
  ASSERT_EQ(ref.tokens.size(), 60u) << ref.error;
  EXPECT_EQ(ref.finish_reason, "length");
  EXPECT_EQ(std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 23), cut.tokens);

  // Beside two other requests that shift at other times.
  Group crowd(*e, sp);
  Task others[2] = {greedy_task(slots_prompt(7, 17), 70), greedy_task(slots_prompt(8, 3), 50)};
  std::shared_ptr<ResultChannel> ch[2] = {others[0].channel, others[1].channel};
  crowd.group->post(std::move(others[0]));
  Task mine = greedy_task(p, 60);
  std::shared_ptr<ResultChannel> my_ch = mine.channel;
  crowd.group->post(std::move(mine));
  crowd.group->post(std::move(others[1]));
  const Output got = collect(*my_ch);
  EXPECT_EQ(got.tokens, ref.tokens);
  EXPECT_EQ(collect(*ch[0]).tokens.size(), 70u);
  EXPECT_EQ(collect(*ch[1]).tokens.size(), 50u);
}

TEST(GroupSlots, SleepsAndWakesWithItsPromptsInTheRamCache) {
  auto e = group_testing::cpu_engine(slots_model_path());
  const std::vector<int32_t> a = slots_prompt(9, 25);
  GroupParams p = params(2, 64);
  p.cache_ram_bytes = 16 << 20;
  Group g(*e, p);
  const Output first = generate(*g.group, a, 6);
  ASSERT_EQ(first.tokens.size(), 6u);

  ASSERT_TRUE(g.group->sleep().is_ok());
  e->sleep();
  const Output refused = generate(*g.group, a, 6);
  EXPECT_NE(refused.error.find("asleep"), std::string::npos) << refused.error;
  ASSERT_TRUE(e->wake().is_ok());
  ASSERT_TRUE(g.group->wake().is_ok());
  EXPECT_EQ(g.group->slot_views()[0].n_cached, 0) << "the context forgot its sequences";
  const Output again = generate(*g.group, a, 6);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.n_cached, 24) << "the prompt came back from the RAM cache";
}

}  // namespace
}  // namespace strata::server
