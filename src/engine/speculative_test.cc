#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "unit/cpu_engine.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using V = std::vector<int32_t>;

TEST(NgramDraft, TakesWhatFollowedTheLatestEarlierOccurrence) {
  // The tail (1 2) appeared at 0 (then 3 4 5) and at 5 (then 9 8): the later one wins.
  const V h = {1, 2, 3, 4, 5, 1, 2, 9, 8, 7, 1, 2};
  EXPECT_EQ(ngram_draft(h, 2, 10), (V{9, 8, 7, 1, 2}));  // not past the end of the history
  EXPECT_EQ(ngram_draft(h, 2, 2), (V{9, 8}));
  EXPECT_EQ(ngram_draft(h, 3, 10), V{});  // (7 1 2) never appeared before
  EXPECT_EQ(ngram_draft(h, 1, 3), (V{9, 8, 7}));
}

TEST(NgramDraft, AnOverlappingRunAndShortHistories) {
  // A run of one token: the latest earlier (1 1) starts one before the tail.
  EXPECT_EQ(ngram_draft(V{1, 1, 1, 1}, 2, 5), (V{1}));
  EXPECT_EQ(ngram_draft(V{1, 1, 1, 1}, 1, 5), (V{1}));
  EXPECT_EQ(ngram_draft(V{1, 2}, 2, 5), V{});  // the history is only the n-gram
  EXPECT_EQ(ngram_draft(V{}, 1, 5), V{});
  EXPECT_EQ(ngram_draft(V{4, 5, 4}, 1, 5), (V{5, 4}));
  EXPECT_EQ(ngram_draft(V{4, 5, 6}, 1, 5), V{});
}

TEST(SpecParams, NamesAndRanges) {
  EXPECT_EQ(*spec_type_from_name("ngram-simple"), SpecType::kNgram);
  EXPECT_EQ(*spec_type_from_name("draft-simple"), SpecType::kDraft);
  EXPECT_EQ(*spec_type_from_name("none"), SpecType::kNone);
  const auto bad = spec_type_from_name("draft-eagle3");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'draft-eagle3'"), std::string::npos);
  SpecParams p;
  EXPECT_TRUE(p.validate().is_ok());
  p.n_max = kSpecMaxDraft + 1;
  EXPECT_NE(p.validate().message().find("n_max is 257"), std::string::npos);
  p.n_max = 4;
  p.n_min = 5;
  EXPECT_NE(p.validate().message().find("n_min is 5; it must be in [0, 4]"), std::string::npos);
  p.n_min = 0;
  p.p_min = 1.5f;
  EXPECT_NE(p.validate().message().find("p_min is 1.5"), std::string::npos);
}

SynthParams draft_synth(uint64_t seed) {
  SynthParams p;
  p.n_embd = 64;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 128;
  p.n_vocab = 320;
  p.dtype = DType::kQ8_0;
  p.seed = seed;
  return p;
}

struct Opened {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Context> ctx;
};

Opened open_synth(const std::string& path, int32_t n_seq = 1) {
  std::unique_ptr<Engine> engine = testing::cpu_engine(path, 1);
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_batch = 7;  // histories longer than a micro-batch
  cp.n_seq = n_seq;
  auto ctx = Context::create(*engine, cp);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  return {std::move(engine), std::move(ctx).value()};
}

// The draft model's greedy continuation from an empty cache, stopping as DraftModel does; the
// probability of each token taken goes to *probs when given.
V reference_draft(const std::string& path, const V& history, int n_max, float p_min,
                  std::vector<double>* probs = nullptr) {
  Opened m = open_synth(path);
  Batch b;
  for (size_t i = 0; i < history.size(); ++i) {
    b.add(history[i], static_cast<int32_t>(i), 0, i + 1 == history.size());
  }
  V out;
  EXPECT_TRUE(m.ctx->decode(b).is_ok());
  while (static_cast<int>(out.size()) < n_max) {
    const float* l = m.ctx->logits(0);
    const int64_t n = m.ctx->n_vocab();
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i) best = l[i] > l[best] ? static_cast<int32_t>(i) : best;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i]) - l[best]);
    if (1.0 / sum < p_min) break;
    if (probs != nullptr) probs->push_back(1.0 / sum);
    out.push_back(best);
    b.clear();
    b.add(best, m.ctx->seq_len(0), 0, true);
    EXPECT_TRUE(m.ctx->decode(b).is_ok());
  }
  return out;
}

TEST(DraftModel, DraftsWhatItsGreedyDecodingSaysWhateverItsCacheHeld) {
  const std::string target_path = testing::synth_file("spec_target", draft_synth(1));
  const std::string draft_path = testing::synth_file("spec_draft", draft_synth(2));
  Opened target = open_synth(target_path);
  Opened d = open_synth(draft_path);
  auto dm = DraftModel::create(std::move(d.engine), std::move(d.ctx), target.engine->model());
  ASSERT_TRUE(dm.is_ok()) << dm.status().message();
  // Histories that share prefixes, grow, are cut back and change: the cache is reused for what
  // it holds of each one and decoded again from the first token that differs.
  V h;
  for (int i = 0; i < 19; ++i) h.push_back(3 + (i * 37) % 300);
  std::vector<V> histories = {h, V(h.begin(), h.begin() + 12), h};
  histories.push_back(h);
  histories.back().push_back(42);
  histories.push_back(V(h.begin(), h.begin() + 5));
  histories.back().push_back(7);
  histories.push_back(V{9});
  for (size_t k = 0; k < histories.size(); ++k) {
    const V want = reference_draft(draft_path, histories[k], 6, 0.0f);
    ASSERT_EQ(want.size(), 6u);
    auto got = (*dm)->draft(histories[k], 6, 0.0f);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(*got, want) << "history " << k;
    // The cache holds the history and the draft but its last token.
    EXPECT_EQ((*dm)->context().seq_len(0), static_cast<int32_t>(histories[k].size() + 5));
  }
  // p_min: it stops before the first token the model gives less than it. The bound is the
  // median probability of the first history's tokens, so that some tokens pass and some do not
  // (a p_min that every token passes would not test this).
  std::vector<double> probs;
  reference_draft(draft_path, histories[0], 6, 0.0f, &probs);
  ASSERT_EQ(probs.size(), 6u);
  std::sort(probs.begin(), probs.end());
  const auto p_min = static_cast<float>(probs[3]);
  int stopped_early = 0;
  for (size_t k = 0; k < histories.size(); ++k) {
    const V want = reference_draft(draft_path, histories[k], 6, p_min);
    auto got = (*dm)->draft(histories[k], 6, p_min);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(*got, want) << "history " << k;
    stopped_early += want.size() < 6 ? 1 : 0;
  }
  EXPECT_GT(stopped_early, 0) << "p_min never cut a draft: the bound does not test it";
}

// Several sequences drafted together: each draft is what that sequence alone gets, whatever
// the others hold, ask for or stop at.
TEST(DraftModel, SequencesDraftedTogetherDraftAsAlone) {
  const std::string target_path = testing::synth_file("spec_target", draft_synth(1));
  const std::string draft_path = testing::synth_file("spec_draft", draft_synth(2));
  Opened target = open_synth(target_path);
  Opened d = open_synth(draft_path, 3);
  auto dm = DraftModel::create(std::move(d.engine), std::move(d.ctx), target.engine->model());
  ASSERT_TRUE(dm.is_ok()) << dm.status().message();
  std::vector<V> h(3);
  for (int i = 0; i < 19; ++i) h[0].push_back(3 + (i * 37) % 300);
  for (int i = 0; i < 4; ++i) h[1].push_back(11 + (i * 13) % 300);
  h[2] = V(h[0].begin(), h[0].begin() + 10);  // shares a prefix with sequence 0's
  const int32_t n_max[3] = {5, 2, 7};
  for (int round = 0; round < 3; ++round) {
    std::vector<DraftRequest> r;
    for (int32_t k = 0; k < 3; ++k) r.push_back({k, h[static_cast<size_t>(k)], n_max[k], 0.0f});
    auto got = (*dm)->draft(r);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ((*got)[k], reference_draft(draft_path, h[k], n_max[k], 0.0f))
          << "round " << round << ", sequence " << k;
      // The next round's history keeps the draft's first token, and one token of its own.
      h[k].push_back((*got)[k][0]);
      h[k].push_back(static_cast<int32_t>(40 + k + static_cast<size_t>(round)));
    }
  }
  std::vector<DraftRequest> none = {{0, h[0], 0, 0.0f}};
  auto empty = (*dm)->draft(none);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE((*empty)[0].empty());
  std::vector<DraftRequest> outside = {{3, h[0], 2, 0.0f}};
  auto refused = (*dm)->draft(outside);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("draft sequence 3 is outside [0, 3)"),
            std::string::npos);
}

TEST(DraftModel, AnotherVocabularyIsRefusedByToken) {
  SynthParams s = draft_synth(1);
  s.script = {"alpha", "beta"};  // the last tokens' texts differ
  s.n_embd = 320;
  s.n_ff = 320;
  s.dtype = DType::kF32;
  const std::string scripted = testing::synth_file("spec_scripted", s);
  const std::string plain = testing::synth_file("spec_target", draft_synth(1));
  Opened target = open_synth(plain);
  Opened d = open_synth(scripted);
  auto dm = DraftModel::create(std::move(d.engine), std::move(d.ctx), target.engine->model());
  ASSERT_FALSE(dm.is_ok());
  EXPECT_NE(dm.status().message().find("not the same vocabulary"), std::string::npos)
      << dm.status().message();
  EXPECT_NE(dm.status().message().find("'alpha'"), std::string::npos) << dm.status().message();

  SynthParams big = draft_synth(1);
  big.n_vocab = 320 + 129;
  Opened far = open_synth(testing::synth_file("spec_far", big));
  auto refused = DraftModel::create(std::move(far.engine), std::move(far.ctx),
                                    open_synth(plain).engine->model());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("449 tokens, the model's 320"), std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace strata
