// The host RAM cache of prompt states: its bound, its LRU order and prefix rules, and a hit
// that restores a state continues with the bytes a full evaluation of the prompt gives.
#include "engine/prompt_cache.h"

#include <gtest/gtest.h>

#include <numeric>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::argmax;

std::vector<int32_t> seq(int32_t first, size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

HostBytes blob(size_t n, uint8_t fill) { return HostBytes(n, fill); }

TEST(PromptCache, KeepsWithinItsBoundEvictingTheLeastRecentlyUsed) {
  PromptCache cache(1000);
  // Each entry costs 300 bytes of state + 4 per token.
  ASSERT_TRUE(cache.insert(seq(0, 10), blob(300, 1)));    // 340
  ASSERT_TRUE(cache.insert(seq(100, 10), blob(300, 2)));  // 680
  EXPECT_EQ(cache.bytes(), 680u);
  // Finding the first makes it the most recent: the second is evicted by the third.
  ASSERT_TRUE(cache.lookup(seq(0, 12)).has_value());
  ASSERT_TRUE(cache.insert(seq(200, 10), blob(300, 3)));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_LE(cache.bytes(), cache.max_bytes());
  EXPECT_TRUE(cache.lookup(seq(0, 10)).has_value());
  EXPECT_FALSE(cache.lookup(seq(100, 10)).has_value());
  EXPECT_TRUE(cache.lookup(seq(200, 10)).has_value());

  // Many inserts of every size: the bound holds after each.
  for (int i = 0; i < 50; ++i) {
    cache.insert(seq(1000 * (i + 1), static_cast<size_t>(1 + i % 7)),
                 blob(static_cast<size_t>(50 + (i * 137) % 600), static_cast<uint8_t>(i)));
    ASSERT_LE(cache.bytes(), cache.max_bytes()) << i;
  }
  // A state larger than the bound is not kept and evicts nothing.
  const size_t before = cache.size();
  EXPECT_FALSE(cache.insert(seq(5, 3), blob(1001, 9)));
  EXPECT_EQ(cache.size(), before);
  cache.clear();
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(PromptCache, FindsTheLongestSharedPrefixAndDropsSubsumedEntries) {
  PromptCache cache(1 << 20);
  cache.insert(seq(0, 8), blob(10, 1));
  cache.insert(seq(50, 20), blob(10, 2));
  // A prompt that extends the first entry, one that shares part of the second, one that
  // shares nothing.
  auto hit = cache.lookup(seq(0, 30));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->n_match, 8u);
  EXPECT_EQ(hit->n_tokens, 8u);
  EXPECT_EQ((*hit->state)[0], 1);
  std::vector<int32_t> partial = seq(50, 5);
  partial.push_back(-1);
  hit = cache.lookup(partial);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->n_match, 5u);
  EXPECT_EQ((*hit->state)[0], 2);
  EXPECT_FALSE(cache.lookup(partial, 6).has_value()) << "shorter than min_match";
  EXPECT_FALSE(cache.lookup(seq(900, 4)).has_value());

  // A longer state of the first prompt replaces it; a shorter one is served by the longer.
  const std::shared_ptr<const HostBytes> kept = hit->state;
  cache.insert(seq(0, 12), blob(10, 3));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ((*cache.lookup(seq(0, 30))->state)[0], 3);
  cache.insert(seq(0, 4), blob(10, 4));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ((*cache.lookup(seq(0, 30))->state)[0], 3);
  EXPECT_EQ((*kept)[0], 2) << "a state handed out stays valid";
}

std::string cache_model_path() {
  SynthParams p;
  p.n_embd = 128;
  p.n_layer = 3;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 300;
  p.dtype = DType::kQ4_0;
  p.seed = 23;
  return testing::synth_file("prompt_cache", p);
}

// Evaluates prompt[from..] in `seq` (which holds prompt[0..from)) and generates n tokens
// greedily; every logit row, bytewise.
std::vector<uint8_t> finish_and_generate(Context& ctx, int32_t s,
                                         const std::vector<int32_t>& prompt, size_t from, int n) {
  Batch b;
  for (size_t i = from; i < prompt.size(); ++i) {
    b.add(prompt[i], static_cast<int32_t>(i), s, i + 1 == prompt.size());
  }
  std::vector<uint8_t> bytes;
  for (int step = 0; step < n; ++step) {
    const Status st = ctx.decode(b);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) break;
    const auto* p = reinterpret_cast<const uint8_t*>(ctx.logits(0));
    bytes.insert(bytes.end(), p, p + 4 * ctx.n_vocab());
    b.clear();
    b.add(argmax(ctx.logits(0), ctx.n_vocab()), ctx.seq_len(s), s, true);
  }
  return bytes;
}

TEST(PromptCache, AHitRestoresAndContinuesAsAFullEvaluation) {
  auto model = Model::open(cache_model_path());
  ASSERT_TRUE(model.is_ok());
  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions o;
  o.n_threads = 2;
  devices.push_back(cpu_device_new(o));
  EngineOptions eo;
  auto engine = Engine::create(std::move(model).value(), std::move(devices), eo);
  ASSERT_TRUE(engine.is_ok());
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_seq = 2;
  auto ctx = Context::create(**engine, cp);
  ASSERT_TRUE(ctx.is_ok());
  Context& c = **ctx;

  std::vector<int32_t> first;
  for (int i = 0; i < 40; ++i) first.push_back(3 + (i * 37) % 290);
  // The cache stores what a slot held: the first prompt, then the slot moves on.
  finish_and_generate(c, 0, first, 0, 1);
  auto state = c.seq_state_save(0);
  ASSERT_TRUE(state.is_ok());
  PromptCache cache(64 << 20);
  ASSERT_TRUE(cache.insert(c.seq_tokens(0), std::move(state).value()));
  c.clear();

  // A prompt that extends it, and one that shares only its first 25 tokens.
  std::vector<int32_t> extends = first;
  for (int i = 0; i < 9; ++i) extends.push_back(100 + i);
  std::vector<int32_t> diverges(first.begin(), first.begin() + 25);
  for (int i = 0; i < 6; ++i) diverges.push_back(200 + i);

  for (const auto& prompt : {extends, diverges}) {
    c.clear();
    const std::vector<uint8_t> full = finish_and_generate(c, 1, prompt, 0, 5);
    ASSERT_FALSE(full.empty());
    c.clear();
    auto hit = cache.lookup(prompt);
    ASSERT_TRUE(hit.has_value());
    ASSERT_TRUE(c.seq_state_restore(1, *hit->state).is_ok());
    c.seq_truncate(1, static_cast<int32_t>(hit->n_match));
    EXPECT_EQ(c.seq_len(1), static_cast<int32_t>(hit->n_match));
    EXPECT_EQ(finish_and_generate(c, 1, prompt, hit->n_match, 5), full)
        << "restored " << hit->n_match << " of " << prompt.size() << " tokens";
  }
}

}  // namespace
}  // namespace strata
