#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "core/check.h"

namespace strata {

namespace {

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

}  // namespace

Status SamplerParams::validate() const {
  SampleSettings given = settings();  // with the penalties as given, used or not
  given.repeat_penalty = repeat_penalty;
  given.presence_penalty = presence_penalty;
  given.frequency_penalty = frequency_penalty;
  STRATA_RETURN_IF_ERROR(sample_settings_validate(given));
  STRATA_RETURN_IF_ERROR(sample_chain_validate(chain));
  if (!(std::isfinite(dry_multiplier) && dry_multiplier >= 0.0f)) {
    return invalid_argument("sampler: dry_multiplier = " + float_text(dry_multiplier) +
                            ": must be a finite number >= 0 (0 disables)");
  }
  if (!(std::isfinite(dry_base) && dry_base >= 0.0f && dry_base <= 1e6f)) {
    return invalid_argument("sampler: dry_base = " + float_text(dry_base) +
                            ": must be in [0, 1e6] (below 1 disables)");
  }
  if (dry_allowed_length < 0 || dry_allowed_length > kSamplerMaxRepeatLastN) {
    return invalid_argument("sampler: dry_allowed_length = " + std::to_string(dry_allowed_length) +
                            ": must be in [0, " + std::to_string(kSamplerMaxRepeatLastN) + "]");
  }
  if (dry_penalty_last_n < -1 || dry_penalty_last_n > kSamplerMaxRepeatLastN) {
    return invalid_argument("sampler: dry_penalty_last_n = " + std::to_string(dry_penalty_last_n) +
                            ": must be in [-1, " + std::to_string(kSamplerMaxRepeatLastN) +
                            "] (0 disables, -1 means all)");
  }
  if (repeat_last_n < -1 || repeat_last_n > kSamplerMaxRepeatLastN) {
    return invalid_argument("sampler: repeat_last_n = " + std::to_string(repeat_last_n) +
                            ": must be in [-1, " + std::to_string(kSamplerMaxRepeatLastN) +
                            "] (0 disables, -1 means all)");
  }
  if (n_probs < 0 || n_probs > kSamplerMaxNProbs) {
    return invalid_argument("sampler: n_probs = " + std::to_string(n_probs) + ": must be in [0, " +
                            std::to_string(kSamplerMaxNProbs) + "]");
  }
  return Status::ok();
}

SampleSettings SamplerParams::settings() const {
  SampleSettings s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  if (penalties_used()) {
    s.repeat_penalty = repeat_penalty;
    s.presence_penalty = presence_penalty;
    s.frequency_penalty = frequency_penalty;
  } else {
    s.repeat_penalty = 1.0f;
    s.presence_penalty = 0.0f;
    s.frequency_penalty = 0.0f;
  }
  return s;
}

Status set_sampler_order(SamplerParams& p, std::span<const std::string> names) {
  if (names.size() > kChainMaxStages) {
    return invalid_argument("samplers: " + std::to_string(names.size()) + " names, more than " +
                            std::to_string(kChainMaxStages));
  }
  bool penalties = false;
  bool dry = false;
  bool adaptive = false;
  std::vector<ChainStage> order;
  for (const std::string& name : names) {
    if (name == "penalties" || name == "e") {
      penalties = true;
    } else if (name == "dry" || name == "d") {
      dry = true;
    } else if (name == "adaptive_p" || name == "a") {
      adaptive = true;
    } else if (std::optional<ChainStage> stage = chain_stage_from_name(name)) {
      order.push_back(*stage);
    } else {
      return invalid_argument("samplers: '" + name.substr(0, 64) +
                              "' is not a sampler (penalties, dry, top_n_sigma, top_k, typ_p, "
                              "top_p, min_p, xtc, temperature, adaptive_p)");
    }
  }
  p.use_penalties = penalties;
  p.use_dry = dry;
  p.chain.adaptive_p = adaptive;
  p.chain.order = std::move(order);
  return Status::ok();
}

Status set_sampler_order_list(SamplerParams& p, std::string_view list) {
  std::vector<std::string> names;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(';', start), list.size());
    if (end > start) names.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return set_sampler_order(p, names);
}

Status set_sampler_order_letters(SamplerParams& p, std::string_view letters) {
  std::vector<std::string> names;
  for (char c : letters) names.emplace_back(1, c);
  return set_sampler_order(p, names);
}

std::vector<std::string> sampler_order_names(const SamplerParams& p) {
  std::vector<std::string> out;
  if (p.use_penalties) out.emplace_back("penalties");
  if (p.use_dry) out.emplace_back("dry");
  for (ChainStage s : p.chain.order) out.emplace_back(chain_stage_name(s));
  if (p.chain.adaptive_p) out.emplace_back("adaptive_p");
  return out;
}

Result<Sampler> Sampler::create(const SamplerParams& params, int32_t n_vocab) {
  STRATA_RETURN_IF_ERROR(params.validate());
  if (n_vocab <= 0) {
    return invalid_argument("sampler: n_vocab = " + std::to_string(n_vocab) + ": must be > 0");
  }
  return Sampler(params, n_vocab);
}

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab)
    : params_(params), settings_(params.settings()), n_vocab_(n_vocab), rng_(params.seed) {
  STRATA_CHECK(params.validate().is_ok(), "sampler parameters must be validated first");
  STRATA_CHECK(n_vocab > 0);
  host_only_ = params_.chain.extended() || params_.dry_active();
  mirostat_mu_ = 2.0f * params_.chain.mirostat_tau;
  adaptive_ = AdaptivePState::primed(params_.chain);
}

void Sampler::set_logit_bias(std::vector<SampleBias> bias) {
  for (const SampleBias& b : bias) {
    STRATA_CHECK(b.token >= 0 && b.token < n_vocab_, "logit bias tokens must be checked first");
  }
  bias_ = std::move(bias);
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_) return;
  if (params_.dry_active()) {
    dry_window_.push_back(token);
    const size_t limit = params_.dry_penalty_last_n > 0
                             ? static_cast<size_t>(params_.dry_penalty_last_n)
                             : static_cast<size_t>(kSamplerMaxRepeatLastN);
    if (dry_window_.size() > limit) dry_window_.pop_front();
  }
  if (params_.repeat_last_n == 0) return;
  window_.push_back(token);
  ++counts_[token];
  const size_t limit = params_.repeat_last_n > 0 ? static_cast<size_t>(params_.repeat_last_n)
                                                 : static_cast<size_t>(kSamplerMaxRepeatLastN);
  if (window_.size() > limit) {
    const int32_t old = window_.front();
    window_.pop_front();
    auto it = counts_.find(old);
    if (--it->second == 0) counts_.erase(it);
  }
}

void Sampler::penalties(std::vector<SamplePenalty>& out) const {
  out.clear();
  if (!settings_.penalties_active()) return;
  for (const auto& [token, count] : counts_) out.push_back(SamplePenalty{token, count});
}

void Sampler::reset() {
  window_.clear();
  counts_.clear();
  dry_window_.clear();
  mirostat_mu_ = 2.0f * params_.chain.mirostat_tau;
  adaptive_ = AdaptivePState::primed(params_.chain);
  rng_ = SamplerRng(params_.seed);
  last_token_ = -1;
  last_top_.clear();
}

float Sampler::next_uniform() { return settings_.temperature > 0.0f ? rng_.uniform() : 0.0f; }

int32_t Sampler::sample(const float* logits) { return sample_with_uniform(logits, next_uniform()); }

int32_t Sampler::sample_allowed(const float* logits, const uint8_t* allowed) {
  return sample_masked(logits, next_uniform(), allowed);
}

int32_t Sampler::sample_with_uniform(const float* logits, float uniform) {
  return sample_masked(logits, uniform, nullptr);
}

int32_t Sampler::sample_masked(const float* logits, float uniform, const uint8_t* allowed) {
  STRATA_CHECK(uniform >= 0.0f && uniform < 1.0f, "uniform must be in [0, 1)");
  penalties(penalties_);
  if (!host_only_) {
    last_token_ = row_.sample(logits, n_vocab_, settings_, bias_, penalties_, uniform, allowed);
    row_.top(params_.n_probs, last_top_);
    return last_token_;
  }
  SampleExtra extra;
  extra.chain = &params_.chain;
  dry_.clear();
  if (params_.dry_active()) {
    static const DryBreakers kNoBreakers;
    dry_tokens_.assign(dry_window_.begin(), dry_window_.end());
    const DryParams dp{params_.dry_multiplier, params_.dry_base, params_.dry_allowed_length};
    dry_penalties(dry_tokens_, dp, params_.dry_breakers ? *params_.dry_breakers : kNoBreakers,
                  dry_);
  }
  extra.dry = dry_;
  // XTC's chance: a second number from the stream, drawn only where XTC is on and the draw is
  // not greedy.
  if (params_.chain.xtc_active() && settings_.temperature > 0.0f)
    extra.xtc_uniform = rng_.uniform();
  extra.mirostat_mu = &mirostat_mu_;
  extra.adaptive = &adaptive_;
  const int32_t token =
      row_.sample(logits, n_vocab_, settings_, bias_, penalties_, uniform, allowed, &extra);
  last_token_ = token;
  row_.top(params_.n_probs, last_top_);
  return token;
}

float Sampler::last_logprob() const {
  if (last_token_ < 0) return 0.0f;
  return row_.logprob(last_token_);
}

}  // namespace strata
