// The sampling chain over one row of logits: logit bias, penalties, truncation (top-k, top-p,
// min-p), temperature and the draw by a uniform the caller gives, plus the log-probabilities
// that OpenAI-style `logprobs` report. The CPU sampler (engine/sampler.h) and the graph's
// sample op (graph.h, Op::kSample) both call RowSampler::sample, so that a row sampled on a
// device picks what the CPU would pick for the same uniform: the same float operations in the
// same order, not a second implementation that could drift.
//
// Goals: the same logits and uniform give the same token on every platform and build (a strict
// total order for every sort, an exp of our own, no std:: distributions, no FMA contraction);
// no full sort of a 150k vocabulary per token where the base chain runs. Non-goals: grammars,
// DRY's repeat search (engine/dry.h computes its penalties), drawing random numbers (the
// caller owns the generator).
//
// The chain, in llama.cpp's default order:
//   logit bias -> penalties -> top_k -> top_p -> min_p -> temperature -> dist
// top_k, top_p and min_p see the penalised logits at temperature 1 (temperature is applied
// after them, as in llama.cpp). top_p renormalises over what top_k kept.
//
// Reported log-probabilities (of the chosen token and of the n best alternatives) come from
// the softmax of the *penalised* logits over the whole vocabulary at temperature 1, before any
// truncation: the model's distribution as the penalties left it, not the sampling distribution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace strata {

// Reported alternatives are capped like OpenAI's top_logprobs (0..20): each generated token
// costs O(n) to report, and a request must not make that grow without bound.
inline constexpr int32_t kSampleMaxNProbs = 20;

// What the chain does with a row. Validated by sample_settings_validate.
struct SampleSettings {
  // 0 is greedy: the first index of the largest penalised logit, no truncation, no draw.
  float temperature = 0.8f;
  int32_t top_k = 40;              // 0 or -1: disabled. Values above n_vocab keep all.
  float top_p = 0.95f;             // 1: disabled
  float min_p = 0.05f;             // 0: disabled
  float repeat_penalty = 1.0f;     // 1: disabled
  float presence_penalty = 0.0f;   // subtracted once from every penalised token
  float frequency_penalty = 0.0f;  // subtracted once per occurrence

  // Whether penalty entries change anything (otherwise they are not applied at all).
  bool penalties_active() const {
    return repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

// Names the field, its value and the allowed range of the first bad field ("sampler: top_p =
// 1.5: must be in [0, 1] (1 disables)").
Status sample_settings_validate(const SampleSettings& s);

// A distinct token of the penalty window and how often it occurs there.
struct SamplePenalty {
  int32_t token = 0;
  int32_t count = 0;
};

// Added to a token's logit before anything else; -infinity bans the token. Entries apply in
// order (a token listed twice gets both).
struct SampleBias {
  int32_t token = 0;
  float bias = 0.0f;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// --- The rest of llama.cpp's chain --------------------------------------------------------------
//
// llama-server's other samplers, run on the CPU only (the sample op's rows carry the base chain
// above): top-n-sigma, locally typical, XTC, Mirostat 1 and 2, dynamic temperature, min_keep,
// and the order of the truncation samplers and the temperature (llama-server's `samplers`).
// With an extended chain the candidates pass through the stages in `order`, each as llama.cpp's
// sampler of that name does it, then the draw; Mirostat replaces the stages (temperature, then
// Mirostat), as in llama.cpp. Greedy (temperature 0) is still the first largest penalised logit.
enum class ChainStage : uint8_t { kTopNSigma, kTopK, kTypicalP, kTopP, kMinP, kXtc, kTemperature };
inline constexpr size_t kChainMaxStages = 64;

struct SampleChain {
  float top_n_sigma = -1.0f;     // <= 0: disabled
  float typical_p = 1.0f;        // 1: disabled
  float xtc_probability = 0.0f;  // 0: disabled
  float xtc_threshold = 0.1f;    // above 0.5: disabled
  int32_t min_keep = 0;          // the fewest tokens a truncation leaves (0: 1)
  int32_t mirostat = 0;          // 0 off, 1 Mirostat, 2 Mirostat 2.0
  float mirostat_tau = 5.0f;     // target surprise (bits)
  float mirostat_eta = 0.1f;     // learning rate
  // Dynamic temperature (llama.cpp's temp_ext): the temperature stage uses
  // temperature +- range, by the candidates' normalised entropy to this power. 0: off.
  float dynatemp_range = 0.0f;
  float dynatemp_exponent = 1.0f;
  // llama.cpp's adaptive-p, which draws in place of the plain draw when the sampler list names
  // it (`adaptive_p`, wherever) and the target is not negative: the candidates' probabilities
  // p become logits 5 - 10 d^2 / (1 + d), d = |p - t| / 0.3, around a target t that moves
  // against the running mean of the chosen tokens' probabilities (t = 2 target - mean, in [0,
  // 1]; the mean decays by adaptive_decay a token). Under Mirostat it does not run.
  bool adaptive_p = false;
  float adaptive_target = -1.0f;  // in [0, 1]; negative: the plain draw
  float adaptive_decay = 0.9f;    // in [0, 0.99]
  std::vector<ChainStage> order = default_order();

  static std::vector<ChainStage> default_order() {
    return {ChainStage::kTopNSigma, ChainStage::kTopK, ChainStage::kTypicalP,   ChainStage::kTopP,
            ChainStage::kMinP,      ChainStage::kXtc,  ChainStage::kTemperature};
  }
  bool xtc_active() const { return xtc_probability > 0.0f && xtc_threshold <= 0.5f; }
  bool adaptive_active() const { return adaptive_p && adaptive_target >= 0.0f && mirostat == 0; }
  // Whether the base chain would sample differently: any of these samplers on, or another
  // order of the stages the base chain has.
  bool extended() const;
};

// As sample_settings_validate, for the chain's fields.
Status sample_chain_validate(const SampleChain& c);
// llama.cpp's name of a stage ("top_k", "typ_p", ...), and the stage of a name, also
// llama.cpp's other spellings ("top-k", "typical_p", "nucleus", ...) and one-letter codes
// ("k", "y", ...); nullopt for a name that is none.
const char* chain_stage_name(ChainStage s);
std::optional<ChainStage> chain_stage_from_name(std::string_view name);

// Adaptive-p's running mean of the chosen tokens' probabilities (before its transform): a sum
// and a total weight, each decayed by adaptive_decay per token. It starts as if the target had
// been met forever (llama.cpp's priming): target / (1 - decay) and 1 / (1 - decay).
struct AdaptivePState {
  float weighted_sum = 0.0f;
  float total_weight = 0.0f;

  static AdaptivePState primed(const SampleChain& c);
};

// What an extended chain needs beyond the base chain's inputs.
struct SampleExtra {
  const SampleChain* chain = nullptr;
  // DRY's penalties (engine/dry.h): subtracted after the repetition penalties.
  std::span<const SampleBias> dry;
  // XTC acts on this row when this uniform is below xtc_probability.
  float xtc_uniform = 1.0f;
  // Mirostat's running target (mu), read and updated; required when chain->mirostat != 0.
  float* mirostat_mu = nullptr;
  // Adaptive-p's running mean, read and updated; required when chain->adaptive_active().
  AdaptivePState* adaptive = nullptr;
};

// exp(x) for x <= 0 (x must not be positive; NaN and -inf give 0) by a fixed sequence of float
// operations, so it gives the same bits everywhere, unlike libm; relative error about 1e-7.
float exp_nonpositive(float x);

// Samples rows one at a time, keeping its n_vocab-sized scratch between calls. Owned by one
// thread. Each call depends only on its arguments: the scratch carries nothing from a row to
// the next.
class RowSampler {
 public:
  // Runs the chain over `logits` (n_vocab values) and returns the chosen token. Greedy
  // (temperature 0) ignores the truncation settings and the uniform. Preconditions (checked by
  // the callers, not here): n_vocab > 0, settings valid, every token of bias and penalties in
  // [0, n_vocab), penalty tokens distinct, uniform in [0, 1).
  // `allowed`, when given (n_vocab bytes), bans every token whose byte is 0 after the bias and
  // penalties, as a logit of -inf (a grammar's mask); at least one must be allowed.
  // `extra`, when given, runs the extended chain (SampleChain) in place of the truncation.
  int32_t sample(const float* logits, int32_t n_vocab, const SampleSettings& settings,
                 std::span<const SampleBias> bias, std::span<const SamplePenalty> penalties,
                 float uniform, const uint8_t* allowed = nullptr,
                 const SampleExtra* extra = nullptr);

  // Of the last sampled row, under the distribution described at the top of this file: a
  // token's log-probability (costs an exp per vocab entry the first time it is asked for), and
  // the n most likely tokens (highest first, ties by lower id) into `out`.
  float logprob(int32_t token) const;
  void top(int32_t n, std::vector<TokenLogprob>& out) const;

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  void penalise(const float* logits, std::span<const SampleBias> bias,
                std::span<const SamplePenalty> penalties, std::span<const SampleBias> dry,
                const uint8_t* allowed);
  // Leaves in candidates_ the tokens that survive top_k, top_p and min_p.
  void truncate();
  // Leaves in candidates_ the best k tokens, sorted.
  void select_top_k(size_t k);
  int32_t draw(float uniform);

  // The extended chain (SampleExtra): the stages over candidates_, then a draw from what is
  // left at the logits the stages left.
  int32_t sample_extended(const SampleExtra& extra, float uniform);
  int32_t mirostat(const SampleChain& c, float uniform, float& mu);
  int32_t adaptive_p(const SampleChain& c, float uniform, AdaptivePState& state);
  void all_candidates();
  void sort_candidates();
  float candidates_max() const;
  // weights_[i] = the softmax of candidates_ (sorted or not) at their logits.
  void softmax_candidates();
  void keep(size_t n);
  void stage_top_n_sigma(float n);
  void stage_top_k(int32_t k);
  void stage_typical(float p);
  void stage_top_p(float p);
  void stage_min_p(float p);
  void stage_xtc(const SampleChain& c, float chance);
  void stage_temperature(const SampleChain& c);
  int32_t draw_candidates(float uniform);
  // log of the softmax normaliser of the penalised logits.
  float log_z() const;

  SampleSettings settings_;
  size_t min_keep_ = 1;           // of the extended chain
  bool sorted_ = false;           // candidates_ in precedes() order (extended chain)
  bool whole_ = false;            // the candidates are every finite token, not listed yet
  std::vector<float> penalised_;  // F32 [n_vocab]
  std::vector<Candidate> candidates_;
  std::vector<float> weights_;         // of candidates_, at the temperature
  std::vector<float> adaptive_probs_;  // adaptive_p's scratch: the candidates' probabilities
  float max_logit_ = 0.0f;
  int32_t argmax_ = 0;
  // Computed on demand by log_z(): exp(penalised - max_logit_) by id, and its sum.
  mutable std::vector<float> exp_;  // F32 [n_vocab]
  mutable double sum_exp_ = 0.0;
  mutable bool have_sum_exp_ = false;
};

// --- The sample op's rows as graph tensors -----------------------------------------------------
//
// A row's settings are kSampleWords I32 words, floats stored as their bits:
//   0 f32 temperature   1 i32 top_k   2 f32 top_p   3 f32 min_p   4 f32 repeat_penalty
//   5 f32 presence_penalty   6 f32 frequency_penalty
//   7 i32 n_penalties   8 i32 n_biases: how many entries of the row's list are of each kind
//   9 i32 n_probs: -1 reports nothing; 0..kSampleMaxNProbs reports the chosen token's
//     log-probability and that many alternatives (when the output has room for them)
// A row's list is I32 [2, width]: n_penalties (token, count) pairs, then n_biases (token, bias
// bits) pairs, then unused pairs.
// A row's output is I32 [1] (the token) or I32 [2 + 2 k]: the token, its log-probability's
// bits, then k (token, log-probability bits) pairs, the row's n_probs best first and (-1, 0)
// past them.
inline constexpr int64_t kSampleWords = 10;
inline constexpr int64_t sample_out_words(int64_t k) { return 2 + 2 * k; }

// One row's record from its parts (the entries go to `entries`, at least n_penalties +
// n_biases pairs long).
void sample_row_pack(const SampleSettings& settings, std::span<const SamplePenalty> penalties,
                     std::span<const SampleBias> bias, int32_t n_probs, int32_t* words,
                     int32_t* entries);

struct SampleRowsArgs {
  const float* logits = nullptr;  // F32 [n_vocab, rows], rows logits_stride floats apart
  size_t logits_stride = 0;
  int32_t n_vocab = 0;
  int64_t rows = 0;
  const int32_t* settings = nullptr;  // I32 [kSampleWords, rows]
  const int32_t* entries = nullptr;   // I32 [2, width, rows]
  int64_t width = 0;
  const float* uniforms = nullptr;  // F32 [rows]
  int32_t* out = nullptr;           // I32 [out_words, rows]
  int64_t out_words = 1;            // 1, or sample_out_words(k) with k <= kSampleMaxNProbs
};

// The sample op: every row's record is checked first (the message names the row, the field,
// its value and the limit: the records may come from a peer), then the rows are sampled in
// parallel, each by RowSampler::sample.
Status sample_rows(ThreadPool& pool, const SampleRowsArgs& args);

}  // namespace strata
