// A bounded host-memory cache of saved sequence states, keyed by their tokens: when a slot
// gives up a prompt's KV for another request, its state (Context::seq_state_save) goes here,
// and a later prompt that starts with the same tokens restores it instead of recomputing it.
//
// The cache knows nothing of models or devices: an entry is a token list and opaque bytes. It
// belongs to one thread (a pipeline group's decode thread, like its context); a server with
// several groups gives each a cache of its own share of the memory.
//
// Bound: the memory of every state (host_alloc_bytes) plus 4 bytes per key token never exceed
// max_bytes; the least
// recently stored or found entries go first. Non-goals: sharing states between groups,
// compression, spilling to disk.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/host_bytes.h"

namespace strata {

class PromptCache {
 public:
  explicit PromptCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Stores the state of a sequence holding `tokens`, evicting least recently used entries to
  // stay within the bound. Entries whose tokens are a prefix of `tokens` are dropped (this one
  // serves every prompt they would); if an entry's tokens already extend `tokens`, that entry
  // is kept instead. Returns false when the state alone is larger than the bound (not kept).
  bool insert(std::vector<int32_t> tokens, HostBytes state);

  struct Hit {
    std::shared_ptr<const HostBytes> state;  // stays valid after later inserts
    size_t n_tokens = 0;                     // tokens of the stored sequence
    size_t n_match = 0;                      // leading tokens it shares with the prompt
  };
  // The entry sharing the longest prefix with `prompt`, if that prefix has at least
  // max(min_match, 1) tokens; it becomes the most recently used.
  std::optional<Hit> lookup(std::span<const int32_t> prompt, size_t min_match = 1);

  uint64_t bytes() const { return bytes_; }
  uint64_t max_bytes() const { return max_bytes_; }
  size_t size() const { return entries_.size(); }
  void clear();

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const HostBytes> state;
    uint64_t cost() const { return host_alloc_bytes(state->size()) + 4 * tokens.size(); }
  };
  void erase(std::list<Entry>::iterator it);

  const uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace strata
