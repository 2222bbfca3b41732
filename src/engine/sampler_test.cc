#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace strata {
namespace {

// Parameters with every truncation and penalty off, to test one stage at a time.
SamplerParams plain(float temperature = 1.0f, uint64_t seed = 1234) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

// Logits whose softmax is exactly `probs` (up to rounding); the offset checks that only
// differences of logits matter.
std::vector<float> logits_of(const std::vector<double>& probs, double offset = 3.0) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p) + offset));
  return l;
}

// Random logits from our own generator (not the one under test's sampling path).
std::vector<float> random_logits(SamplerRng& rng, int32_t n, float scale) {
  std::vector<float> l(static_cast<size_t>(n));
  for (float& v : l) v = (rng.uniform() - 0.5f) * scale;
  return l;
}

std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<int> h(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++h[static_cast<size_t>(s.sample(logits.data()))];
  return h;
}

// Bound on |observed frequency - p| for `draws` independent draws: 5 standard deviations, so
// a correct sampler fails with probability ~1e-6 per check (and never, given the fixed seed).
double bound(double p, int draws) { return 5.0 * std::sqrt(p * (1.0 - p) / draws) + 1e-9; }

TEST(SamplerRngTest, MatchesReferenceSplitmixAndXoshiro) {
  // splitmix64 from 0 starts e220a8397b1dcdaf, 6e789e6aa1b965f4, ... (its published
  // sequence); the outputs below come from a separate implementation of xoshiro256**.
  SamplerRng rng(0);
  EXPECT_EQ(rng.next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(rng.next(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(rng.next(), 0x1a5f849d4933e6e0ULL);
  SamplerRng other(12345);
  EXPECT_EQ(other.next(), 0xbe6a36374160d49bULL);
}

TEST(SamplerRngTest, UniformIsTop24BitsInUnitInterval) {
  SamplerRng a(7), b(7);
  for (int i = 0; i < 1000; ++i) {
    const float u = a.uniform();
    const uint64_t x = b.next();
    EXPECT_EQ(u, static_cast<float>(x >> 40) / 16777216.0f);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
}

TEST(SamplerExpTest, MatchesDoublePrecisionExp) {
  // Relative error against the double exp over the range that matters for probabilities;
  // 1e-6 leaves room for float rounding of the polynomial (about 1e-7 in practice).
  for (float x = -87.0f; x <= 0.0f; x += 0.00731f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(exp_nonpositive(x) / want, 1.0, 1e-6) << "x = " << x;
  }
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive(-100.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_nonpositive(std::nanf("")), 0.0f);
}

TEST(SamplerParamsTest, DefaultsAreValid) { EXPECT_TRUE(SamplerParams{}.validate().is_ok()); }

TEST(SamplerParamsTest, RejectsOutOfRangeNamingFieldAndValue) {
  struct Case {
    void (*set)(SamplerParams&);
    const char* field;
    const char* value;
  };
  const Case cases[] = {
      {[](SamplerParams& p) { p.temperature = -0.5f; }, "temperature", "-0.5"},
      {[](SamplerParams& p) { p.temperature = std::nanf(""); }, "temperature", "nan"},
      {[](SamplerParams& p) { p.temperature = INFINITY; }, "temperature", "inf"},
      {[](SamplerParams& p) { p.top_k = -2; }, "top_k", "-2"},
      {[](SamplerParams& p) { p.top_p = 1.5f; }, "top_p", "1.5"},
      {[](SamplerParams& p) { p.top_p = -0.25f; }, "top_p", "-0.25"},
      {[](SamplerParams& p) { p.min_p = 2.0f; }, "min_p", "2"},
      {[](SamplerParams& p) { p.min_p = std::nanf(""); }, "min_p", "nan"},
      {[](SamplerParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty", "0"},
      {[](SamplerParams& p) { p.repeat_penalty = -1.0f; }, "repeat_penalty", "-1"},
      {[](SamplerParams& p) { p.repeat_last_n = -2; }, "repeat_last_n", "-2"},
      {[](SamplerParams& p) { p.repeat_last_n = kSamplerMaxRepeatLastN + 1; }, "repeat_last_n",
       "1048577"},
      {[](SamplerParams& p) { p.presence_penalty = 3.0f; }, "presence_penalty", "3"},
      {[](SamplerParams& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty", "-2.5"},
      {[](SamplerParams& p) { p.n_probs = -1; }, "n_probs", "-1"},
      {[](SamplerParams& p) { p.n_probs = kSamplerMaxNProbs + 1; }, "n_probs", "21"},
  };
  for (const Case& c : cases) {
    SamplerParams p;
    c.set(p);
    Status s = p.validate();
    ASSERT_FALSE(s.is_ok()) << c.field;
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string("= ") + c.value), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("must be"), std::string::npos) << s.message();
    EXPECT_FALSE(Sampler::create(p, 100).is_ok());
  }
}

TEST(SamplerParamsTest, AcceptsEdgesOfRanges) {
  SamplerParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 0.0f;
  p.min_p = 1.0f;
  p.repeat_last_n = -1;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.n_probs = kSamplerMaxNProbs;
  EXPECT_TRUE(p.validate().is_ok()) << p.validate().message();
}

TEST(SamplerTest, CreateRejectsEmptyVocab) {
  Result<Sampler> r = Sampler::create(SamplerParams{}, 0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("n_vocab"), std::string::npos);
}

TEST(SamplerTest, GreedyIsArgmaxFirstOnTies) {
  SamplerParams p;  // defaults otherwise: truncation must not matter for greedy
  p.temperature = 0.0f;
  Sampler s(p, 1000);
  SamplerRng data(99);
  for (int row = 0; row < 20; ++row) {
    std::vector<float> l = random_logits(data, 1000, 10.0f);
    const auto best = std::max_element(l.begin(), l.end()) - l.begin();
    EXPECT_EQ(s.sample(l.data()), best);
  }
  std::vector<float> tie(1000, 0.0f);
  tie[17] = tie[400] = tie[999] = 2.0f;
  EXPECT_EQ(s.sample(tie.data()), 17);
}

TEST(SamplerTest, TopK1IsGreedyAtAnyTemperature) {
  SamplerRng data(5);
  for (float t : {0.5f, 1.0f, 5.0f, 100.0f}) {
    SamplerParams p = plain(t);
    p.top_k = 1;
    Sampler s(p, 5000);
    for (int row = 0; row < 10; ++row) {
      std::vector<float> l = random_logits(data, 5000, 2.0f);
      const auto best = std::max_element(l.begin(), l.end()) - l.begin();
      EXPECT_EQ(s.sample(l.data()), best) << "temperature " << t;
    }
  }
}

TEST(SamplerTest, SmallTopPKeepsOnlyTheTopToken) {
  // The top token has only 30% of the mass, so a sampler ignoring top_p would show others.
  const std::vector<float> l = logits_of({0.1, 0.15, 0.3, 0.2, 0.25});
  for (int32_t top_k : {0, 4}) {
    SamplerParams p = plain(1.0f);
    p.top_k = top_k;
    p.top_p = 0.05f;
    Sampler s(p, 5);
    std::vector<int> h = histogram(s, l, 2000);
    EXPECT_EQ(h[2], 2000) << "top_k " << top_k;
  }
}

TEST(SamplerTest, MinPFiltersBelowFractionOfMax) {
  // p_max = 0.5, min_p = 0.2 keeps p >= 0.1: tokens 0, 1, 2 stay, token 3 (0.05) goes.
  const std::vector<float> l = logits_of({0.5, 0.3, 0.15, 0.05});
  for (int32_t top_k : {0, 40}) {
    SamplerParams p = plain(1.0f);
    p.top_k = top_k;
    p.min_p = 0.2f;
    Sampler s(p, 4);
    std::vector<int> h = histogram(s, l, 5000);
    EXPECT_EQ(h[3], 0) << "top_k " << top_k;
    EXPECT_GT(h[2], 0) << "top_k " << top_k;
    // Renormalised over what is left: 0.15 / 0.95.
    EXPECT_NEAR(h[2] / 5000.0, 0.15 / 0.95, bound(0.15 / 0.95, 5000));
  }
}

TEST(SamplerTest, FrequenciesMatchTheDistribution) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> l = logits_of(probs);
  const int kDraws = 20000;
  Sampler s(plain(1.0f, 42), 4);
  std::vector<int> h = histogram(s, l, kDraws);
  for (size_t i = 0; i < probs.size(); ++i) {
    EXPECT_NEAR(h[i] / double(kDraws), probs[i], bound(probs[i], kDraws)) << "token " << i;
  }

  // Temperature 2 flattens to p^(1/2), renormalised.
  Sampler hot(plain(2.0f, 43), 4);
  h = histogram(hot, l, kDraws);
  double z = 0;
  for (double p : probs) z += std::sqrt(p);
  for (size_t i = 0; i < probs.size(); ++i) {
    const double q = std::sqrt(probs[i]) / z;
    EXPECT_NEAR(h[i] / double(kDraws), q, bound(q, kDraws)) << "token " << i;
  }
}

TEST(SamplerTest, TopKRenormalisesBeforeTopP) {
  // probs 0.1 0.2 0.3 0.4. top_p = 0.75 alone: 0.4, 0.7, 0.9 -> keeps three tokens.
  // After top_k = 3 the mass is 0.9 and the renormalised prefix 0.444, 0.778 -> keeps two.
  const std::vector<float> l = logits_of({0.1, 0.2, 0.3, 0.4});
  const int kDraws = 20000;
  SamplerParams p = plain(1.0f, 7);
  p.top_p = 0.75f;
  Sampler alone(p, 4);
  std::vector<int> h = histogram(alone, l, kDraws);
  EXPECT_EQ(h[0], 0);
  EXPECT_NEAR(h[1] / double(kDraws), 0.2 / 0.9, bound(0.2 / 0.9, kDraws));
  EXPECT_NEAR(h[3] / double(kDraws), 0.4 / 0.9, bound(0.4 / 0.9, kDraws));

  p.top_k = 3;
  Sampler after_k(p, 4);
  h = histogram(after_k, l, kDraws);
  EXPECT_EQ(h[0], 0);
  EXPECT_EQ(h[1], 0);
  EXPECT_NEAR(h[3] / double(kDraws), 4.0 / 7.0, bound(4.0 / 7.0, kDraws));
}

TEST(SamplerTest, RepeatPenaltyDividesPositiveMultipliesNegative) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.1f;
  {
    Sampler s(p, 3);
    const std::vector<float> l = {2.0f, 1.9f, -5.0f};
    EXPECT_EQ(s.sample(l.data()), 0);
    s.accept(0);  // 2.0 / 1.1 = 1.82 < 1.9
    EXPECT_EQ(s.sample(l.data()), 1);
  }
  {
    Sampler s(p, 3);
    // Dividing a negative logit would raise it (-1.0 / 1.1 = -0.91) and keep token 0 on top;
    // multiplying lowers it to -1.1, below -1.05.
    const std::vector<float> l = {-1.0f, -1.05f, -5.0f};
    s.accept(0);
    EXPECT_EQ(s.sample(l.data()), 1);
  }
}

TEST(SamplerTest, PresenceAndFrequencySubtract) {
  const std::vector<float> l = {1.0f, 0.8f, -5.0f};
  {
    SamplerParams p = plain(0.0f);
    p.presence_penalty = 0.3f;  // once, however often the token was seen: 1.0 - 0.3 = 0.7
    Sampler s(p, 3);
    s.accept(0);
    EXPECT_EQ(s.sample(l.data()), 1);
    s.accept(1);  // 0.8 - 0.3 = 0.5 < 0.7
    EXPECT_EQ(s.sample(l.data()), 0);
  }
  {
    SamplerParams p = plain(0.0f);
    p.frequency_penalty = 0.15f;  // once: 0.85 > 0.8; twice: 0.7 < 0.8
    Sampler s(p, 3);
    s.accept(0);
    EXPECT_EQ(s.sample(l.data()), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(l.data()), 1);
  }
}

TEST(SamplerTest, PenaltyWindowForgetsOldTokensAndResetForgetsAll) {
  SamplerParams p = plain(0.0f);
  p.presence_penalty = 1.0f;
  p.repeat_last_n = 2;
  const std::vector<float> l = {1.0f, 0.8f, 0.0f, 0.0f, 0.0f};
  Sampler s(p, 5);
  s.accept(0);
  EXPECT_EQ(s.sample(l.data()), 1);
  s.accept(3);
  EXPECT_EQ(s.sample(l.data()), 1);
  s.accept(4);  // token 0 leaves the window of two
  EXPECT_EQ(s.sample(l.data()), 0);
  s.accept(0);
  s.accept(-1);  // out of range: ignored, not a crash
  s.accept(1 << 30);
  EXPECT_EQ(s.sample(l.data()), 1);
  s.reset();
  EXPECT_EQ(s.sample(l.data()), 0);

  p.repeat_last_n = 0;  // disabled
  Sampler off(p, 5);
  off.accept(0);
  EXPECT_EQ(off.sample(l.data()), 0);
}

TEST(SamplerTest, SameSeedSameTokensAndResetReplays) {
  SamplerParams p;  // the defaults, with penalties on
  p.repeat_penalty = 1.2f;
  p.frequency_penalty = 0.1f;
  p.top_p = 0.9f;
  p.seed = 2024;
  Sampler a(p, 3000), b(p, 3000);
  SamplerRng data(11);
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> first;
  for (int i = 0; i < 100; ++i) {
    rows.push_back(random_logits(data, 3000, 8.0f));
    const int32_t ta = a.sample(rows.back().data());
    const int32_t tb = b.sample(rows.back().data());
    ASSERT_EQ(ta, tb) << "step " << i;
    a.accept(ta);
    b.accept(tb);
    first.push_back(ta);
  }
  a.reset();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t t = a.sample(rows[i].data());
    ASSERT_EQ(t, first[i]) << "step " << i;
    a.accept(t);
  }
}

TEST(SamplerTest, DifferentSeedsDifferOnFlatDistribution) {
  const std::vector<float> flat(1000, 0.0f);
  Sampler a(plain(1.0f, 1), 1000), b(plain(1.0f, 2), 1000);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a.sample(flat.data()) == b.sample(flat.data());
  // Independent draws agree with probability 1/1000 each.
  EXPECT_LT(same, 5);
}

TEST(SamplerTest, FlatDrawFollowsTheUniformExactly) {
  // Independent of the sampler's arithmetic: on a flat row of 1000 tokens the draw u picks
  // floor(u * 1000); u is the top 24 bits of the first xoshiro256** output for seed 0.
  const std::vector<float> flat(1000, 0.0f);
  Sampler s(plain(1.0f, 0), 1000);
  const uint64_t first = 0x99ec5f36cb75f2b4ULL;
  EXPECT_EQ(s.sample(flat.data()), static_cast<int32_t>((first >> 40) * 1000 >> 24));
  Sampler t(plain(1.0f), 1000);
  EXPECT_EQ(t.sample_with_uniform(flat.data(), 0.0f), 0);
  EXPECT_EQ(t.sample_with_uniform(flat.data(), 0.5f), 500);
  EXPECT_EQ(t.sample_with_uniform(flat.data(), 0.99999f), 999);
}

// A reference chain with full sorts, as llama.cpp writes it: top_k, then top_p, then min_p,
// then temperature and the draw by inverse CDF over the sorted candidates.
// `ids` is every id ordered by (logit desc, id asc).
int32_t reference_sample(const std::vector<float>& l, std::vector<int32_t> ids,
                         const SamplerParams& p, float u) {
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) ids.resize(p.top_k);
  const double max = l[ids[0]];
  double z = 0;
  for (int32_t id : ids) z += std::exp(l[id] - max);
  double cum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cum += std::exp(l[ids[i]] - max) / z;
    if (cum >= p.top_p) {
      ids.resize(i + 1);
      break;
    }
  }
  if (p.min_p > 0) {
    size_t keep = 0;
    while (keep < ids.size() && std::exp(l[ids[keep]] - max) >= p.min_p) ++keep;
    ids.resize(std::max<size_t>(keep, 1));
  }
  double total = 0;
  for (int32_t id : ids) total += std::exp((l[id] - max) / p.temperature);
  double acc = 0;
  for (int32_t id : ids) {
    acc += std::exp((l[id] - max) / p.temperature);
    if (acc > u * total) return id;
  }
  return ids.back();
}

TEST(SamplerTest, LargeVocabMatchesFullSortReference) {
  const int32_t kVocab = 150000;
  SamplerRng data(3);
  // Logits with a heavy head, as a language model's are.
  std::vector<float> l = random_logits(data, kVocab, 6.0f);
  for (int i = 0; i < 300; ++i) l[(i * 7919) % kVocab] += 9.0f;
  std::vector<int32_t> sorted(l.size());
  std::iota(sorted.begin(), sorted.end(), 0);
  std::sort(sorted.begin(), sorted.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  struct Config {
    int32_t top_k;
    float top_p, min_p, temperature;
  };
  const Config configs[] = {{0, 0.9f, 0.0f, 0.7f},   {0, 0.5f, 0.02f, 1.0f},
                            {0, 0.99f, 0.0f, 1.3f},  {40, 0.95f, 0.05f, 0.8f},
                            {200, 1.0f, 0.0f, 1.0f}, {0, 1.0f, 0.1f, 1.0f}};
  for (const Config& c : configs) {
    SamplerParams p = plain(c.temperature);
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    Sampler s(p, kVocab);
    // Points away from 0 and 1; a point near a CDF boundary could differ by rounding only.
    for (float u : {0.013f, 0.21f, 0.37f, 0.5f, 0.66f, 0.81f, 0.97f}) {
      const int32_t got = s.sample_with_uniform(l.data(), u);
      // The id-order draw (no top_p, no top_k) is not comparable with a sorted-order reference.
      if (c.top_p < 1.0f || c.top_k > 0) {
        EXPECT_EQ(got, reference_sample(l, sorted, p, u))
            << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p << " u " << u;
      } else {
        EXPECT_GE(l[got], *std::max_element(l.begin(), l.end()) + std::log(c.min_p));
      }
    }
  }
}

TEST(SamplerTest, LogprobsAreThePenalisedSoftmax) {
  SamplerParams p = plain(1.0f);
  p.n_probs = 3;
  p.repeat_penalty = 2.0f;
  const std::vector<double> probs = {0.05, 0.4, 0.25, 0.3};
  const std::vector<float> l = logits_of(probs);
  Sampler s(p, 4);
  s.accept(1);
  // Token 1's logit log(0.4) + 3 = 2.084 is halved by the penalty.
  std::vector<double> pen(l.begin(), l.end());
  pen[1] /= 2.0;
  double z = 0;
  for (double v : pen) z += std::exp(v);
  for (int i = 0; i < 50; ++i) {
    const int32_t t = s.sample(l.data());
    EXPECT_NEAR(s.last_logprob(), pen[t] - std::log(z), 1e-5);
    const std::vector<TokenLogprob>& top = s.last_top();
    ASSERT_EQ(top.size(), 3u);
    // Penalised order: token 3 (0.3), token 2 (0.25), then token 1 (e^1.04) vs token 0 (0.05).
    EXPECT_EQ(top[0].token, 3);
    EXPECT_EQ(top[1].token, 2);
    EXPECT_EQ(top[2].token, 1);
    for (const TokenLogprob& tl : top) EXPECT_NEAR(tl.logprob, pen[tl.token] - std::log(z), 1e-5);
  }
}

TEST(SamplerTest, TopAlternativesBreakTiesByLowerId) {
  SamplerParams p = plain(0.0f);
  p.n_probs = 2;
  std::vector<float> l(100, 0.0f);
  l[50] = 1.0f;
  l[70] = 1.0f;
  l[20] = 0.5f;
  l[10] = 0.5f;
  Sampler s(p, 100);
  EXPECT_EQ(s.sample(l.data()), 50);
  ASSERT_EQ(s.last_top().size(), 2u);
  EXPECT_EQ(s.last_top()[0].token, 50);
  EXPECT_EQ(s.last_top()[1].token, 70);
  EXPECT_FLOAT_EQ(s.last_top()[0].logprob, s.last_logprob());
}

TEST(SamplerTest, NonFiniteLogitsDoNotBreakTheChain) {
  std::vector<float> l(64, -1.0f);
  l[3] = std::nanf("");
  l[9] = 2.0f;
  l[30] = -std::numeric_limits<float>::infinity();
  SamplerParams p;  // defaults: top_k, top_p, min_p all on
  Sampler s(p, 64);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(l.data());
    EXPECT_NE(t, 3);
    EXPECT_NE(t, 30);
    EXPECT_TRUE(std::isfinite(s.last_logprob()));
  }
  const std::vector<float> none(64, std::nanf(""));
  const int32_t t = s.sample(none.data());
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 64);
}

}  // namespace
}  // namespace strata
