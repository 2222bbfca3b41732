// JSON Schema -> GBNF: the grammar behind OpenAI "structured outputs" (response_format
// json_schema) and llama-server's json_schema field.
//
// Goal: a grammar whose sentences are JSON texts valid under the schema, for the subset that
// pydantic and zod emit. Where the grammar cannot say exactly what the schema says it is
// stricter, never looser: it fixes the property order (required ones first, then optional ones,
// each in the schema's order), limits whitespace and number digits, and allows no extra
// properties when `properties` is given without `additionalProperties` (as llama.cpp does).
// A keyword it cannot honour is refused with its JSON pointer, never silently ignored.
// `pattern` is translated for the ECMA-262 subset PatternConverter (json_schema_grammar.cc) lists.
// Non-goals: bounds on non-integer numbers, `not`, `if`/`then`/`else`, remote refs, lookaround
// and backreferences in patterns.
//
// Whitespace: after every token, nothing, one space, or one or two newlines followed by up to
// 20 spaces or tabs (llama.cpp's choice): room to pretty-print, not to ramble.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::server {

// GBNF rules (root rule `root`) whose sentences are the JSON texts valid under `schema`, for the
// subset above; anything else in the schema is refused with an error naming the keyword and its
// JSON pointer (e.g. "schema/properties/age: 'pattern' is not supported"). The schema is
// untrusted (an HTTP body): depth, size and $ref cycles are bounded.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// Several schemas in one grammar, sharing the primitive rules: schema i's sentences are those of
// rule names[i] (named after wanted[i], made unique), and each schema's $refs point into itself.
// No `root` rule: the caller writes one around them (tool calls, server/tool_grammar.h).
Result<std::string> json_schemas_to_gbnf(const std::vector<const nlohmann::ordered_json*>& schemas,
                                         const std::vector<std::string>& wanted,
                                         std::vector<std::string>& names);

// A GBNF literal matching exactly the bytes of `text`.
std::string gbnf_quoted(std::string_view text);
// A byte as \xHH, which GBNF reads in literals and character classes alike.
std::string gbnf_hex_byte(unsigned char c);

}  // namespace strata::server
