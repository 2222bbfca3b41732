#include "core/utf8.h"

#include <algorithm>

namespace strata {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Valid range of the second byte after `lead` (the first continuation byte is where overlongs,
// surrogates and values past U+10FFFF are excluded); the other continuation bytes are 80..BF.
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

// Length of the sequence that a valid lead byte starts, 0 when `lead` cannot start one.
size_t lead_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// How many bytes from s[i] form a valid prefix of one character: returns `want` (the full
// length) when complete, fewer when the text ends early, and sets `bad` when a byte breaks it.
size_t valid_prefix(std::string_view s, size_t i, size_t want, bool& bad) {
  bad = false;
  const uint8_t lead = static_cast<uint8_t>(s[i]);
  size_t k = 1;
  for (; k < want && i + k < s.size(); ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    const bool ok = k == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      bad = true;
      return k;
    }
  }
  return k;
}

}  // namespace

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool utf8_decode(std::string_view s, size_t& i, uint32_t& cp) {
  if (i >= s.size()) return false;
  const uint8_t lead = static_cast<uint8_t>(s[i]);
  const size_t n = lead_len(lead);
  if (n == 0) return false;
  bool bad = false;
  if (valid_prefix(s, i, n, bad) != n || bad) return false;
  static constexpr uint8_t kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t v = lead & kLeadMask[n];
  for (size_t k = 1; k < n; ++k) v = (v << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  cp = v;
  i += n;
  return true;
}

bool utf8_valid(std::string_view s) {
  size_t i = 0;
  uint32_t cp = 0;
  while (i < s.size()) {
    if (!utf8_decode(s, i, cp)) return false;
  }
  return true;
}

std::string Utf8Stream::push(std::string_view bytes) {
  std::string buf = std::move(pending_);
  pending_.clear();
  buf.append(bytes);
  std::string out;
  out.reserve(buf.size());
  size_t i = 0;
  while (i < buf.size()) {
    const uint8_t lead = static_cast<uint8_t>(buf[i]);
    if (lead < 0x80) {
      out += static_cast<char>(lead);
      ++i;
      continue;
    }
    const size_t n = lead_len(lead);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    bool bad = false;
    const size_t k = valid_prefix(buf, i, n, bad);
    if (bad) {
      out += kReplacement;  // the valid prefix is one ill-formed subsequence
      i += k;
    } else if (k < n) {
      pending_.assign(buf, i, std::string::npos);  // wait for the rest of the character
      break;
    } else {
      out.append(buf, i, n);
      i += n;
    }
  }
  return out;
}

std::string Utf8Stream::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

std::vector<MergeSymbol> utf8_merge_symbols(std::string_view text) {
  std::vector<MergeSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min(utf8_seq_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, pos + len == text.size() ? -1 : index + 1, pos, len});
    pos += len;
  }
  return symbols;
}

}  // namespace strata
