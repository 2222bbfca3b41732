#include "engine/speculative.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata {

namespace {

// llama.cpp's tolerance between a draft's vocabulary size and its target's (added tokens).
constexpr int32_t kSpecMaxVocabDifference = 128;

}  // namespace

Result<SpecType> spec_type_from_name(const std::string& name) {
  if (name == "none") return SpecType::kNone;
  if (name == "draft-simple" || name == "draft") return SpecType::kDraft;
  if (name == "ngram-simple") return SpecType::kNgram;
  return invalid_argument("speculative type '" + name +
                          "' is not one strata runs (none, draft-simple, ngram-simple)");
}

Status SpecParams::validate() const {
  auto range = [](const char* field, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v >= lo && v <= hi) return Status::ok();
    return invalid_argument(std::string(field) + " is " + std::to_string(v) + "; it must be in [" +
                            std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  STRATA_RETURN_IF_ERROR(range("spec draft n_max", n_max, 1, kSpecMaxDraft));
  STRATA_RETURN_IF_ERROR(range("spec draft n_min", n_min, 0, n_max));
  STRATA_RETURN_IF_ERROR(range("spec ngram size n", ngram_n, 1, 1024));
  STRATA_RETURN_IF_ERROR(range("spec ngram size m", ngram_m, 1, kSpecMaxDraft));
  if (!(p_min >= 0.0f && p_min <= 1.0f)) {
    char text[64];
    std::snprintf(text, sizeof(text), "%g", p_min);
    return invalid_argument(std::string("spec draft p_min is ") + text + "; it must be in [0, 1]");
  }
  return Status::ok();
}

std::vector<int32_t> ngram_draft(std::span<const int32_t> history, int32_t n, int32_t m) {
  const size_t len = history.size();
  if (n <= 0 || m <= 0 || len <= static_cast<size_t>(n)) return {};
  const size_t un = static_cast<size_t>(n);
  const std::span<const int32_t> tail = history.subspan(len - un);
  // The latest earlier start j (j + n <= len - 1, so that a token follows the match).
  for (size_t j = len - un; j-- > 0;) {
    if (!std::equal(tail.begin(), tail.end(), history.begin() + static_cast<ptrdiff_t>(j))) {
      continue;
    }
    const size_t from = j + un;
    const size_t to = std::min(len, from + static_cast<size_t>(m));
    return {history.begin() + static_cast<ptrdiff_t>(from),
            history.begin() + static_cast<ptrdiff_t>(to)};
  }
  return {};
}

Result<std::unique_ptr<DraftModel>> DraftModel::create(std::shared_ptr<const Engine> engine,
                                                       std::unique_ptr<Context> context,
                                                       const Model& target) {
  const Tokenizer& d = context->model().tokenizer();
  const Tokenizer& t = target.tokenizer();
  if (std::abs(d.n_vocab() - t.n_vocab()) > kSpecMaxVocabDifference) {
    return invalid_argument("the draft model's vocabulary has " + std::to_string(d.n_vocab()) +
                            " tokens, the model's " + std::to_string(t.n_vocab()) + " (at most " +
                            std::to_string(kSpecMaxVocabDifference) +
                            " apart): not the same vocabulary");
  }
  const int32_t n = std::min(d.n_vocab(), t.n_vocab());
  for (int32_t id = 0; id < n; ++id) {
    if (d.token_text(id) != t.token_text(id)) {
      return invalid_argument("the draft model's token " + std::to_string(id) + " is '" +
                              d.token_text(id) + "', the model's '" + t.token_text(id) +
                              "': not the same vocabulary");
    }
  }
  if (context->params().n_seq < 1) {
    return invalid_argument("the draft model's context has no sequence");
  }
  const auto target_vocab = static_cast<int32_t>(target.hparams().n_vocab);
  return std::unique_ptr<DraftModel>(
      new DraftModel(std::move(engine), std::move(context), target_vocab));
}

Result<std::vector<int32_t>> DraftModel::draft(std::span<const int32_t> history, int32_t n_max,
                                               float p_min) {
  const DraftRequest r{0, history, n_max, p_min};
  STRATA_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> out,
                          draft(std::span<const DraftRequest>(&r, 1)));
  return std::move(out[0]);
}

Result<std::vector<std::vector<int32_t>>> DraftModel::draft(
    std::span<const DraftRequest> requests) {
  Context& ctx = *ctx_;
  std::vector<std::vector<int32_t>> out(requests.size());
  std::vector<int32_t> most(requests.size(), 0);
  std::vector<size_t> going;  // the requests still drafting, in their rows' order
  const int64_t room = ctx.params().n_ctx_seq > 0 ? ctx.params().n_ctx_seq : ctx.params().n_ctx;
  batch_.clear();
  for (size_t k = 0; k < requests.size(); ++k) {
    const DraftRequest& r = requests[k];
    if (r.history.empty() || r.n_max <= 0) continue;
    if (r.seq < 0 || r.seq >= ctx.params().n_seq) {
      return invalid_argument("draft sequence " + std::to_string(r.seq) + " is outside [0, " +
                              std::to_string(ctx.params().n_seq) + ")");
    }
    most[k] = static_cast<int32_t>(
        std::min<int64_t>(r.n_max, room - static_cast<int64_t>(r.history.size())));
    if (most[k] <= 0) continue;
    // What the cache already holds of the history; the last token is decoded again in any
    // case, for its logits.
    const std::vector<int32_t>& held = ctx.seq_tokens(r.seq);
    size_t common = 0;
    const size_t upto = std::min(held.size(), r.history.size() - 1);
    while (common < upto && held[common] == r.history[common]) ++common;
    ctx.seq_truncate(r.seq, static_cast<int32_t>(common));
    for (size_t i = common; i < r.history.size(); ++i) {
      batch_.add(r.history[i], static_cast<int32_t>(i), r.seq, i + 1 == r.history.size());
    }
    going.push_back(k);
  }
  const int64_t n_vocab = ctx.n_vocab();
  while (!going.empty()) {
    STRATA_RETURN_IF_ERROR(ctx.decode(batch_));
    batch_.clear();
    std::vector<size_t> next;
    for (size_t row = 0; row < going.size(); ++row) {
      const size_t k = going[row];
      const float* l = ctx.logits(static_cast<int64_t>(row));
      int32_t best = 0;
      for (int64_t i = 1; i < n_vocab; ++i) {
        best = l[i] > l[best] ? static_cast<int32_t>(i) : best;
      }
      if (best >= target_vocab_) continue;
      if (requests[k].p_min > 0.0f) {
        double sum = 0.0;
        for (int64_t i = 0; i < n_vocab; ++i) {
          sum += std::exp(static_cast<double>(l[i] - l[best]));
        }
        if (1.0 / sum < requests[k].p_min) continue;
      }
      out[k].push_back(best);
      if (static_cast<int32_t>(out[k].size()) >= most[k]) continue;
      const int32_t seq = requests[k].seq;
      batch_.add(best, ctx.seq_len(seq), seq, true);
      next.push_back(k);
    }
    going.swap(next);
  }
  return out;
}

}  // namespace strata
