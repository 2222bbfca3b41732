// Token sampling on the CPU: penalties, truncation (top-k, top-p, min-p), temperature and a
// seeded draw, plus the log-probabilities that OpenAI-style `logprobs` report.
//
// Goals: the same seed and the same logits give the same tokens on every platform and build
// (own RNG, a strict total order for every sort, no std:: distributions); no full sort of a
// 150k vocabulary per token. Non-goals: grammars, DRY, XTC, typical-p, mirostat.
//
// The chain, in llama.cpp's default order:
//   penalties -> top_k -> top_p -> min_p -> temperature -> dist
// top_k, top_p and min_p see the penalised logits at temperature 1 (temperature is applied
// after them, as in llama.cpp). top_p renormalises over what top_k kept.
//
// Reported log-probabilities (of the chosen token and of the n_probs alternatives) come from
// the softmax of the *penalised* logits over the whole vocabulary at temperature 1, before any
// truncation: the model's distribution as the penalties left it, not the sampling distribution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace strata {

// Reported alternatives are capped like OpenAI's top_logprobs (0..20): each generated token
// costs O(n_probs) to report, and a request must not make that grow without bound.
inline constexpr int32_t kSamplerMaxNProbs = 20;
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

  // Names the field, its value and the allowed range of the first bad field.
  Status validate() const;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// The sampler's random numbers (core/rng.h): the same seed gives the same draws everywhere.
using SamplerRng = Rng;

// exp(x) for x <= 0 (x must not be positive; NaN and -inf give 0) by a fixed sequence of float
// operations, so it gives the same bits everywhere, unlike libm; relative error about 1e-7. Exposed
// for tests.
float exp_nonpositive(float x);

// One sequence's sampler. Owned by one thread (the decode loop of its slot).
class Sampler {
 public:
  // Validates params; n_vocab must be positive.
  static Result<Sampler> create(const SamplerParams& params, int32_t n_vocab);
  // Precondition (checked): params.validate() is ok and n_vocab > 0.
  Sampler(const SamplerParams& params, int32_t n_vocab);

  // Samples from one row of n_vocab logits. Greedy (temperature 0) takes the first index of
  // the largest penalised logit and draws no random number; otherwise exactly one uniform is
  // drawn per call, so the RNG stream does not depend on the truncation settings.
  // Does not accept the token: call accept() with what is kept, as llama.cpp does.
  int32_t sample(const float* logits);
  // The same chain with the caller's uniform in [0, 1) instead of one from the internal RNG
  // (for sampling that must match a device that was handed the same uniform).
  int32_t sample_with_uniform(const float* logits, float uniform);

  // Adds a token to the penalty history: prompt tokens too, then each generated token.
  // Tokens outside [0, n_vocab) cannot be penalised and are not recorded.
  void accept(int32_t token);
  // Forgets the history and restarts the RNG from the seed.
  void reset();

  // Of the last sample(): the chosen token's log-probability and the top n_probs tokens by
  // probability (highest first, ties by lower id), both under the distribution described above.
  // (The log-probability costs an exp per vocab entry the first time it is asked for.)
  float last_logprob() const;
  const std::vector<TokenLogprob>& last_top() const { return last_top_; }

  const SamplerParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  int32_t sample_impl(const float* logits, float uniform);
  void penalise(const float* logits);
  void compute_top_alternatives();
  // Leaves in candidates_ the tokens that survive top_k, top_p and min_p.
  void truncate();
  // Leaves in candidates_ the best k tokens, sorted.
  void select_top_k(size_t k);
  int32_t draw(float uniform);
  // log of the softmax normaliser of the penalised logits.
  float log_z() const;

  SamplerParams params_;
  int32_t n_vocab_;
  SamplerRng rng_;

  // Penalty window: tokens in order and how often each occurs in it.
  std::deque<int32_t> window_;
  std::unordered_map<int32_t, int32_t> counts_;

  // Per-call scratch, kept to avoid reallocating n_vocab-sized buffers per token.
  std::vector<float> penalised_;  // F32 [n_vocab]
  std::vector<Candidate> candidates_;
  std::vector<float> weights_;  // of candidates_, at the temperature
  float max_logit_ = 0.0f;
  int32_t argmax_ = 0;
  // Computed on demand by log_z(): exp(penalised - max_logit_) by id, and its sum.
  mutable std::vector<float> exp_;  // F32 [n_vocab]
  mutable double sum_exp_ = 0.0;
  mutable bool have_sum_exp_ = false;

  int32_t last_token_ = -1;
  std::vector<TokenLogprob> last_top_;
};

}  // namespace strata
