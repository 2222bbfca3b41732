#include "engine/prompt_cache.h"

#include <algorithm>

namespace strata {
namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

void PromptCache::erase(std::list<Entry>::iterator it) {
  bytes_ -= it->cost();
  entries_.erase(it);
}

void PromptCache::clear() {
  entries_.clear();
  bytes_ = 0;
}

bool PromptCache::insert(std::vector<int32_t> tokens, HostBytes state) {
  Entry e{std::move(tokens), std::make_shared<const HostBytes>(std::move(state))};
  const uint64_t cost = e.cost();
  if (cost > max_bytes_) return false;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const size_t lcp = common_prefix(it->tokens, e.tokens);
    if (lcp == e.tokens.size()) {
      // Stored already, or within a longer entry: that one serves every prompt this would.
      entries_.splice(entries_.begin(), entries_, it);
      return true;
    }
    if (lcp == it->tokens.size()) {
      erase(it++);
    } else {
      ++it;
    }
  }
  while (bytes_ + cost > max_bytes_) erase(std::prev(entries_.end()));
  bytes_ += cost;
  entries_.push_front(std::move(e));
  return true;
}

std::optional<PromptCache::Hit> PromptCache::lookup(std::span<const int32_t> prompt,
                                                    size_t min_match) {
  auto best = entries_.end();
  size_t best_lcp = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const size_t lcp = common_prefix(it->tokens, prompt);
    if (lcp > best_lcp) {
      best_lcp = lcp;
      best = it;
    }
  }
  if (best == entries_.end() || best_lcp < std::max<size_t>(min_match, 1)) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, best);
  return Hit{best->state, best->tokens.size(), best_lcp};
}

}  // namespace strata
