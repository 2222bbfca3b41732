#include "jinja/lexer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::jinja {
namespace {

// The tokens as text: data in quotes, the rest as spelled ({{, name, 'string', 3, +...).
std::string shown(std::string_view source) {
  Result<std::vector<Token>> tokens = lex(normalize_source(source), LexOptions{});
  if (!tokens) return "error: " + tokens.status().message();
  std::string out;
  for (const Token& t : *tokens) {
    if (!out.empty()) out += ' ';
    switch (t.kind) {
      case TokenKind::kData:
        out += '"';
        out += t.text;
        out += '"';
        break;
      case TokenKind::kVariableBegin:
        out += "{{";
        break;
      case TokenKind::kVariableEnd:
        out += "}}";
        break;
      case TokenKind::kBlockBegin:
        out += "{%";
        break;
      case TokenKind::kBlockEnd:
        out += "%}";
        break;
      case TokenKind::kString:
        out += '\'';
        out += t.text;
        out += '\'';
        break;
      case TokenKind::kInteger:
        out += std::to_string(t.int_value);
        break;
      case TokenKind::kFloat:
        out += 'f';
        out += std::to_string(t.float_value);
        break;
      case TokenKind::kEof:
        out += "EOF";
        break;
      default:
        out += t.text;
    }
  }
  return out;
}

TEST(JinjaLexer, Tokens) {
  EXPECT_EQ(shown("a{{ x.y[0] | f(1, k='v') }}b"),
            "\"a\" {{ x . y [ 0 ] | f ( 1 , k = 'v' ) }} \"b\" EOF");
  EXPECT_EQ(shown("{{ 1_000 + 0x10 - 1.5e1 // 2 ** 3 }}"),
            "{{ 1000 + 16 - f15.000000 // 2 ** 3 }} EOF");
  EXPECT_EQ(shown("{{ a != b >= c ~ d }}"), "{{ a != b >= c ~ d }} EOF");
  // '}}' inside braces closes the braces, not the tag.
  EXPECT_EQ(shown("{{ {'a': {'b': 1}} }}"), "{{ { 'a' : { 'b' : 1 } } }} EOF");
  EXPECT_EQ(shown("{{ 'it\\'s' \"\\u00e9\\n\" }}"), "{{ 'it's' 'é\n' }} EOF");
}

TEST(JinjaLexer, WhitespaceControl) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indent before it.
  EXPECT_EQ(shown("x\n  {% if a %}\n  y\n  {% endif %}\nz"),
            "\"x\n\" {% if a %} \"  y\n\" {% endif %} \"z\" EOF");
  // Not around variables.
  EXPECT_EQ(shown("x\n  {{ a }}\nz"), "\"x\n  \" {{ a }} \"\nz\" EOF");
  // '-' strips all whitespace, newlines included; '+' keeps it.
  EXPECT_EQ(shown("x \n {%- if a -%} \n y"), "\"x\" {% if a %} \"y\" EOF");
  EXPECT_EQ(shown("x\n  {%+ if a +%}\ny"), "\"x\n  \" {% if a %} \"\ny\" EOF");
  // Comments vanish with the same rules; raw keeps its body.
  EXPECT_EQ(shown("a\n  {# c #}\nb{% raw %}{{ x }}{% endraw %}"), "\"a\n\" \"b\" \"{{ x }}\" EOF");
  // Line ends become \n and one final newline goes.
  EXPECT_EQ(shown("a\r\nb\rc\n"), "\"a\nb\nc\" EOF");
}

TEST(JinjaLexer, ErrorsHaveLineAndColumn) {
  EXPECT_EQ(shown("ab\n {{ x @ }}"), "error: template line 2, column 7: unexpected character '@'");
  EXPECT_EQ(shown("{{ (] }}"), "error: template line 1, column 5: unexpected ']', expected ')'");
  EXPECT_EQ(shown("\n\n{% if"), "error: template line 3, column 1: unclosed '{%' tag");
}

}  // namespace
}  // namespace strata::jinja
