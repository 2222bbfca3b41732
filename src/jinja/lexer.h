// The Jinja lexer: template text to tokens, with jinja2's whitespace control.
//
// Text outside tags becomes data tokens; `{{ }}` and `{% %}` become begin/end tokens around the
// names, literals and operators inside; comments and `{% raw %}` markers disappear. Whitespace
// control is applied here, as jinja2 does: `{%-`/`-%}` strip all whitespace before/after a tag,
// trim_blocks drops the first newline after a block or comment tag, lstrip_blocks drops the
// spaces and tabs before a block or comment tag that starts its line, and `{%+`/`+%}` turn
// those two off for one tag. Line ends are normalised to "\n" and one trailing newline of the
// template is dropped (jinja2's keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::jinja {

enum class TokenKind : uint8_t {
  kData,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,  // text holds the operator: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;  // data, name, operator, or a string literal's value (escapes decoded)
  int64_t int_value = 0;
  double float_value = 0;
  uint32_t offset = 0;  // byte offset in the normalised source, for line:column in errors
};

// How jinja2 is configured: transformers and llama.cpp render chat templates with both on.
struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// The source with line ends normalised and one trailing newline dropped: what offsets index.
std::string normalize_source(std::string_view source);

// Tokens of a normalised source, ending with kEof. Errors name the line and column.
Result<std::vector<Token>> lex(std::string_view source, const LexOptions& options);

// "line L, column C" of a byte offset (columns count bytes from 1).
std::string source_position(std::string_view source, uint32_t offset);

}  // namespace strata::jinja
