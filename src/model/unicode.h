// Unicode pieces of byte-level BPE: the GPT-2 byte <-> character map and the regex splitter
// that pre-tokenizers run (PCRE2 with Unicode properties).
//
// Goal: split text as llama.cpp's pre-tokenizers do; the regexes themselves are rows of the
// pre-tokenizer table (tokenizer_pre.h). Non-goal: normalisation.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
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

// Splits text with a list of compiled regexes (PCRE2, UTF-8 with Unicode properties; \s is
// Unicode White_Space, '$' only the end of a piece). Matches and the text between them both
// become pieces, so the pieces always cover the whole text. Safe to use from several threads.
class RegexSplitter {
 public:
  static Result<RegexSplitter> create(std::span<const std::string_view> patterns);
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
