#include "engine/dry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/rng.h"
#include "engine/sampler.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

// DRY by its definition, in quadratic time: for every earlier place j, the longest run of
// tokens ending at j that equals the run ending at the window's last token, bounded by the
// nearest breaker (a head whose tail follows it in the window, the head nearest the end).
std::map<int32_t, float> naive_dry(const std::vector<int32_t>& w, const DryParams& p,
                                   const DryBreakers& b) {
  std::map<int32_t, float> out;
  const int64_t n = static_cast<int64_t>(w.size());
  if (p.multiplier == 0.0f || p.base < 1.0f || n <= p.allowed_length) return out;
  int64_t limit = n;
  for (int64_t h = n - 1; h >= 0 && limit == n; --h) {
    int64_t longest = -1;
    auto [first, last] = b.by_head.equal_range(w[static_cast<size_t>(h)]);
    for (auto it = first; it != last; ++it) {
      const int64_t len = static_cast<int64_t>(it->second.size());
      if (h + len > n - 1) continue;
      if (std::equal(it->second.begin(), it->second.end(), w.begin() + h + 1)) {
        longest = std::max(longest, len);
      }
    }
    if (longest >= 0) limit = (n - 1 - h) - longest;
  }
  if (limit < p.allowed_length) return out;
  std::map<int32_t, int64_t> best;
  for (int64_t j = 0; j + 1 < n; ++j) {
    int64_t len = 0;
    while (len <= j && w[static_cast<size_t>(j - len)] == w[static_cast<size_t>(n - 1 - len)])
      ++len;
    len = std::min(len, limit);
    if (len < p.allowed_length) continue;
    const int32_t next = w[static_cast<size_t>(j + 1)];
    best[next] = std::max(best[next], len);
  }
  const int64_t max_exp =
      p.base > 1.000001f ? static_cast<int64_t>(88.7228391f / std::log(p.base)) : 0;
  for (const auto& [token, len] : best) {
    auto [first, last] = b.by_head.equal_range(token);
    if (std::any_of(first, last, [](const auto& e) { return e.second.empty(); })) continue;
    int64_t e = len - p.allowed_length;
    if (max_exp > 0) e = std::min(e, max_exp);
    out[token] = p.multiplier * std::pow(p.base, static_cast<float>(e));
  }
  return out;
}

TEST(Dry, PenaltiesEqualTheDefinitionOnRandomWindows) {
  Rng rng(7);
  auto below = [&rng](int n) {
    return static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n));
  };
  int penalised = 0;
  for (int round = 0; round < 3000; ++round) {
    const int alphabet = 2 + below(4);
    std::vector<int32_t> w(static_cast<size_t>(1 + below(60)));
    for (int32_t& t : w) t = below(alphabet);
    DryBreakers b;
    const int n_breakers = below(3);
    for (int i = 0; i < n_breakers; ++i) {
      std::vector<int32_t> tail(static_cast<size_t>(below(3)));
      for (int32_t& t : tail) t = below(alphabet);
      b.by_head.emplace(below(alphabet + 2), tail);
    }
    DryParams p;
    p.multiplier = 0.8f;
    p.base = round % 7 == 0 ? 40.0f : 1.75f;  // 40: the exponent clamp
    p.allowed_length = below(4);
    std::vector<SampleBias> got;
    dry_penalties(w, p, b, got);
    const std::map<int32_t, float> want = naive_dry(w, p, b);
    ASSERT_EQ(got.size(), want.size()) << "round " << round;
    for (const SampleBias& e : got) {
      ASSERT_TRUE(want.count(e.token)) << "round " << round << " token " << e.token;
      ASSERT_FLOAT_EQ(e.bias, want.at(e.token)) << "round " << round << " token " << e.token;
    }
    penalised += static_cast<int>(got.size());
  }
  EXPECT_GT(penalised, 1000);  // the cases exercised penalties, not only their absence
}

TEST(Dry, ARepeatIsPenalisedByItsLengthAndABreakerEndsIt) {
  // 1 2 3 4 | 1 2 3: choosing 4 would repeat "1 2 3 4": a repeat of length 3.
  const std::vector<int32_t> w = {1, 2, 3, 4, 9, 1, 2, 3};
  DryParams p;
  p.multiplier = 1.0f;
  p.base = 2.0f;
  p.allowed_length = 2;
  std::vector<SampleBias> out;
  dry_penalties(w, p, DryBreakers{}, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, 4);
  EXPECT_FLOAT_EQ(out[0].bias, 2.0f);  // 1 * 2^(3 - 2)
  // Token 2 as a breaker: the repeat can reach back only to the tokens after the last 2.
  DryBreakers b;
  b.by_head.emplace(2, std::vector<int32_t>{});
  dry_penalties(w, p, b, out);
  EXPECT_TRUE(out.empty());
  // The two-token breaker "9 1" ends two tokens before the last: the repeat counts only
  // "2 3", so 4 gets the penalty of a repeat of the allowed length.
  DryBreakers b2;
  b2.by_head.emplace(9, std::vector<int32_t>{1});
  dry_penalties(w, p, b2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, 4);
  EXPECT_FLOAT_EQ(out[0].bias, 1.0f);  // 1 * 2^(2 - 2)
  // "1 2" as a breaker leaves one token after it, fewer than allowed: nothing is penalised.
  DryBreakers b3;
  b3.by_head.emplace(1, std::vector<int32_t>{2});
  dry_penalties(w, p, b3, out);
  EXPECT_TRUE(out.empty());
}

// The breakers as tokens, on a small vocabulary: tokens containing the breaker break alone;
// tokens ending with its start head the tokens of its rest.
TEST(Dry, BreakersBecomeTokenSequencesAsInLlamaCpp) {
  VocabSpec v;
  v.model = "llama";
  v.add_space_prefix = false;
  //            0        1      2       3    4    5    6     7     8     9
  v.tokens = {"<unk>", "<s>", "</s>", "x", "a", "b", "c", "ab", "bc", "abc"};
  v.scores = {0, 0, 0, -1, -2, -2, -2, -0.5f, -1, -0.1f};
  v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const std::vector<std::string> breakers = {"bc", ""};
  auto b = dry_breakers(breakers, *tok);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  std::map<int32_t, std::vector<std::vector<int32_t>>> got;
  for (const auto& [head, tail] : (*b)->by_head) got[head].push_back(tail);
  const std::vector<int32_t> c = tok->encode("c", false, false);
  const std::map<int32_t, std::vector<std::vector<int32_t>>> want = {
      {5, {c}},   // "b" + "c"
      {7, {c}},   // "ab" + "c"
      {8, {{}}},  // "bc"
      {9, {{}}},  // "abc"
  };
  EXPECT_EQ(got, want);
  std::vector<std::string> many(kDryMaxBreakers + 1, "x");
  auto refused = dry_breakers(many, *tok);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("dry_sequence_breakers"), std::string::npos);
}

// Through the Sampler: DRY moves greedy off the token that would extend a repeat, and only
// the tokens accepted into its window count.
TEST(Dry, SamplerAppliesDryAndIsHostOnly) {
  SamplerParams p;
  p.temperature = 0.0f;
  p.dry_multiplier = 1.0f;
  p.dry_base = 2.0f;
  p.dry_allowed_length = 2;
  Sampler s(p, 10);
  EXPECT_TRUE(s.host_only());
  std::vector<float> logits(10, 0.0f);
  logits[4] = 1.5f;  // the repeat's continuation, ahead by 1.5
  logits[5] = 1.0f;
  for (int32_t t : {1, 2, 3, 4, 9, 1, 2}) s.accept(t);
  EXPECT_EQ(s.sample(logits.data()), 4);  // "1 2" then 3: 4 does not continue a repeat yet
  s.accept(3);
  EXPECT_EQ(s.sample(logits.data()), 5);  // 4 would make "1 2 3 4" again: 1.5 - 2 < 1
  SamplerParams off = p;
  off.dry_multiplier = 0.0f;
  Sampler plain(off, 10);
  EXPECT_FALSE(plain.host_only());
  for (int32_t t : {1, 2, 3, 4, 9, 1, 2, 3}) plain.accept(t);
  EXPECT_EQ(plain.sample(logits.data()), 4);
}

}  // namespace
}  // namespace strata
