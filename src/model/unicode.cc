#include "model/unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/utf8.h"

namespace strata {

ByteLevelMap::ByteLevelMap() {
  cp_to_byte_.fill(-1);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    byte_to_cp_[b] = static_cast<uint16_t>(cp);
    cp_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

void ByteLevelMap::encode(std::string_view bytes, std::string& out) const {
  for (char c : bytes) utf8_append(out, byte_to_cp_[static_cast<uint8_t>(c)]);
}

void ByteLevelMap::decode(std::string_view text, std::string& out) const {
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    uint32_t cp = 0;
    if (!utf8_decode(text, i, cp)) {
      out += text[i++];
      continue;
    }
    if (cp < cp_to_byte_.size() && cp_to_byte_[cp] >= 0) {
      out += static_cast<char>(cp_to_byte_[cp]);
    } else {
      out.append(text, start, i - start);
    }
  }
}

namespace {

// White_Space as llama.cpp's Unicode tables have it. PCRE2's \s also matches U+180E, which
// Unicode stopped counting as whitespace in version 6.3.
constexpr std::string_view kWhiteSpace =
    R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// The pattern with \s and \S spelled out as kWhiteSpace, inside a class and outside it.
Result<std::string> spell_out_whitespace(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        return internal_error("pre-tokenizer regex '" + std::string(p) + "': \\S in a class");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct RegexSplitter::Impl {
  struct CodeDeleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::vector<std::unique_ptr<pcre2_code, CodeDeleter>> codes;
};

RegexSplitter::RegexSplitter() : impl_(std::make_unique<Impl>()) {}
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

Result<RegexSplitter> RegexSplitter::create(std::span<const std::string_view> patterns) {
  RegexSplitter s;
  for (const std::string_view p : patterns) {
    STRATA_ASSIGN_OR_RETURN(const std::string spelled, spell_out_whitespace(p));
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    // MATCH_INVALID_UTF: invalid bytes never match and end up in the gaps between matches,
    // instead of failing the whole match. DOLLAR_ENDONLY: '$' is the end of the piece, as in
    // ECMAScript, never before a final newline.
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(),
                                     options, &err, &err_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return internal_error("pre-tokenizer regex '" + spelled + "' at offset " +
                            std::to_string(err_offset) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    s.impl_->codes.emplace_back(code);
  }
  return s;
}

std::vector<TextSpan> RegexSplitter::split(std::string_view text) const {
  std::vector<TextSpan> pieces;
  if (!text.empty()) pieces.push_back({0, text.size()});
  struct DataDeleter {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
  };
  for (const auto& code : impl_->codes) {
    std::unique_ptr<pcre2_match_data, DataDeleter> md(
        pcre2_match_data_create_from_pattern(code.get(), nullptr));
    std::vector<TextSpan> next;
    next.reserve(pieces.size() * 2);
    for (const TextSpan& piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
      size_t pos = 0;  // within the piece
      size_t gap = 0;  // start of the text not matched yet
      while (pos < piece.size) {
        const int rc = pcre2_match(code.get(), subject, piece.size, pos, 0, md.get(), nullptr);
        if (rc < 0) break;  // no match (or a match error: the rest stays one piece)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t b = ov[0], e = ov[1];
        if (e <= b) {  // an empty match: these patterns have none, but never loop on one
          pos = b + 1;
          continue;
        }
        if (b > gap) next.push_back({piece.begin + gap, b - gap});
        next.push_back({piece.begin + b, e - b});
        pos = gap = e;
      }
      if (gap < piece.size) next.push_back({piece.begin + gap, piece.size - gap});
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace strata
