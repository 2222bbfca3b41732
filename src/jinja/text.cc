#include "jinja/text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace strata::jinja {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

char control_escape(char e) {
  switch (e) {
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return 0;
  }
}

char32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t n = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (b0 < 0x80) {
    ++i;
    return b0;
  } else if (b0 >= 0xC2 && b0 < 0xE0) {
    n = 1, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 < 0xF0) {
    n = 2, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 < 0xF5) {
    n = 3, cp = b0 & 0x07, min = 0x10000;
  }
  if (n == 0 || s.size() - i <= n) {  // not a lead byte, or the text ends inside the sequence
    ++i;
    return b0;
  }
  for (size_t k = 1; k <= n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
    ++i;
    return b0;
  }
  i += n + 1;
  return cp;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    utf8_next(s, i);
  }
  out.push_back(s.size());
  return out;
}

size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) utf8_next(s, i);
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

// Whether code point `c` is among `chars` (UTF-8).
bool in_chars(char32_t c, std::string_view chars) {
  for (size_t i = 0; i < chars.size();) {
    if (utf8_next(chars, i) == c) return true;
  }
  return false;
}

bool strippable(char32_t c, const std::string* chars) {
  return chars == nullptr ? is_space(c) : in_chars(c, *chars);
}

// The code point that ends at byte `end` (> 0) and where it starts.
char32_t utf8_prev(std::string_view s, size_t end, size_t& start) {
  // A sequence is at most 4 bytes; take the well-formed one that ends exactly here.
  for (size_t len = 4; len >= 2; --len) {
    if (end < len) continue;
    size_t i = end - len;
    const char32_t cp = utf8_next(s, i);
    if (i == end && cp >= 0x80 && static_cast<uint8_t>(s[end - len]) >= 0xC2) {
      start = end - len;
      return cp;
    }
  }
  start = end - 1;
  return static_cast<uint8_t>(s[end - 1]);
}

}  // namespace

std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right) {
  size_t b = 0;
  size_t e = s.size();
  if (left) {
    while (b < e) {
      size_t next = b;
      if (!strippable(utf8_next(s, next), chars)) break;
      b = next;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e;
      if (!strippable(utf8_prev(s, e, start), chars)) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t max_split) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (is_space(utf8_next(s, next))) {
      i = next;
      continue;
    }
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      out.emplace_back(strip(s.substr(i), nullptr, false, true));
      return out;
    }
    size_t end = i;
    while (end < s.size()) {
      size_t after = end;
      if (is_space(utf8_next(s, after))) break;
      end = after;
    }
    out.emplace_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

std::vector<std::string> split_on(std::string_view s, std::string_view sep, int64_t max_split) {
  std::vector<std::string> out;
  size_t start = 0;
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    const size_t at = s.find(sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> rsplit_on(std::string_view s, std::string_view sep, int64_t max_split) {
  std::vector<std::string> reversed;
  size_t end = s.size();
  while (max_split < 0 || static_cast<int64_t>(reversed.size()) < max_split) {
    if (end < sep.size()) break;
    const size_t at = s.rfind(sep, end - sep.size());
    if (at == std::string_view::npos) break;
    reversed.emplace_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
  }
  reversed.emplace_back(s.substr(0, end));
  return {reversed.rbegin(), reversed.rend()};
}

std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = utf8_next(s, i);
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                     c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.emplace_back(s.substr(start, at - start));
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    size_t i = 0;
    int64_t n = 0;
    while (i < s.size() && (count < 0 || n < count)) {
      out += to;
      const size_t start = i;
      utf8_next(s, i);
      out += s.substr(start, i - start);
      ++n;
    }
    if (i < s.size()) {
      out += s.substr(i);
    } else if (count < 0 || n < count) {
      out += to;
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += to;
    start = at + from.size();
    ++n;
  }
  out += s.substr(start);
  return out;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

std::string title(std::string_view s) {
  // jinja2: re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower() per piece.
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = utf8_next(s, i);
    const bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    std::string_view piece = s.substr(at, i - at);
    if (sep) {
      out += piece;
      word_start = true;
      continue;
    }
    out += word_start ? ascii_upper(piece) : ascii_lower(piece);
    word_start = false;
  }
  return out;
}

namespace {

// Code points Python's repr() escapes: controls, separators and format characters among the
// ones chat text meets (Python consults the whole Unicode database).
bool repr_escapes(char32_t c) {
  if (c < 0x20 || c == 0x7F) return true;
  if (c < 0x80) return false;
  return c <= 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
         (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 ||
         c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xE000 && c <= 0xF8FF) ||
         c >= 0xF0000 || c == 0xFFFE || c == 0xFFFF;
}

}  // namespace

std::string str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = utf8_next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (repr_escapes(c)) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out += s.substr(at, i - at);
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: scientific when the decimal exponent is
  // below -4 or at least 16, with a sign and two or more exponent digits.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string_view sci(buf, res.ptr - buf);
  const size_t e_at = sci.find('e');
  std::string_view mant = sci.substr(0, e_at);
  const int exp = std::stoi(std::string(sci.substr(e_at + 1)));
  std::string out;
  if (mant.front() == '-') {
    out += '-';
    mant.remove_prefix(1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  const int n = static_cast<int>(digits.size());
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  } else if (exp < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
  } else if (exp + 1 >= n) {
    out += digits;
    out.append(static_cast<size_t>(exp + 1 - n), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(exp + 1));
    out += '.';
    out.append(digits, static_cast<size_t>(exp + 1));
  }
  return out;
}

}  // namespace strata::jinja
