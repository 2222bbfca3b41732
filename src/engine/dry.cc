#include "engine/dry.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

#include "model/tokenizer.h"

namespace strata {

Result<std::shared_ptr<const DryBreakers>> dry_breakers(std::span<const std::string> breakers,
                                                        const Tokenizer& tok) {
  if (breakers.size() > kDryMaxBreakers) {
    return invalid_argument("dry_sequence_breakers: " + std::to_string(breakers.size()) +
                            " breakers, more than " + std::to_string(kDryMaxBreakers));
  }
  auto out = std::make_shared<DryBreakers>();
  if (breakers.empty()) return std::shared_ptr<const DryBreakers>(std::move(out));
  std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    pieces[static_cast<size_t>(id)] = tok.token_to_piece(id, /*render_special=*/true);
  }
  auto add = [&out](int32_t head, std::vector<int32_t> tail) {
    auto [first, last] = out->by_head.equal_range(head);
    for (auto it = first; it != last; ++it) {
      if (it->second == tail) return;
    }
    out->by_head.emplace(head, std::move(tail));
  };
  for (const std::string& b : breakers) {
    const std::string_view br = std::string_view(b).substr(0, kDryMaxBreakerBytes);
    if (br.empty()) continue;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      const std::string_view word = pieces[static_cast<size_t>(id)];
      if (word.find(br) != std::string_view::npos) {
        add(id, {});
        continue;
      }
      // Each place where the token's text ends with a start of the breaker: the rest of the
      // breaker, as the tokenizer writes it, must follow.
      for (size_t pos = word.find(br[0]); pos != std::string_view::npos;
           pos = word.find(br[0], pos + 1)) {
        const size_t overlap = word.size() - pos;
        if (overlap >= br.size() || word.substr(pos) != br.substr(0, overlap)) continue;
        std::vector<int32_t> tail = tok.encode(br.substr(overlap), false, false);
        if (tail.size() > kDryMaxTailTokens) tail.resize(kDryMaxTailTokens);
        add(id, std::move(tail));
      }
    }
  }
  return std::shared_ptr<const DryBreakers>(std::move(out));
}

void dry_penalties(std::span<const int32_t> window, const DryParams& p, const DryBreakers& breakers,
                   std::vector<SampleBias>& out) {
  out.clear();
  const int64_t n = static_cast<int64_t>(window.size());
  if (p.multiplier == 0.0f || p.base < 1.0f || n <= p.allowed_length) return;
  // r(i): the token i places before the last (r(0) is the last).
  auto r = [&window, n](int64_t i) { return window[static_cast<size_t>(n - 1 - i)]; };

  // The nearest breaker to the end bounds how far back a repeat may reach: a breaker that
  // ends i tokens before the last leaves i - (its tail's length) tokens after it.
  int64_t limit = n;
  for (int64_t i = 0; i < n; ++i) {
    auto [first, last] = breakers.by_head.equal_range(r(i));
    int64_t longest = -1;
    for (auto it = first; it != last; ++it) {
      const int64_t len = static_cast<int64_t>(it->second.size());
      if (len <= longest || len > i) continue;
      bool match = true;
      for (int64_t o = 0; o < len && match; ++o)
        match = it->second[static_cast<size_t>(o)] == r(i - o - 1);
      if (match) longest = len;
    }
    if (longest >= 0) {
      limit = i - longest;
      break;
    }
  }
  if (limit < p.allowed_length) return;

  // z[k]: how many tokens before and at r(k) equal the ones before and at the last, i.e. the
  // longest common suffix of the window and the window cut k tokens short (the Z-function of
  // the reversed window).
  std::vector<int64_t> z(static_cast<size_t>(n), 0);
  for (int64_t k = 1, lo = 0, hi = 0; k < n; ++k) {
    int64_t len = 0;
    if (k < hi) len = std::min(hi - k, z[static_cast<size_t>(k - lo)]);
    while (k + len < n && r(len) == r(k + len)) ++len;
    z[static_cast<size_t>(k)] = len;
    if (k + len > hi) {
      lo = k;
      hi = k + len;
    }
  }

  // A repeat of length z[k] ending at r(k) continues with r(k - 1): the longest such repeat
  // of each token.
  std::map<int32_t, int64_t> longest;
  for (int64_t k = 1; k < n; ++k) {
    const int64_t len = std::min(z[static_cast<size_t>(k)], limit);
    if (len < p.allowed_length) continue;
    int64_t& best = longest[r(k - 1)];
    best = std::max(best, len);
  }

  // pow(base, e) stays finite: e at most log(FLT_MAX) / log(base), as llama.cpp clamps it.
  constexpr float kLogFloatMax = 88.7228391f;
  const int64_t max_exponent =
      p.base > 1.000001f ? static_cast<int64_t>(kLogFloatMax / std::log(p.base)) : 0;
  for (const auto& [token, len] : longest) {
    // A token that is a breaker by itself ends the repeat instead of continuing it.
    auto [first, last] = breakers.by_head.equal_range(token);
    if (std::any_of(first, last, [](const auto& e) { return e.second.empty(); })) continue;
    int64_t e = len - p.allowed_length;
    if (max_exponent > 0) e = std::min(e, max_exponent);
    out.push_back(SampleBias{token, p.multiplier * std::pow(p.base, static_cast<float>(e))});
  }
}

}  // namespace strata
