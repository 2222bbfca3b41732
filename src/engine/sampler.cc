#include "engine/sampler.h"

#include <string>

#include "core/check.h"

namespace strata {

Status SamplerParams::validate() const {
  STRATA_RETURN_IF_ERROR(sample_settings_validate(settings()));
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
  s.repeat_penalty = repeat_penalty;
  s.presence_penalty = presence_penalty;
  s.frequency_penalty = frequency_penalty;
  return s;
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
}

void Sampler::set_logit_bias(std::vector<SampleBias> bias) {
  for (const SampleBias& b : bias) {
    STRATA_CHECK(b.token >= 0 && b.token < n_vocab_, "logit bias tokens must be checked first");
  }
  bias_ = std::move(bias);
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_ || params_.repeat_last_n == 0) return;
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
  const int32_t token =
      row_.sample(logits, n_vocab_, settings_, bias_, penalties_, uniform, allowed);
  last_token_ = token;
  row_.top(params_.n_probs, last_top_);
  return token;
}

float Sampler::last_logprob() const {
  if (last_token_ < 0) return 0.0f;
  return row_.logprob(last_token_);
}

}  // namespace strata
