// The Jinja parser: tokens to a syntax tree, with jinja2's grammar and operator precedence
// (parser.py): conditional expressions, or, and, not, comparisons and `in`, + -, ~, * / // %,
// **, unary signs, then postfix subscripts and calls, filters and `is` tests.
//
// Statements: if/elif/else, for (targets, `if` filter, else), set (expression, block, tuple
// and namespace targets), macro, call, filter, with, print, break/continue (jinja2's
// loopcontrols) and transformers' generation block. Not supported, a clear error: extends,
// block, include, import, from, autoescape, recursive loops.
//
// Filter and test names are resolved here, as jinja2's compiler does: an unknown one is an
// error, unless it sits inside an if (or a conditional expression), where it is an error only
// when evaluated, so that `{% if x is defined %}{{ x | exotic }}{% endif %}` still loads.
#pragma once

#include <string_view>

#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace strata::jinja {

struct ParseOptions {
  LexOptions lex;
  // Blocks inside blocks and expressions inside expressions, in the source; also the height
  // of an expression's tree (a + b + c + ... is as deep as it is long).
  int max_nesting = 100;
};

// The statements of a normalised source (normalize_source). Errors give line and column.
Result<Body> parse(std::string_view source, const ParseOptions& options);

}  // namespace strata::jinja
