#include "engine/step_draws.h"

#include <bit>

#include "core/check.h"

namespace strata {

void StepDraws::clear() {
  draws_.clear();
  words_.clear();
  entries_.clear();
  uniforms_.clear();
  logits_rows_.clear();
  logprobs_ = false;
  results_.clear();
}

int32_t StepDraws::add(int32_t output, Sampler& sampler, bool logprobs) {
  if (sampler.host_only()) return -1;  // the sample op runs the base chain only
  sampler.penalties(penalties_);
  const std::vector<SampleBias>& bias = sampler.logit_bias();
  const int64_t n_entries = static_cast<int64_t>(penalties_.size() + bias.size());
  if (n_entries > kMaxEntries) return -1;
  Draw d;
  d.output = output;
  d.entry_begin = static_cast<int64_t>(entries_.size() / 2);
  d.n_entries = static_cast<int32_t>(n_entries);
  draws_.push_back(d);
  words_.resize(words_.size() + kSampleWords);
  entries_.resize(entries_.size() + 2 * static_cast<size_t>(n_entries));
  sample_row_pack(sampler.settings(), penalties_, bias, logprobs ? sampler.params().n_probs : -1,
                  words_.data() + words_.size() - kSampleWords,
                  entries_.data() + 2 * d.entry_begin);
  uniforms_.push_back(sampler.next_uniform());
  logprobs_ = logprobs_ || logprobs;
  return static_cast<int32_t>(draws_.size() - 1);
}

void StepDraws::read_logits(int32_t output) { logits_rows_.push_back(output); }

int32_t StepDraws::token(int32_t d) const {
  STRATA_CHECK(!results_.empty(), "no decode ran the draws");
  return results_[static_cast<size_t>(d * out_words())];
}

float StepDraws::logprob(int32_t d) const {
  STRATA_CHECK(logprobs_ && !results_.empty(), "no log-probabilities were asked for");
  return std::bit_cast<float>(results_[static_cast<size_t>(d * out_words() + 1)]);
}

void StepDraws::top(int32_t d, std::vector<TokenLogprob>& out) const {
  STRATA_CHECK(logprobs_ && !results_.empty(), "no log-probabilities were asked for");
  out.clear();
  const int32_t* r = results_.data() + d * out_words();
  for (int64_t i = 0; i < kSampleMaxNProbs && r[2 + 2 * i] >= 0; ++i) {
    out.push_back(TokenLogprob{r[2 + 2 * i], std::bit_cast<float>(r[3 + 2 * i])});
  }
}

}  // namespace strata
