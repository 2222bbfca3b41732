// JSON text for Values: writing exactly as Python's json.dumps does (what `tojson` is in chat
// templates rendered by transformers), and reading JSON text into Values.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "jinja/value.h"

namespace strata::jinja {

// json.dumps' arguments as transformers' tojson filter passes them: ensure_ascii=False, no
// indent, default separators, insertion order.
struct JsonFormat {
  bool ensure_ascii = false;  // true: every non-ASCII character as \uXXXX
  bool indent = false;        // pretty-print, one item per line, `indent_text` per level
  std::string indent_text;
  // Python's default separators are ", " and ": " without indent, "," and ": " with one.
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Appends the JSON of `v` to `out`. Tuples and lists are arrays; dict keys that are numbers,
// booleans or None become strings as Python writes them. Undefined, callables, generators and
// objects are an error ("Object of type X is not JSON serializable"), as in Python.
Status dump_json(const Value& v, const JsonFormat& format, std::string& out);

// Reads one JSON document (RFC 8259; surrounding whitespace allowed). Objects keep their key
// order; integers that fit int64 are ints, other numbers floats. Nesting deeper than `max_depth`
// is an error, so that a hostile document cannot exhaust the stack.
Result<Value> parse_json(std::string_view text, int max_depth);

}  // namespace strata::jinja
