#include "jinja/lexer.h"

#include <cstdlib>

#include "jinja/text.h"

namespace strata::jinja {

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string source_position(std::string_view source, uint32_t offset) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& options) : s_(source), opt_(options) {}

  Result<std::vector<Token>> run() {
    while (pos_ < s_.size()) STRATA_RETURN_IF_ERROR(root());
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.offset = static_cast<uint32_t>(s_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  Status fail(size_t offset, const std::string& what) const {
    return invalid_argument("template " + source_position(s_, static_cast<uint32_t>(offset)) +
                            ": " + what);
  }

  void emit(TokenKind kind, size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.offset = static_cast<uint32_t>(offset);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  // Past Python whitespace (\s*) from `p`.
  size_t skip_space(size_t p) const {
    while (p < s_.size()) {
      size_t next = p;
      if (!is_space(utf8_next(s_, next))) break;
      p = next;
    }
    return p;
  }

  bool at(size_t p, std::string_view what) const { return s_.substr(p, what.size()) == what; }

  // The data before a tag, after the tag's whitespace control (jinja2's OptionalLStrip).
  std::string_view controlled(std::string_view text, char sign, bool lstrip_applies) const {
    if (sign == '-') return strip(text, nullptr, false, true);
    if (sign == '+' || !opt_.lstrip_blocks || !lstrip_applies) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    const std::string_view tail = text.substr(l_pos);
    if (tail.empty() || !strip(tail, nullptr, true, false).empty()) return text;
    return text.substr(0, l_pos);
  }

  // A `%}` (or `#}`) that closes a block or comment at `p`, after an optional sign; returns
  // the end of what it consumes, or 0 when there is none.
  size_t block_close(size_t p, char close) const {
    const char sign = s_[p];
    const size_t q = sign == '-' || sign == '+' ? p + 1 : p;
    if (q + 1 >= s_.size() || s_[q] != close || s_[q + 1] != '}') return 0;
    if (sign == '-') return skip_space(q + 2);
    if (sign == '+') return q + 2;
    return opt_.trim_blocks && q + 2 < s_.size() && s_[q + 2] == '\n' ? q + 3 : q + 2;
  }

  void ended_at(size_t end) { line_starting_ = end > 0 && s_[end - 1] == '\n'; }

  Status root() {
    size_t tag = pos_;
    while (true) {
      tag = s_.find('{', tag);
      if (tag == std::string_view::npos || tag + 1 >= s_.size()) break;
      const char c = s_[tag + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++tag;
    }
    if (tag == std::string_view::npos || tag + 1 >= s_.size()) {
      emit(TokenKind::kData, pos_, std::string(s_.substr(pos_)));
      pos_ = s_.size();
      return Status::ok();
    }
    const char kind = s_[tag + 1];
    const char sign =
        tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : '\0';
    const std::string_view text =
        controlled(s_.substr(pos_, tag - pos_), sign, /*lstrip_applies=*/kind != '{');
    if (!text.empty()) emit(TokenKind::kData, pos_, std::string(text));
    line_starting_ = false;
    size_t p = tag + 2 + (sign ? 1 : 0);
    if (kind == '#') return comment(tag, p);
    if (kind == '%') {
      const size_t raw_end = raw_begin(p);
      if (raw_end != 0) return raw(tag, raw_end);
    }
    const bool block = kind == '%';
    emit(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, tag);
    return inside_tag(tag, p, block);
  }

  Status comment(size_t tag, size_t p) {
    const size_t close = s_.find("#}", p);
    if (close == std::string_view::npos) return fail(tag, "missing end of comment tag");
    const size_t from =
        close > p && (s_[close - 1] == '-' || s_[close - 1] == '+') ? close - 1 : close;
    pos_ = block_close(from, '#');
    ended_at(pos_);
    return Status::ok();
  }

  // After `{%` and its sign: the end of `raw %}` when this tag is {% raw %}, else 0.
  size_t raw_begin(size_t p) const {
    p = skip_space(p);
    if (!at(p, "raw")) return 0;
    p = skip_space(p + 3);
    if (at(p, "-%}")) return skip_space(p + 3);
    if (at(p, "%}")) return p + 2;
    return 0;
  }

  Status raw(size_t tag, size_t body) {
    ended_at(body);
    for (size_t p = s_.find("{%", body); p != std::string_view::npos; p = s_.find("{%", p + 1)) {
      const char sign =
          p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : '\0';
      size_t q = skip_space(p + 2 + (sign ? 1 : 0));
      if (!at(q, "endraw")) continue;
      q = skip_space(q + 6);
      const size_t end = q < s_.size() ? block_close(q, '%') : 0;
      if (end == 0) continue;
      const std::string_view text = controlled(s_.substr(body, p - body), sign, true);
      if (!text.empty()) emit(TokenKind::kData, body, std::string(text));
      pos_ = end;
      ended_at(end);
      return Status::ok();
    }
    return fail(tag, "missing end of raw directive");
  }

  Status inside_tag(size_t tag, size_t p, bool block) {
    std::string open;  // brackets that must close before the tag can
    while (true) {
      if (p >= s_.size()) {
        return fail(tag, std::string("unclosed '") + (block ? "{%" : "{{") + "' tag");
      }
      if (open.empty()) {
        size_t end = 0;
        if (block) {
          end = block_close(p, '%');
        } else if (at(p, "-}}")) {
          end = skip_space(p + 3);
        } else if (at(p, "}}")) {
          end = p + 2;
        }
        if (end != 0) {
          emit(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, p);
          pos_ = end;
          ended_at(end);
          return Status::ok();
        }
      }
      const size_t after_space = skip_space(p);
      if (after_space != p) {
        p = after_space;
        continue;
      }
      const char c = s_[p];
      if (is_digit(c)) {
        STRATA_ASSIGN_OR_RETURN(p, number(p));
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        emit(TokenKind::kName, p, std::string(s_.substr(p, e - p)));
        p = e;
      } else if (c == '\'' || c == '"') {
        STRATA_ASSIGN_OR_RETURN(p, string(p));
      } else {
        STRATA_ASSIGN_OR_RETURN(p, op(p, open));
      }
    }
  }

  Result<size_t> op(size_t p, std::string& open) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view two : kTwo) {
      if (at(p, two)) {
        emit(TokenKind::kOperator, p, std::string(two));
        return p + 2;
      }
    }
    const char c = s_[p];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      std::string shown(1, c);
      if (static_cast<uint8_t>(c) >= 0x80) {
        size_t i = p;
        utf8_next(s_, i);
        shown = std::string(s_.substr(p, i - p));
      }
      return fail(p, "unexpected character '" + shown + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      open += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (open.empty()) return fail(p, std::string("unexpected '") + c + "'");
      if (open.back() != c) {
        return fail(p, std::string("unexpected '") + c + "', expected '" + open.back() + "'");
      }
      open.pop_back();
    }
    emit(TokenKind::kOperator, p, std::string(1, c));
    return p + 1;
  }

  // Digits with single underscores between them, from p; returns the end (p when none).
  size_t digits(size_t p, bool (*ok)(char)) const {
    size_t e = p;
    while (e < s_.size() && ok(s_[e])) {
      ++e;
      if (e + 1 < s_.size() && s_[e] == '_' && ok(s_[e + 1])) ++e;
    }
    return e;
  }

  Result<size_t> number(size_t p) {
    auto dec = [](char c) { return is_digit(c); };
    // Floats first, as jinja2: 1.5, 1e3, 1.5e-3 (never right after a '.': `x.0.1`).
    if (p == 0 || s_[p - 1] != '.') {
      size_t e = digits(p, dec);
      bool is_float = false;
      if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
        e = digits(e + 1, dec);
        is_float = true;
      }
      if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
        size_t x = e + 1;
        if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
        if (x < s_.size() && is_digit(s_[x])) {
          e = digits(x, dec);
          is_float = true;
        }
      }
      if (is_float) {
        std::string text;
        for (char c : s_.substr(p, e - p)) {
          if (c != '_') text += c;
        }
        emit(TokenKind::kFloat, p);
        tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
        return e;
      }
    }
    int base = 10;
    size_t start = p;
    if (s_[p] == '0' && p + 1 < s_.size()) {
      const char b = static_cast<char>(s_[p + 1] | 0x20);
      base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
      if (base != 10) start = p + 2;
    }
    size_t e = start;
    if (base == 10 && s_[p] == '0') {
      // "0", "0_0": a decimal zero; "01" lexes as 0 then 1, which the parser rejects.
      e = p + 1;
      while (e + 1 < s_.size() && s_[e] == '_' && s_[e + 1] == '0') e += 2;
    } else {
      if (base != 10 && e < s_.size() && s_[e] == '_') ++e;
      while (e < s_.size()) {
        const int v = hex_value(s_[e]);
        if (v < 0 || v >= base) break;
        ++e;
        if (e + 1 < s_.size() && s_[e] == '_' && hex_value(s_[e + 1]) >= 0 &&
            hex_value(s_[e + 1]) < base) {
          ++e;
        }
      }
      if (e == start) return fail(p, "invalid integer literal");
    }
    uint64_t value = 0;
    for (char c : s_.substr(start, e - start)) {
      if (c == '_') continue;
      const auto digit = static_cast<uint64_t>(hex_value(c));
      if (value > (static_cast<uint64_t>(INT64_MAX) - digit) / static_cast<uint64_t>(base)) {
        return fail(p, "integer literal too large (the limit is 2^63-1)");
      }
      value = value * static_cast<uint64_t>(base) + digit;
    }
    emit(TokenKind::kInteger, p);
    tokens_.back().int_value = static_cast<int64_t>(value);
    return e;
  }

  // A string literal with Python's escapes (jinja2 decodes them with "unicode-escape").
  Result<size_t> string(size_t p) {
    const char quote = s_[p];
    size_t e = p + 1;
    while (e < s_.size() && s_[e] != quote) e += s_[e] == '\\' ? 2 : 1;
    if (e >= s_.size()) return fail(p, "unterminated string literal");
    const std::string_view body = s_.substr(p + 1, e - p - 1);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\') {
        out += body[i];
        continue;
      }
      const char c = body[++i];
      if (const char ctl = control_escape(c)) {
        out += ctl;
        continue;
      }
      switch (c) {
        case '\n':
          break;  // a backslash before a line end joins the lines
        case '\\':
        case '\'':
        case '"':
          out += c;
          break;
        case 'a':
          out += '\a';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 1; k <= n; ++k) {
            const int v = i + k < body.size() ? hex_value(body[i + k]) : -1;
            if (v < 0) {
              return fail(p, std::string("truncated \\") + c + " escape in a string literal");
            }
            cp = cp * 16 + static_cast<char32_t>(v);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
            return fail(p, "escape for an invalid code point in a string literal");
          }
          utf8_append(out, cp);
          i += n;
          break;
        }
        default:
          if (c >= '0' && c <= '7') {
            char32_t cp = static_cast<char32_t>(c - '0');
            for (int k = 0;
                 k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
            }
            utf8_append(out, cp);
          } else {
            out += '\\';  // an unknown escape stays as written
            out += c;
          }
      }
    }
    emit(TokenKind::kString, p, std::move(out));
    return e + 1;
  }

  std::string_view s_;
  LexOptions opt_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace strata::jinja
