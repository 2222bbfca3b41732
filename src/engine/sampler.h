// One sequence's sampler on the CPU: its settings, its seeded random numbers and its penalty
// window, around the chain of core/sample.h (which the graph's sample op runs too).
//
// Goals: the same seed and the same logits give the same tokens on every platform and build
// (own RNG, the chain's fixed arithmetic); a device that samples a row with the uniform this
// sampler would have drawn and the entries it would have applied picks the same token (see
// next_uniform, penalties). The rest of llama.cpp's chain (DRY, XTC, typical, top-n-sigma,
// Mirostat, another order) runs here only: a sampler using it is host_only(). A grammar is the
// caller's: it passes the mask of the tokens the grammar allows (sample_allowed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "core/sample.h"
#include "core/status.h"
#include "engine/dry.h"

namespace strata {

inline constexpr int32_t kSamplerMaxNProbs = kSampleMaxNProbs;
// A window longer than any context we serve; bounds the history a request can make us keep.
inline constexpr int32_t kSamplerMaxRepeatLastN = 1 << 20;

struct SamplerParams {
  // <= 0 would be greedy in llama.cpp; here 0 is greedy and a negative value is rejected, as
  // OpenAI and vLLM do, so a typo'd sign is an error rather than a silent change of mode.
  float temperature = 0.8f;
  int32_t top_k = 40;   // 0 or -1 (vLLM's spelling): disabled. Values above n_vocab keep all.
  float top_p = 0.95f;  // 1: disabled
  float min_p = 0.05f;  // 0: disabled
  float repeat_penalty = 1.0f;     // 1: disabled
  int32_t repeat_last_n = 64;      // window of accepted tokens; 0: no penalties; -1: all of them
  float presence_penalty = 0.0f;   // subtracted once from every token in the window
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
  uint64_t seed = 0;               // fixed default: choosing a random seed is the caller's decision
  int32_t n_probs = 0;             // how many top alternatives to report per token
  // DRY (engine/dry.h), applied after the penalties. On when dry_multiplier > 0, dry_base >= 1
  // and dry_penalty_last_n != 0; the breakers are dry_breakers() of the strings (null: no
  // breakers; the server makes them from the strings).
  float dry_multiplier = 0.0f;
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_penalty_last_n = -1;  // tokens of context DRY looks back over; -1: all of them
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  std::shared_ptr<const DryBreakers> dry_breakers;
  // The other samplers and the order of the stages (core/sample.h).
  SampleChain chain;
  // Whether the sampler list (set_sampler_order) names the penalties and DRY: unnamed, they
  // are off whatever their parameters say, as in llama.cpp's chain.
  bool use_penalties = true;
  bool use_dry = true;

  // Under Mirostat llama.cpp's chain is the temperature and Mirostat: no penalties, no DRY.
  bool penalties_used() const { return use_penalties && chain.mirostat == 0; }
  bool dry_active() const {
    return use_dry && chain.mirostat == 0 && dry_multiplier > 0.0f && dry_base >= 1.0f &&
           dry_penalty_last_n != 0;
  }

  // Names the field, its value and the allowed range of the first bad field.
  Status validate() const;
  // The chain's part of these parameters.
  SampleSettings settings() const;
};

// llama.cpp's sampler list (llama-server's `samplers`, `--samplers`): the truncation stages and
// the temperature in the order named (core/sample.h chain_stage_from_name), plus "penalties"
// and "dry", which run first wherever they are listed and are off when they are not, and
// "adaptive_p", which draws in place of the plain draw wherever it is listed.
// An unknown name is an error naming it. The letters form ("edkypmxt", `--sampler-seq`) uses
// llama.cpp's one-letter codes, 'e' penalties and 'd' DRY.
Status set_sampler_order(SamplerParams& p, std::span<const std::string> names);
// The names separated by ';' (`--samplers`), empty names skipped.
Status set_sampler_order_list(SamplerParams& p, std::string_view list);
Status set_sampler_order_letters(SamplerParams& p, std::string_view letters);
// The list that describes p: "penalties" and "dry" where used, then the stages by name, then
// "adaptive_p" where listed.
std::vector<std::string> sampler_order_names(const SamplerParams& p);

// The sampler's random numbers (core/rng.h): the same seed gives the same draws everywhere.
using SamplerRng = Rng;

// One sequence's sampler. Owned by one thread (the decode loop of its slot).
class Sampler {
 public:
  // Validates params; n_vocab must be positive.
  static Result<Sampler> create(const SamplerParams& params, int32_t n_vocab);
  // Precondition (checked): params.validate() is ok and n_vocab > 0.
  Sampler(const SamplerParams& params, int32_t n_vocab);

  // Samples from one row of n_vocab logits: sample_with_uniform(logits, next_uniform()).
  // Does not accept the token: call accept() with what is kept, as llama.cpp does.
  int32_t sample(const float* logits);
  // The chain (core/sample.h) with the caller's uniform in [0, 1), the logit bias and the
  // penalties().
  int32_t sample_with_uniform(const float* logits, float uniform);
  // sample() over the tokens whose byte in `allowed` (n_vocab bytes, a grammar's mask) is not
  // 0; at least one must be.
  int32_t sample_allowed(const float* logits, const uint8_t* allowed);
  // The uniform that sample() uses, from the sampler's generator: greedy (temperature 0) draws
  // nothing and gives 0, so switching a request to greedy never shifts another's stream;
  // otherwise exactly one number is drawn per call, so the stream does not depend on the
  // truncation settings. A device sampling for this sequence gets this number.
  float next_uniform();

  // Added to the logits before every sample (tokens must be in [0, n_vocab)).
  void set_logit_bias(std::vector<SampleBias> bias);
  const std::vector<SampleBias>& logit_bias() const { return bias_; }
  // The penalty entries the next sample applies: each distinct token of the window with its
  // count; empty when no penalty is active.
  void penalties(std::vector<SamplePenalty>& out) const;

  // Adds a token to the penalty history: prompt tokens too, then each generated token.
  // Tokens outside [0, n_vocab) cannot be penalised and are not recorded.
  void accept(int32_t token);
  // Forgets the history and restarts the RNG from the seed.
  void reset();

  // Of the last sample(): the chosen token's log-probability and the top n_probs tokens by
  // probability (highest first, ties by lower id), as core/sample.h describes them.
  // (The log-probability costs an exp per vocab entry the first time it is asked for.)
  float last_logprob() const;
  const std::vector<TokenLogprob>& last_top() const { return last_top_; }

  const SamplerParams& params() const { return params_; }
  const SampleSettings& settings() const { return settings_; }
  int32_t n_vocab() const { return n_vocab_; }
  // Whether this sampler needs the CPU: DRY, or a chain the sample op does not run. A device
  // must not sample for it (StepDraws::add refuses).
  bool host_only() const { return host_only_; }

 private:
  int32_t sample_masked(const float* logits, float uniform, const uint8_t* allowed);

  SamplerParams params_;
  SampleSettings settings_;
  int32_t n_vocab_;
  SamplerRng rng_;
  std::vector<SampleBias> bias_;

  // Penalty window: tokens in order and how often each occurs in it.
  std::deque<int32_t> window_;
  std::unordered_map<int32_t, int32_t> counts_;

  bool host_only_ = false;
  std::deque<int32_t> dry_window_;   // the last dry_penalty_last_n accepted tokens
  std::vector<int32_t> dry_tokens_;  // scratch: dry_window_ as one span
  std::vector<SampleBias> dry_;      // scratch: this sample's DRY penalties
  float mirostat_mu_ = 0.0f;
  AdaptivePState adaptive_;

  RowSampler row_;
  std::vector<SamplePenalty> penalties_;  // scratch of sample_with_uniform
  int32_t last_token_ = -1;
  std::vector<TokenLogprob> last_top_;
};

}  // namespace strata
