// UTF-8 helpers for the tokenizer and for streaming generated text.
//
// Goal: token pieces arrive as arbitrary byte strings (a byte-fallback token is a single byte
// of a multi-byte character); Utf8Stream turns them into text that is always valid UTF-8,
// holding back an incomplete character until its last byte arrives.
// Non-goal: normalisation or any knowledge of Unicode properties (see unicode.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Bytes in the sequence that `lead` starts, judged by its high bits alone (1 for a stray
// continuation byte), as SentencePiece and llama.cpp split text into characters.
inline size_t utf8_seq_len(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

// Appends the UTF-8 encoding of `cp` (which must be <= 0x10FFFF) to `out`.
void utf8_append(std::string& out, uint32_t cp);

// Decodes the character at `s[i]` when it is well formed (no overlongs, no surrogates) and
// advances `i`; otherwise leaves `i` alone and returns false.
bool utf8_decode(std::string_view s, size_t& i, uint32_t& cp);

// True when `s` is entirely well-formed UTF-8.
bool utf8_valid(std::string_view s);

// Assembles UTF-8 text from pieces that may split characters. Invalid bytes become U+FFFD
// (one per maximal ill-formed subsequence, as the Unicode standard recommends).
class Utf8Stream {
 public:
  // Returns the complete characters that `bytes` finishes, keeping an incomplete tail.
  std::string push(std::string_view bytes);
  // Returns what is held back, as U+FFFD if anything, and resets the stream.
  std::string flush();
  // Bytes held back waiting for the rest of their character (0 to 3).
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

// One character of a text that BPE or SentencePiece merges: a doubly linked list over the
// text's UTF-8 characters (an incomplete sequence at the end is one symbol of what is left).
struct MergeSymbol {
  int prev = -1;
  int next = -1;
  size_t begin = 0;  // byte range in the text
  size_t size = 0;   // 0 once merged into its left neighbour
};
std::vector<MergeSymbol> utf8_merge_symbols(std::string_view text);

}  // namespace strata
