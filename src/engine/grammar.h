// GBNF grammars (llama.cpp's format) for constrained decoding: which tokens may come next.
//
// Goal: grammar text from an HTTP request (untrusted) is parsed into llama.cpp's flat form, and
// every hostile input ends in an error that names the problem and where it is, within limits on
// size, depth, ambiguity and time written beside their values in grammar.cc. Matching is over
// Unicode code points while tokens are UTF-8 bytes that may split a code point.
// Lazy grammars (llama.cpp's trigger words) are the caller's: scan_trigger says where one starts.
// Non-goals: token references (<[id]>) in the grammar; trigger patterns (regular expressions).
// JSON schemas become GBNF text elsewhere (server/json_schema_grammar.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

// One element of a compiled rule, as llama.cpp lays them out: a rule is its alternatives one
// after the other, each ended by kAlt except the last, which kEnd ends. A character class is a
// kChar/kCharNot/kCharAny element followed by kCharRangeUpper (the upper end of a range) and
// kCharAlt (the start of another range) elements; its ranges are sorted and disjoint.
enum class GrammarElementType : uint8_t {
  kEnd,             // end of the rule
  kAlt,             // start of another alternative
  kRuleRef,         // value: the rule's index
  kChar,            // value: a code point, or the low end of a range
  kCharNot,         // like kChar, but matches what the class does not hold
  kCharRangeUpper,  // value: the high end (inclusive) of the range the element before starts
  kCharAlt,         // value: another code point or range start of the same class
  kCharAny,         // any code point ('.')
};

struct GrammarElement {
  GrammarElementType type;
  uint32_t value;
};

// A parsed and checked GBNF grammar; immutable, shared by the matchers of many requests.
class Grammar {
 public:
  // Parses `text` and checks it: every referenced rule defined, `root` present, no left
  // recursion, and every limit (see grammar.cc) kept.
  static Result<std::shared_ptr<const Grammar>> parse(std::string_view text,
                                                      std::string_view root = "root");

  // All rules' elements, one rule after the other.
  const std::vector<GrammarElement>& elements() const { return elements_; }
  size_t n_rules() const { return rule_begin_.size(); }
  uint32_t root_rule() const { return root_; }
  // The element positions where rule `rule`'s alternatives start.
  const uint32_t* alternatives_begin(uint32_t rule) const {
    return alt_starts_.data() + alt_ranges_[rule];
  }
  const uint32_t* alternatives_end(uint32_t rule) const {
    return alt_starts_.data() + alt_ranges_[rule + 1];
  }
  // The rule's name; generated rules (groups, repetitions) are named after the rule they
  // appear in, with a numeric suffix.
  const std::string& rule_name(uint32_t rule) const { return rule_names_[rule]; }

 private:
  friend class GrammarBuilder;

  std::vector<GrammarElement> elements_;
  std::vector<uint32_t> rule_begin_;  // per rule, its first element's position
  std::vector<uint32_t> alt_starts_;  // every alternative's first element, rule by rule
  std::vector<uint32_t> alt_ranges_;  // n_rules + 1 offsets into alt_starts_
  std::vector<std::string> rule_names_;
  uint32_t root_ = 0;
};

// The vocabulary as the matcher sees it: each token's bytes (its decoded piece, as
// Tokenizer::token_to_piece gives it), precomputed once per model. Tokens marked `never`
// (control tokens, which print no text) are never allowed by a grammar; the end-of-generation
// tokens are the caller's business (it allows them when the matcher is complete()).
//
// The tokens that are whole UTF-8 (possibly ending inside a code point) sit in a trie of their
// code points, so that allowed() tests each distinct prefix once for the whole vocabulary and
// drops every token under a prefix the grammar refuses. Tokens that start with a continuation
// byte can only finish a code point an earlier token began; they are kept in a list of their
// own and tested one by one, only when the matcher holds such a partial code point.
class GrammarVocab {
 public:
  GrammarVocab(std::vector<std::string> pieces, std::vector<bool> never);
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t token) const { return pieces_[token]; }

  struct TrieNode {
    uint32_t code_point;   // the edge from the parent
    uint32_t child_begin;  // children are contiguous, sorted by code point
    uint32_t child_end;
    uint32_t token_begin;  // tokens whose code points end exactly here
    uint32_t token_end;
    uint32_t partial_begin;  // tokens that end here plus part of one more code point
    uint32_t partial_end;
  };
  // A token ending in an incomplete code point: the range it can still complete to.
  struct PartialTail {
    int32_t token;
    uint32_t low;
    uint32_t high;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }  // [0] is the root
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  const std::vector<PartialTail>& partial_tails() const { return partial_tails_; }
  const std::vector<int32_t>& continuation_tokens() const { return continuation_tokens_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  std::vector<PartialTail> partial_tails_;
  std::vector<int32_t> continuation_tokens_;
};

// An incomplete UTF-8 sequence: the bits so far, how many bytes are still due, and the range
// the next byte must be in (narrower than 80..BF after E0, ED, F0 and F4, which is what rules
// out overlong forms, surrogates and code points past U+10FFFF).
struct GrammarUtf8Partial {
  uint32_t value = 0;
  uint8_t remain = 0;
  uint8_t next_low = 0x80;
  uint8_t next_high = 0xBF;
};

// One sequence's position in a grammar: the set of parse stacks, and a code point that a token
// may have left half-written (UTF-8 split across tokens). A matcher belongs to one sequence and
// one thread: allowed() is const but uses the matcher's scratch memory.
//
// A parse stack is a list of element positions, the top one a character element that the next
// code point must match, the rest where each enclosing rule continues. Stacks share their tails:
// they are nodes (position, parent) in an arena, interned so that equal stacks are equal node
// ids, which makes removing duplicate stacks a sort of integers.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  // The text so far is a whole sentence of the grammar (an end-of-generation token may end it).
  bool complete() const;
  // complete() and no stack can take any more text: generation must end here.
  bool exhausted() const;
  // allowed[i] = 1 when token i's bytes can come next (the grammar accepts them as a
  // continuation of the text so far, possibly ending inside a code point), else 0; resized to
  // vocab.size(). A token with empty bytes is not allowed (it would not advance). An error
  // only when a limit is exceeded.
  Status allowed(const GrammarVocab& vocab, std::vector<uint8_t>& allowed) const;
  // Advances over bytes (a token's piece); an error naming the position when the grammar does
  // not accept them, and then the matcher is unchanged.
  Status accept(std::string_view bytes);
  // Not ok when the grammar is empty or its start exceeds a limit (Grammar::parse refuses
  // both, so this is a defence); allowed() and accept() then return it.
  const Status& status() const { return init_status_; }
  // Parse stacks alive now (for tests and diagnostics).
  size_t n_stacks() const { return stacks_.size(); }
  // How many allowed() calls were answered from its cache (for tests and diagnostics).
  size_t mask_cache_hits() const { return mask_hits_; }

 private:
  struct Node {
    uint32_t pos;     // element position; kNoPos for the empty stack's node
    uint32_t parent;  // node id
    uint32_t depth;   // elements in the stack that this node tops
    uint32_t slot;    // its slot in the intern table, to undo the insertion
    uint32_t mark;    // the expansion pass that last visited it
  };

  // The nodes and the table that interns them. Nodes are only ever removed newest first
  // (truncate), which undoes their insertions into the open-addressing table exactly.
  struct Arena {
    std::vector<Node> nodes;
    std::vector<uint32_t> table;
    void reset();
    void truncate(size_t size);
    void rehash(size_t capacity);
  };

  // Returns the node for (pos, parent), creating it if new; kFailed after setting error_.
  uint32_t intern(uint32_t pos, uint32_t parent) const;
  // Expands the stack `id` until every resulting stack's top is a character element (or the
  // stack is empty), appending those to `out`.
  bool expand(uint32_t id, std::vector<uint32_t>& out) const;
  // The stacks after `in` takes code point `cp`, deduplicated, into `out`.
  bool step(const uint32_t* in, size_t n_in, uint32_t cp, std::vector<uint32_t>& out) const;
  // Whether some stack of `in` can take a code point in [low, high].
  bool any_takes_range(const uint32_t* in, size_t n_in, uint32_t low, uint32_t high) const;
  // Runs `bytes` from the current state into `out_stacks` and `out_partial`; false when the
  // grammar refuses them (error_ says why when it is a limit, and `fail_at` where otherwise).
  bool run_bytes(std::string_view bytes, std::vector<uint32_t>& out_stacks,
                 GrammarUtf8Partial& out_partial, size_t& fail_at) const;
  Status allowed_uncached(const GrammarVocab& vocab, std::vector<uint8_t>& allowed) const;
  Status allowed_from_trie(const GrammarVocab& vocab, std::vector<uint8_t>& allowed) const;
  void compact();
  void begin_pass() const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<uint32_t> stacks_;  // sorted node ids; 0 is the empty stack
  GrammarUtf8Partial partial_;
  Status init_status_;

  // The arena holds the live stacks. allowed() and a failed accept() add nodes to it and
  // remove them again, newest first, leaving it as they found it; the vectors after it are
  // scratch kept between calls, so that allowed() does not allocate per token.
  mutable Arena arena_;
  mutable uint32_t pass_ = 0;
  mutable size_t pass_work_ = 0;
  mutable size_t call_work_ = 0;
  mutable Status error_;
  mutable std::vector<uint32_t> work_, sets_, step_out_, run_a_, run_b_;
  mutable std::vector<uint32_t> remap_, expand_out_;
  // allowed()'s memo of expansions, per node that existed when it began (empty otherwise).
  mutable std::vector<uint32_t> memo_begin_, memo_size_, memo_ids_;
  struct Frame {
    uint32_t trie_node;
    uint32_t set_begin, set_end;
    uint32_t next_child;
    uint32_t arena_mark;
  };
  mutable std::vector<Frame> frames_;

  // allowed()'s answers for the last states it saw, each keyed by the state written out (the
  // partial code point, then every stack's positions from its top): inside a string or any
  // repetition the same state comes back after every token, and its mask is then a copy
  // instead of a walk of the whole vocabulary. Least recently used replaced.
  struct MaskEntry {
    const GrammarVocab* vocab = nullptr;
    std::vector<uint32_t> key;
    std::vector<uint8_t> mask;
    uint64_t used = 0;
  };
  // The state's key into `key`; false when it is too long to be worth keeping.
  bool mask_key(std::vector<uint32_t>& key) const;
  mutable std::vector<MaskEntry> mask_cache_;
  mutable std::vector<uint32_t> mask_key_;
  mutable uint64_t mask_clock_ = 0;
  mutable size_t mask_hits_ = 0;
};

// A lazy grammar's start (llama.cpp's lazy grammars): the text is free until one of `words`
// appears, and from there on it must be a sentence of the grammar (which begins with the
// word). Tool calls use it: a reply may be text, but a call, once opened, is well formed.
struct GrammarTrigger {
  std::vector<std::string> words;
  // A word counts only as the reply's first text (after whitespace and any reasoning block).
  bool at_start = false;
  // The reply starts inside a reasoning block (the prompt opened <think>): words count only
  // after its "</think>".
  bool thinking_forced_open = false;
  // The reply may start with a "<think>...</think>" block: words inside it do not count.
  bool may_think = false;
};

struct TriggerScan {
  enum class State { kWait, kStart, kNever };
  State state = State::kWait;
  size_t at = 0;  // kStart: where the grammar's sentence starts in the text
};

// Where a lazy grammar starts in `text` (what was generated so far): kWait while it cannot
// tell yet, kNever when the text can no longer start it (at_start, the first text not a word).
// `scanned`: how far earlier calls looked (0 at first); updated, so that a long free text is
// searched once, not once per token.
TriggerScan scan_trigger(const GrammarTrigger& t, std::string_view text, size_t& scanned);

// llama.cpp's JSON grammar (grammars/json.gbnf): root is any JSON object; `json_value_grammar()`
// the same with root any JSON value. Written by us as GBNF text, parsed by Grammar::parse.
std::string json_object_grammar();
std::string json_value_grammar();

}  // namespace strata
