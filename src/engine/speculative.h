// Speculative decoding: a guess of the next tokens (a draft), from the sequence's own history
// (n-grams) or from a smaller model with the same vocabulary, which the target model checks in
// one step: the tokens the sequence holds, the draft after them, a row of logits for each.
//
// The check samples those rows in order, as decoding one token at a time would (the same
// sampler, one sample per token kept, each accepted before the next is drawn), and keeps the
// draft up to the first token that differs from what was sampled, and that sampled token. So
// the text is the one decoding without a draft gives, token for token: greedy, and seeded
// sampling too (the same random numbers are drawn for the same tokens), since a row's logits
// do not depend on the rows beside it (the engine's batch invariance). A draft only changes
// how many steps the text takes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/context.h"
#include "engine/engine.h"

namespace strata {

// llama.cpp's --spec-type values that strata runs.
enum class SpecType {
  kNone,
  kDraft,  // draft-simple: a draft model's greedy continuation
  kNgram,  // ngram-simple: what followed the last n tokens where they last appeared
};

// "none", "draft-simple", "ngram-simple"; an error naming the value, and the types known.
Result<SpecType> spec_type_from_name(const std::string& name);

// The most tokens one draft may hold (a step checks at most this many plus one).
inline constexpr int32_t kSpecMaxDraft = 256;

struct SpecParams {
  SpecType type = SpecType::kNone;
  int32_t n_max = 3;     // the longest draft (llama-server's default)
  int32_t n_min = 0;     // a shorter draft is not checked (the step decodes one token)
  float p_min = 0.0f;    // a draft model stops drafting at a token it gives less than this
  int32_t ngram_n = 12;  // ngram-simple: the n-gram looked up
  int32_t ngram_m = 48;  // ngram-simple: the most tokens taken after it

  // Names the first bad field, its value and its range.
  Status validate() const;
};

// ngram-simple: the last `n` tokens of `history` are looked up among its earlier tokens; the
// latest earlier occurrence gives the tokens that followed it, at most `m` and not past the
// end of the history. Empty when there is none (or the history holds n tokens or fewer).
std::vector<int32_t> ngram_draft(std::span<const int32_t> history, int32_t n, int32_t m);

// One sequence's request to a draft model.
struct DraftRequest {
  int32_t seq = 0;                   // the draft context's sequence that follows it
  std::span<const int32_t> history;  // the sequence's tokens, the last one included
  int32_t n_max = 0;
  float p_min = 0.0f;
};

// A draft model: its engine (shared by the contexts of a server's pipeline groups) and a
// context whose sequences follow the sequences it drafts for, kept in step by decoding only
// what each lacks of the history it is given.
class DraftModel {
 public:
  // The draft's vocabulary must be the target's: token texts equal over the smaller one, sizes
  // apart by at most 128 (llama.cpp's tolerance for added tokens); else an error naming the first
  // token that differs.
  static Result<std::unique_ptr<DraftModel>> create(std::shared_ptr<const Engine> engine,
                                                    std::unique_ptr<Context> context,
                                                    const Model& target);

  // Up to n_max tokens that continue `history` (the sequence's tokens, the last one included),
  // chosen greedily by the draft model. Stops early before a token whose probability is below
  // p_min, or one the target's vocabulary does not have. Sequence 0.
  Result<std::vector<int32_t>> draft(std::span<const int32_t> history, int32_t n_max, float p_min);
  // The drafts of several sequences, decoded together: one batch to catch up, then one per
  // drafted position. Each draft is what draft() would give that sequence alone.
  Result<std::vector<std::vector<int32_t>>> draft(std::span<const DraftRequest> requests);

  const Context& context() const { return *ctx_; }

 private:
  DraftModel(std::shared_ptr<const Engine> engine, std::unique_ptr<Context> context,
             int32_t target_vocab)
      : engine_(std::move(engine)), ctx_(std::move(context)), target_vocab_(target_vocab) {}

  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<Context> ctx_;
  int32_t target_vocab_;
  Batch batch_;
};

// What the drafts of a run came to (llama-server's spec_decode counters).
struct SpecStats {
  int64_t n_drafts = 0;    // steps that checked a draft
  int64_t n_drafted = 0;   // tokens drafted in them
  int64_t n_accepted = 0;  // drafted tokens the target kept
};

}  // namespace strata
