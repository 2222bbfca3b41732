// What one template may cost. A chat template comes from a GGUF file (or a file a user
// passes) and is rendered on every chat request with data from the request: both are
// untrusted. Without limits a few bytes of template could hang a request thread
// ({% for i in range(10**9) %}), fill memory ({% set s = s ~ s %} in a loop), or overflow the
// stack ((((((...)))))) or a macro that calls itself).
//
// The argument that these bound a render:
// - Parsing is linear in the template size, and its recursion is bounded by kMaxNesting.
// - Evaluation recurses through statements, expressions and macro calls; all of it together
//   stops at max_eval_depth frames (well under a megabyte of stack). Values nest at most
//   max_value_depth deep, which bounds the walks over them (tojson, repr, ==).
// - Every loop iteration, every element a filter visits and every 64 bytes a string operation
//   writes cost one unit of work; max_work units take about a second on one core.
// - No string grows past max_string_bytes and the output past max_output_bytes, and no list
//   past max_list_items, so live memory stays within a small multiple of those.
// Every limit, when hit, is an error that names it; a render never aborts the process.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::jinja {

struct Limits {
  // Real chat templates are 0.5 to 30 KB; the largest known ones stay under 64 KB.
  size_t max_template_bytes = 1 << 20;
  // Nesting of blocks and expressions in the source (a real template nests less than 15);
  // an expression's tree may be 4 times this high (a long a + b + c... chain).
  int max_nesting = 100;
  // Statements, expressions and macro calls being evaluated inside each other.
  int max_eval_depth = 2000;
  // Macro calls in progress: a recursive macro that renders a JSON schema goes one call per
  // schema level.
  int max_call_depth = 64;
  // Lists and dicts inside each other, in data and in what a template builds.
  uint32_t max_value_depth = 256;
  // Iterations of all loops of one render together (a chat has at most thousands of messages).
  int64_t max_loop_iterations = 1'000'000;
  // A chat of a thousand messages with tools costs about a million units.
  int64_t max_work = 50'000'000;
  // A request body is at most a few MB, a prompt of a million tokens a few MB of text.
  size_t max_output_bytes = 32u << 20;
  size_t max_string_bytes = 32u << 20;
  size_t max_list_items = 1u << 20;
};

}  // namespace strata::jinja
