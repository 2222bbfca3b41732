// DRY ("don't repeat yourself"), llama.cpp's repetition sampler: a token that would continue a
// sequence the recent context already holds is penalised by multiplier * base^(n - allowed),
// n the length of the repeat it would extend, when n >= allowed; sequence breakers (text such
// as "\n" or ":") end the stretch of context a repeat may reach back over.
//
// Goals: llama.cpp's semantics (its breakers as token sequences, its exponent clamp) in time
// linear in the window (a Z-function), so a window of the whole context stays cheap. Non-goals:
// the logits themselves (RowSampler subtracts what this computes, after the penalties).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/sample.h"
#include "core/status.h"

namespace strata {

class Tokenizer;

// Bounds on a request's breakers: llama.cpp's length limits (a longer breaker is cut to its
// first kDryMaxBreakerBytes bytes, a tail to kDryMaxTailTokens tokens) and a count of our own,
// since each breaker costs a pass over the vocabulary.
inline constexpr size_t kDryMaxBreakers = 128;
inline constexpr size_t kDryMaxBreakerBytes = 40;
inline constexpr size_t kDryMaxTailTokens = 20;

// The breakers as tokens: for each head token, the tails that must follow it for the breaker
// to be complete. An empty tail: the head alone is a breaker (its text contains one).
struct DryBreakers {
  std::unordered_multimap<int32_t, std::vector<int32_t>> by_head;
};

// As llama.cpp builds them: every token whose text contains a breaker is a breaker by itself;
// a token whose text ends with the start of a breaker heads the tokens of the breaker's rest.
// Refuses more than kDryMaxBreakers breakers, naming the field.
Result<std::shared_ptr<const DryBreakers>> dry_breakers(std::span<const std::string> breakers,
                                                        const Tokenizer& tok);

struct DryParams {
  float multiplier = 0.0f;     // 0: off
  float base = 1.75f;          // below 1: off
  int32_t allowed_length = 2;  // repeats up to this long are free
};

// The penalties for the next token, given the window of context before it (oldest first; the
// caller keeps the last penalty_last_n tokens): one entry per token that would extend a repeat
// of at least allowed_length tokens, with the amount to subtract from its logit. `out` is
// cleared first; entries are in token order.
void dry_penalties(std::span<const int32_t> window, const DryParams& p, const DryBreakers& breakers,
                   std::vector<SampleBias>& out);

}  // namespace strata
