// The extended chain (core/sample.h SampleChain) against a reference written from llama.cpp's
// description of each sampler, in double precision and with a full sort everywhere: for a row
// of logits, the reference gives the distribution the draw should follow; the sampler, fed
// evenly spaced uniforms, must pick each token as often as that distribution says (each
// uniform picks one interval of a partition of [0, 1), so the counts are exact to 1 per
// token, not statistical).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/sample.h"
#include "engine/sampler.h"

namespace strata {
namespace {

struct Cand {
  int32_t id;
  double logit;
};

void sort_desc(std::vector<Cand>& c) {
  std::sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
}

std::vector<double> softmax(const std::vector<Cand>& c) {
  double max = -INFINITY;
  for (const Cand& x : c) max = std::max(max, x.logit);
  std::vector<double> p;
  double z = 0;
  for (const Cand& x : c) {
    p.push_back(std::exp(x.logit - max));
    z += p.back();
  }
  for (double& v : p) v /= z;
  return p;
}

struct Config {
  SampleSettings s;
  SampleChain c;
  bool xtc_fires = false;
};

// The distribution llama.cpp's chain leaves for the draw: token -> probability.
std::map<int32_t, double> reference(const std::vector<float>& logits, const Config& cfg) {
  const SampleSettings& s = cfg.s;
  const SampleChain& c = cfg.c;
  const size_t min_keep = static_cast<size_t>(std::max(c.min_keep, 1));
  std::vector<Cand> cand;
  for (size_t i = 0; i < logits.size(); ++i) cand.push_back({static_cast<int32_t>(i), logits[i]});
  for (ChainStage stage : c.order) {
    if (stage == ChainStage::kTopNSigma && c.top_n_sigma > 0 && cand.size() > 1) {
      double max = -INFINITY, sum = 0;
      for (const Cand& x : cand) {
        max = std::max(max, x.logit);
        sum += x.logit;
      }
      const double mean = sum / cand.size();
      double acc = 0;
      for (const Cand& x : cand) acc += (x.logit - mean) * (x.logit - mean);
      const double floor = max - c.top_n_sigma * std::sqrt(acc / cand.size());
      std::erase_if(cand, [floor](const Cand& x) { return x.logit < floor; });
    } else if (stage == ChainStage::kTopK && s.top_k > 0) {
      sort_desc(cand);
      cand.resize(std::min(cand.size(), std::max<size_t>(s.top_k, min_keep)));
    } else if (stage == ChainStage::kTypicalP && c.typical_p < 1) {
      sort_desc(cand);
      const std::vector<double> p = softmax(cand);
      double h = 0;
      for (double v : p) h -= v * std::log(v);
      std::vector<size_t> idx(cand.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
        return std::fabs(-std::log(p[a]) - h) < std::fabs(-std::log(p[b]) - h);
      });
      double cum = 0;
      size_t kept = idx.size();
      for (size_t i = 0; i < idx.size(); ++i) {
        cum += p[idx[i]];
        if (cum > c.typical_p && i + 1 >= min_keep) {
          kept = i + 1;
          break;
        }
      }
      std::vector<Cand> out;
      for (size_t i = 0; i < kept; ++i) out.push_back(cand[idx[i]]);
      cand = out;
    } else if (stage == ChainStage::kTopP && s.top_p < 1) {
      sort_desc(cand);
      const std::vector<double> p = softmax(cand);
      double cum = 0;
      for (size_t i = 0; i < p.size(); ++i) {
        cum += p[i];
        if (cum >= s.top_p && i + 1 >= min_keep) {
          cand.resize(i + 1);
          break;
        }
      }
    } else if (stage == ChainStage::kMinP && s.min_p > 0) {
      double max = -INFINITY;
      for (const Cand& x : cand) max = std::max(max, x.logit);
      std::vector<Cand> kept;
      for (const Cand& x : cand) {
        if (std::exp(x.logit - max) >= s.min_p) kept.push_back(x);
      }
      if (kept.size() >= min_keep) {
        cand = kept;
      } else {
        sort_desc(cand);
        cand.resize(std::min(cand.size(), min_keep));
      }
    } else if (stage == ChainStage::kXtc && cfg.xtc_fires && c.xtc_active() && cand.size() >= 2) {
      sort_desc(cand);
      const std::vector<double> p = softmax(cand);
      size_t last = 0;
      while (last + 1 < p.size() && p[last + 1] >= c.xtc_threshold) ++last;
      if (p[0] < c.xtc_threshold) last = 0;
      if (last > 0 && cand.size() - last >= min_keep) cand.erase(cand.begin(), cand.begin() + last);
    } else if (stage == ChainStage::kTemperature && c.dynatemp_range > 0) {
      if (cand.size() <= 1) continue;
      const double lo = std::max(0.0, double{s.temperature} - c.dynatemp_range);
      const double hi = double{s.temperature} + c.dynatemp_range;
      const std::vector<double> p = softmax(cand);
      double h = 0;
      for (double v : p) h -= v > 0 ? v * std::log(v) : 0;
      const double t =
          lo + (hi - lo) * std::pow(h / std::log(double(cand.size())), c.dynatemp_exponent);
      for (Cand& x : cand) x.logit /= t;
    } else if (stage == ChainStage::kTemperature) {
      for (Cand& x : cand) x.logit /= s.temperature;
    }
  }
  std::map<int32_t, double> out;
  const std::vector<double> p = softmax(cand);
  for (size_t i = 0; i < cand.size(); ++i) out[cand[i].id] += p[i];
  return out;
}

constexpr int kDraws = 4000;

// The sampler's picks over kDraws evenly spaced uniforms against the reference.
void expect_matches_reference(const std::vector<float>& logits, const Config& cfg,
                              const std::string& what) {
  const std::map<int32_t, double> want = reference(logits, cfg);
  RowSampler row;
  SampleExtra extra;
  extra.chain = &cfg.c;
  extra.xtc_uniform = cfg.xtc_fires ? 0.0f : 1.0f;
  std::map<int32_t, int> got;
  for (int i = 0; i < kDraws; ++i) {
    const float u = (static_cast<float>(i) + 0.5f) / kDraws;
    const int32_t t = row.sample(logits.data(), static_cast<int32_t>(logits.size()), cfg.s, {}, {},
                                 u, nullptr, &extra);
    ++got[t];
  }
  for (const auto& [token, count] : got) {
    ASSERT_TRUE(want.count(token))
        << what << ": token " << token << " is not in the reference's set";
  }
  for (const auto& [token, p] : want) {
    const double f = static_cast<double>(got.count(token) ? got[token] : 0) / kDraws;
    EXPECT_NEAR(f, p, 1.5 / kDraws + 1e-4) << what << ": token " << token;
  }
}

// The picks of a chain with state (Mirostat's mu, adaptive-p's mean) over kDraws evenly spaced
// uniforms, each draw from the same starting state: `start` puts the state back and points
// `extra` at it before each draw; `each` sees the token after it.
std::map<int32_t, int> stateful_picks(const std::vector<float>& logits, const Config& cfg,
                                      const std::function<void(SampleExtra&)>& start,
                                      const std::function<void(int32_t)>& each) {
  RowSampler row;
  SampleExtra extra;
  extra.chain = &cfg.c;
  std::map<int32_t, int> got;
  for (int i = 0; i < kDraws; ++i) {
    start(extra);
    const float u = (static_cast<float>(i) + 0.5f) / kDraws;
    const int32_t t = row.sample(logits.data(), static_cast<int32_t>(logits.size()), cfg.s, {}, {},
                                 u, nullptr, &extra);
    ++got[t];
    each(t);
  }
  return got;
}

// Mirostat's picks, each draw from mu0; `each` sees the token and mu after the draw.
std::map<int32_t, int> mirostat_picks(const std::vector<float>& logits, const Config& cfg,
                                      float mu0,
                                      const std::function<void(int32_t, float)>& each = {}) {
  float mu = mu0;
  return stateful_picks(
      logits, cfg,
      [&](SampleExtra& e) {
        mu = mu0;
        e.mirostat_mu = &mu;
      },
      [&](int32_t t) {
        if (each) each(t, mu);
      });
}

std::vector<float> random_row(uint64_t seed, int n, float scale) {
  Rng rng(seed);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& v : l) v = (rng.uniform() - 0.5f) * scale;
  return l;
}

Config base_off() {
  Config cfg;
  cfg.s.temperature = 1.0f;
  cfg.s.top_k = 0;
  cfg.s.top_p = 1.0f;
  cfg.s.min_p = 0.0f;
  return cfg;
}

TEST(SampleChain, EachSamplerAloneMatchesTheReference) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::vector<float> logits = random_row(seed, 300, 8.0f + seed);
    {
      Config cfg = base_off();
      cfg.c.typical_p = 0.2f + 0.1f * seed;
      expect_matches_reference(logits, cfg, "typical");
    }
    {
      Config cfg = base_off();
      cfg.c.top_n_sigma = 0.5f * seed;
      expect_matches_reference(logits, cfg, "top-n-sigma");
    }
    {
      Config cfg = base_off();
      cfg.s.temperature = 0.9f;
      cfg.c.dynatemp_range = 0.1f * seed;
      cfg.c.dynatemp_exponent = 0.5f * seed;
      expect_matches_reference(logits, cfg, "dynamic temperature");
    }
    for (bool fires : {false, true}) {
      Config cfg = base_off();
      cfg.c.xtc_probability = 0.5f;
      cfg.c.xtc_threshold = 0.02f * seed;
      cfg.xtc_fires = fires;
      expect_matches_reference(logits, cfg, fires ? "xtc fires" : "xtc idle");
    }
  }
}

TEST(SampleChain, CombinationsOrdersAndMinKeepMatchTheReference) {
  const std::vector<ChainStage> temperature_first = {ChainStage::kTemperature, ChainStage::kTopK,
                                                     ChainStage::kTypicalP,    ChainStage::kTopP,
                                                     ChainStage::kMinP,        ChainStage::kXtc};
  const std::vector<ChainStage> twice = {ChainStage::kTopP, ChainStage::kTemperature,
                                         ChainStage::kTopP, ChainStage::kMinP};
  for (uint64_t seed = 10; seed < 16; ++seed) {
    const std::vector<float> logits = random_row(seed, 500, 10.0f);
    Config cfg = base_off();
    cfg.s.temperature = 0.7f;
    cfg.s.top_k = 60;
    cfg.s.top_p = 0.9f;
    cfg.s.min_p = 0.02f;
    cfg.c.typical_p = 0.8f;
    cfg.c.top_n_sigma = 2.0f;
    cfg.c.xtc_probability = 1.0f;
    cfg.c.xtc_threshold = 0.05f;
    cfg.xtc_fires = true;
    expect_matches_reference(logits, cfg, "all on, default order");
    cfg.c.order = temperature_first;
    expect_matches_reference(logits, cfg, "temperature first");
    cfg.c.order = twice;
    cfg.c.min_keep = 5;
    cfg.s.top_p = 0.3f;
    expect_matches_reference(logits, cfg, "top_p twice, min_keep 5");
    cfg.c.order = {};  // no stage at all: the plain softmax
    expect_matches_reference(logits, cfg, "no stages");
  }
}

TEST(SampleChain, DefaultChainIsNotExtendedAndOtherOrdersAre) {
  SampleChain c;
  EXPECT_FALSE(c.extended());
  c.order = {ChainStage::kTopK, ChainStage::kTopP, ChainStage::kMinP, ChainStage::kTemperature};
  EXPECT_FALSE(c.extended());  // the disabled stages' places do not matter
  c.order = {ChainStage::kTemperature, ChainStage::kTopK, ChainStage::kTopP, ChainStage::kMinP};
  EXPECT_TRUE(c.extended());
  c = SampleChain{};
  c.xtc_probability = 0.5f;
  EXPECT_TRUE(c.extended());
  c.xtc_threshold = 0.6f;  // above 0.5: XTC is off
  EXPECT_FALSE(c.extended());
  c = SampleChain{};
  c.min_keep = 1;
  EXPECT_FALSE(c.extended());
  c.mirostat = 2;
  EXPECT_TRUE(c.extended());
}

TEST(SampleChain, StageNamesRoundTripAndSpellingsAreKnown) {
  for (ChainStage s : SampleChain::default_order()) {
    EXPECT_EQ(chain_stage_from_name(chain_stage_name(s)), s);
  }
  EXPECT_EQ(chain_stage_from_name("typical_p"), ChainStage::kTypicalP);
  EXPECT_EQ(chain_stage_from_name("k"), ChainStage::kTopK);
  EXPECT_EQ(chain_stage_from_name("temp"), ChainStage::kTemperature);
  EXPECT_FALSE(chain_stage_from_name("dry").has_value());  // not a truncation stage
  EXPECT_FALSE(chain_stage_from_name("bogus").has_value());
}

// Mirostat 2: the tokens whose surprise is at most mu, renormalised; then mu moves by eta times
// the surprise of the pick (under that renormalised distribution) less tau.
TEST(SampleChain, Mirostat2TruncatesAtMuAndUpdatesIt) {
  for (uint64_t seed = 20; seed < 24; ++seed) {
    const std::vector<float> logits = random_row(seed, 400, 12.0f);
    Config cfg = base_off();
    cfg.s.temperature = 0.8f;
    cfg.c.mirostat = 2;
    cfg.c.mirostat_tau = 3.0f;
    cfg.c.mirostat_eta = 0.1f;
    const float mu0 = 4.0f + 0.5f * seed;
    std::vector<Cand> cand;
    for (size_t i = 0; i < logits.size(); ++i)
      cand.push_back({static_cast<int32_t>(i), logits[i] / cfg.s.temperature});
    sort_desc(cand);
    const std::vector<double> p = softmax(cand);
    size_t kept = 0;
    while (kept < p.size() && -std::log2(p[kept]) <= mu0) ++kept;
    cand.resize(std::max<size_t>(kept, 1));
    const std::vector<double> q = softmax(cand);
    std::map<int32_t, double> want;
    for (size_t i = 0; i < cand.size(); ++i) want[cand[i].id] = q[i];

    std::map<int32_t, int> got = mirostat_picks(logits, cfg, mu0, [&](int32_t t, float mu) {
      ASSERT_TRUE(want.count(t)) << "token " << t << " has a surprise above mu";
      ASSERT_NEAR(mu, mu0 - 0.1 * (-std::log2(want[t]) - 3.0), 1e-4);
    });
    for (const auto& [token, prob] : want) {
      EXPECT_NEAR(static_cast<double>(got[token]) / kDraws, prob, 1.5 / kDraws + 1e-4);
    }
  }
}

// Mirostat 1: k from Zipf's exponent estimated over the 100 most likely tokens.
TEST(SampleChain, Mirostat1KeepsTheKItsEstimateGives) {
  for (uint64_t seed = 30; seed < 34; ++seed) {
    // Zipf-like, as text is (Mirostat's model), with noise so that the estimate depends on
    // which tokens it looks at; ids shuffled.
    std::vector<float> logits = random_row(seed, 2000, 0.6f);
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[(i * 7919) % logits.size()] += -1.2f * std::log(static_cast<float>(i + 1));
    }
    Config cfg = base_off();
    cfg.c.mirostat = 1;
    const float mu0 = 6.0f + seed % 4;
    std::vector<Cand> cand;
    for (size_t i = 0; i < logits.size(); ++i) cand.push_back({static_cast<int32_t>(i), logits[i]});
    sort_desc(cand);
    const std::vector<double> p = softmax(cand);
    double tb = 0, tt = 0;
    for (size_t i = 0; i + 1 < 100; ++i) {
      const double t = std::log((i + 2.0) / (i + 1.0));
      tb += t * std::log(p[i] / p[i + 1]);
      tt += t * t;
    }
    const double s_hat = tb / tt;
    const double eps = s_hat - 1;
    const double k = std::pow(eps * std::pow(2.0, mu0) / (1 - std::pow(2000.0, -eps)), 1 / s_hat);
    ASSERT_TRUE(std::isfinite(k));
    cand.resize(std::clamp<size_t>(static_cast<size_t>(std::max(k, 1.0)), 1, cand.size()));
    const std::vector<double> q = softmax(cand);

    std::map<int32_t, int> got = mirostat_picks(logits, cfg, mu0);
    EXPECT_EQ(got.size(), cand.size()) << "k = " << k;
    EXPECT_LT(cand.size(), 1000u) << "a k that keeps most of the vocabulary tests little";
    for (size_t i = 0; i < cand.size(); ++i) {
      EXPECT_NEAR(static_cast<double>(got[cand[i].id]) / kDraws, q[i], 1.5 / kDraws + 1e-4);
    }
  }
}

// Through the Sampler: an extended chain is host-only, greedy stays the argmax, XTC fires on
// the sampler's own chance, and bad settings are refused by name.
TEST(SampleChain, SamplerRunsTheExtendedChain) {
  SamplerParams p;
  p.temperature = 0.0f;
  p.chain.typical_p = 0.5f;
  Sampler greedy(p, 50);
  EXPECT_TRUE(greedy.host_only());
  const std::vector<float> logits = random_row(3, 50, 6.0f);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(greedy.sample(logits.data()), argmax);

  SamplerParams base;
  base.seed = 99;
  SamplerParams xtc = base;
  xtc.chain.xtc_probability = 1.0f;
  xtc.chain.xtc_threshold = 0.01f;
  Sampler a(base, 50), b(xtc, 50);
  EXPECT_FALSE(a.host_only());
  EXPECT_TRUE(b.host_only());
  // With XTC always firing and a threshold that every likely token passes, the most likely
  // token is never picked.
  for (int i = 0; i < 200; ++i) EXPECT_NE(b.sample(logits.data()), argmax);
  // Under Mirostat the chain has no penalties and no DRY, whatever their settings.
  SamplerParams miro = base;
  miro.chain.mirostat = 2;
  miro.repeat_penalty = 1.5f;
  miro.dry_multiplier = 0.8f;
  EXPECT_FLOAT_EQ(miro.settings().repeat_penalty, 1.0f);
  EXPECT_FALSE(miro.dry_active());
  EXPECT_TRUE(Sampler(miro, 50).host_only());
  SamplerParams bad = base;
  bad.chain.xtc_probability = 1.5f;
  EXPECT_NE(bad.validate().message().find("xtc_probability"), std::string::npos);
  bad = base;
  bad.chain.mirostat = 3;
  EXPECT_NE(bad.validate().message().find("mirostat"), std::string::npos);
}

// Adaptive-p after top_k and the temperature: the candidates' probabilities p become logits
// 5 - 10 d^2 / (1 + d), d = |p - t| / 0.3, t = clamp(2 target - weighted_sum / total_weight);
// the draw follows their softmax, and the mean takes the pick's p: weighted_sum = p + decay *
// weighted_sum, total_weight = 1 + decay * total_weight.
TEST(SampleChain, AdaptivePDrawsByDistanceFromTheAdaptedTargetAndUpdatesItsMean) {
  for (uint64_t seed = 40; seed < 44; ++seed) {
    const std::vector<float> logits = random_row(seed, 300, 10.0f);
    Config cfg = base_off();
    cfg.s.temperature = 0.9f;
    cfg.s.top_k = 40;
    cfg.c.adaptive_p = true;
    cfg.c.adaptive_target = 0.05f * static_cast<float>(seed - 39);
    cfg.c.adaptive_decay = 0.8f;
    // A running mean of 0.3 and of 0.02: targets below and above the target.
    for (const AdaptivePState start : {AdaptivePState{1.5f, 5.0f}, AdaptivePState{0.1f, 5.0f}}) {
      std::vector<Cand> cand;
      for (size_t i = 0; i < logits.size(); ++i)
        cand.push_back({static_cast<int32_t>(i), logits[i]});
      sort_desc(cand);
      cand.resize(40);
      for (Cand& c : cand) c.logit /= cfg.s.temperature;
      const std::vector<double> p = softmax(cand);
      const double adapted = std::clamp(
          2.0 * cfg.c.adaptive_target - start.weighted_sum / start.total_weight, 0.0, 1.0);
      std::map<int32_t, double> p_of;
      std::vector<Cand> moved = cand;
      for (size_t i = 0; i < cand.size(); ++i) {
        const double d = std::fabs(p[i] - adapted) / 0.3;
        moved[i].logit = 5.0 - 10.0 * d * d / (1.0 + d);
        p_of[cand[i].id] = p[i];
      }
      const std::vector<double> q = softmax(moved);
      std::map<int32_t, double> want;
      for (size_t i = 0; i < moved.size(); ++i) want[moved[i].id] = q[i];

      AdaptivePState state;
      std::map<int32_t, int> got = stateful_picks(
          logits, cfg,
          [&](SampleExtra& e) {
            state = start;
            e.adaptive = &state;
          },
          [&](int32_t t) {
            ASSERT_TRUE(want.count(t)) << "token " << t << " is not one top_k keeps";
            ASSERT_NEAR(state.weighted_sum, p_of[t] + 0.8 * start.weighted_sum, 1e-5);
            ASSERT_NEAR(state.total_weight, 1.0 + 0.8 * start.total_weight, 1e-5);
          });
      for (const auto& [token, prob] : want) {
        EXPECT_NEAR(static_cast<double>(got[token]) / kDraws, prob, 1.5 / kDraws + 1e-4)
            << "seed " << seed << " token " << token;
      }
    }
  }
}

// Through the Sampler: adaptive-p runs where the list names it and the target is not negative,
// on the CPU; its mean starts primed and restarts with reset(); it moves the chosen tokens'
// probabilities toward the target; its settings are refused by name out of range.
TEST(SampleChain, SamplerRunsAdaptivePWhereListed) {
  // One token of probability 0.43, five of 0.07, 194 of 0.002.
  std::vector<float> logits(200, 0.0f);
  logits[7] = 6.0f;
  for (int i = 20; i < 25; ++i) logits[static_cast<size_t>(i)] = 4.2f;
  SamplerParams base;
  base.seed = 5;
  base.temperature = 1.0f;
  base.top_k = 0;
  base.top_p = 1.0f;
  base.min_p = 0.0f;
  const std::vector<std::string> listed = {"top_n_sigma", "top_k", "typ_p",       "top_p",
                                           "min_p",       "xtc",   "temperature", "adaptive_p"};
  SamplerParams off = base;
  ASSERT_TRUE(set_sampler_order(off, listed).is_ok());
  EXPECT_TRUE(off.chain.adaptive_p);
  EXPECT_EQ(sampler_order_names(off).back(), "adaptive_p");
  // Listed with a negative target: the plain draw, on the device path, the same tokens.
  Sampler plain(base, 200), negative(off, 200);
  EXPECT_FALSE(negative.host_only());
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(plain.sample(logits.data()), negative.sample(logits.data()));

  SamplerParams on = off;
  on.chain.adaptive_target = 0.1f;
  on.chain.adaptive_decay = 0.5f;
  EXPECT_TRUE(Sampler(on, 200).host_only());
  SamplerParams unlisted = on;
  ASSERT_TRUE(set_sampler_order(unlisted, std::vector<std::string>{"k", "t"}).is_ok());
  EXPECT_FALSE(unlisted.chain.adaptive_p);
  ASSERT_TRUE(set_sampler_order_letters(unlisted, "skypmxta").is_ok());
  EXPECT_TRUE(unlisted.chain.adaptive_p);

  // Over 2000 draws the plain draw picks token 7 about 43% of the time; adaptive-p aiming at
  // 0.1 prefers the others.
  const auto share_of_7 = [&](Sampler& s) {
    int n = 0;
    for (int i = 0; i < 2000; ++i) n += s.sample(logits.data()) == 7 ? 1 : 0;
    return n / 2000.0;
  };
  Sampler a(on, 200), b(on, 200);
  Sampler p2(base, 200);
  const double plain_share = share_of_7(p2);
  const double adaptive_share = share_of_7(a);
  EXPECT_GT(plain_share, 0.35);
  EXPECT_LT(adaptive_share, 0.1);
  // The same seed gives the same tokens; reset() starts the mean and the stream again.
  std::vector<int32_t> first, second, again;
  for (int i = 0; i < 50; ++i) first.push_back(b.sample(logits.data()));
  b.reset();
  for (int i = 0; i < 50; ++i) second.push_back(b.sample(logits.data()));
  Sampler c(on, 200);
  for (int i = 0; i < 50; ++i) again.push_back(c.sample(logits.data()));
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, again);

  SamplerParams bad = on;
  bad.chain.adaptive_target = 1.5f;
  EXPECT_NE(bad.validate().message().find("adaptive_target"), std::string::npos);
  bad = on;
  bad.chain.adaptive_decay = 0.995f;
  EXPECT_NE(bad.validate().message().find("adaptive_decay"), std::string::npos);
  bad = on;
  bad.chain.adaptive_target = NAN;
  EXPECT_NE(bad.validate().message().find("adaptive_target"), std::string::npos);
}

}  // namespace
}  // namespace strata
