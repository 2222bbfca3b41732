// Unicode pieces of byte-level BPE: the GPT-2 byte <-> character map and the regex
// pre-tokenizers (PCRE2 with Unicode properties).
//
// Goal: split text exactly as the Hugging Face pre-tokenizers that GGUF files name in
// tokenizer.ggml.pre do. Non-goal: any pre-tokenizer not listed in pretokenizer_regexes().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 upwards, so that every byte is a visible character.
class ByteLevelMap {
 public:
  ByteLevelMap();
  // Appends the mapped characters of every byte of `bytes` to `out`.
  void encode(std::string_view bytes, std::string& out) const;
  // Appends the bytes that the characters of `text` stand for; characters outside the map
  // (and invalid UTF-8) are copied through unchanged.
  void decode(std::string_view text, std::string& out) const;

 private:
  std::array<uint16_t, 256> byte_to_cp_{};
  std::array<int16_t, 324> cp_to_byte_{};  // code points < 324 cover the whole image
};

// A byte range [begin, begin + size) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t size = 0;
};

// The regexes of a named pre-tokenizer, applied in order (each one splits the pieces that
// the previous ones left). An unknown name is an error that names it.
Result<std::vector<std::string>> pretokenizer_regexes(std::string_view name);

// Splits text with a list of compiled regexes. Matches and the text between them both become
// pieces, so the pieces always cover the whole text. Safe to use from several threads.
class RegexSplitter {
 public:
  static Result<RegexSplitter> create(const std::vector<std::string>& patterns);
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  std::vector<TextSpan> split(std::string_view text) const;

 private:
  struct Impl;
  RegexSplitter();
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
