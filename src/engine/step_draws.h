// Backend sampling: the draws that a decode step makes on the last stage's device, at the end of
// its graph (the sample op), instead of reading every output row's n_vocab logits back.
//
// The caller adds one draw per sequence that samples in the step, before Context::decode: the
// draw takes from the sequence's Sampler everything the CPU chain would use (settings, penalty
// entries, logit bias) and the uniform it would draw, so the device picks what
// Sampler::sample would have picked from the same logits (core/sample.h). Rows that cannot be
// sampled on the device are named with read_logits and sampled on the CPU from
// Context::logits. After the decode, each draw's token (and, when asked, its log-probability
// and alternatives) is here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sample.h"
#include "engine/sampler.h"

namespace strata {

class StepDraws {
 public:
  // Most penalty and bias entries one draw carries. The widest row sets the width of every
  // row's list in the step's write (8 bytes per entry per row) and the graph's shape; a
  // sequence with more (a long penalty window of distinct tokens, a long logit bias) is
  // sampled on the CPU instead.
  static constexpr int64_t kMaxEntries = 256;

  void clear();

  // A draw from the logits of output row `output` (the index among the batch's rows that ask
  // for output, in batch order) for the sequence of `sampler`, which draws its uniform now.
  // With `logprobs` the chosen token's log-probability and the sampler's n_probs alternatives
  // come back too. Returns the draw's index, or -1 when the draw needs more than kMaxEntries
  // entries or the sampler is host_only(): nothing was drawn then, and the row is for the CPU
  // (read_logits).
  int32_t add(int32_t output, Sampler& sampler, bool logprobs);
  // The logits of output row `output` come back (Context::logits) for sampling on the CPU.
  void read_logits(int32_t output);

  int32_t size() const { return static_cast<int32_t>(draws_.size()); }
  bool empty() const { return draws_.empty() && logits_rows_.empty(); }

  // After a decode that succeeded: what draw `d` picked, and with `logprobs` its report.
  int32_t token(int32_t d) const;
  float logprob(int32_t d) const;
  void top(int32_t d, std::vector<TokenLogprob>& out) const;

  // For the context that runs the draws.
  struct Draw {
    int32_t output = 0;
    int64_t entry_begin = 0;  // first pair in entries()
    int32_t n_entries = 0;
  };
  const std::vector<Draw>& draws() const { return draws_; }
  const int32_t* words(int32_t d) const { return words_.data() + d * kSampleWords; }
  const int32_t* entries(int32_t d) const { return entries_.data() + 2 * draws_[d].entry_begin; }
  float uniform(int32_t d) const { return uniforms_[static_cast<size_t>(d)]; }
  const std::vector<int32_t>& logits_rows() const { return logits_rows_; }
  // Words of a draw's result: 1 (the token), or sample_out_words(kSampleMaxNProbs) when any
  // draw of the step asks for log-probabilities.
  int64_t out_words() const { return logprobs_ ? sample_out_words(kSampleMaxNProbs) : 1; }
  // Where the context puts draw d's result (out_words() words); sized by prepare_results().
  int32_t* result(int32_t d) { return results_.data() + d * out_words(); }
  void prepare_results() { results_.assign(draws_.size() * static_cast<size_t>(out_words()), -1); }

 private:
  std::vector<Draw> draws_;
  std::vector<int32_t> words_;    // I32 [kSampleWords, draws]
  std::vector<int32_t> entries_;  // (token, value) pairs of every draw, back to back
  std::vector<float> uniforms_;
  std::vector<int32_t> logits_rows_;
  bool logprobs_ = false;
  std::vector<int32_t> results_;  // I32 [out_words(), draws]
  std::vector<SamplePenalty> penalties_;
};

}  // namespace strata
