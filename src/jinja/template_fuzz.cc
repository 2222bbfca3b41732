// libFuzzer target: the Jinja lexer, parser and interpreter, on what a GGUF's chat template and a
// request may hold. Input: a template, optionally followed by a NUL and a JSON object whose keys
// become variables (messages, tools...); without one, a small chat with a tool call is the
// context. Any input must end in a rendering or an error, never in a crash, a sanitizer report
// or a hang; an accepted render stays within the output limit and renders the same twice.
// Build and run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "jinja/json.h"
#include "jinja/template.h"

namespace {

// A chat with each kind of message, as the server passes one.
constexpr std::string_view kDefaultContext = R"({
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": "21"},
    {"role": "assistant", "content": "<think>\nok\n</think>\n\nSunny.", "reasoning_content": "r"}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
})";

// Limits far below the defaults: each input must run in milliseconds for the fuzzer to explore,
// and every limit is the same code path at any size.
strata::jinja::Limits fuzz_limits() {
  strata::jinja::Limits l;
  l.max_template_bytes = 64 << 10;
  l.max_loop_iterations = 20'000;
  l.max_work = 200'000;
  l.max_output_bytes = 1 << 20;
  l.max_string_bytes = 1 << 20;
  l.max_list_items = 1 << 14;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::jinja::Value;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view json =
      nul == std::string_view::npos ? kDefaultContext : input.substr(nul + 1);

  static const strata::jinja::Limits limits = fuzz_limits();
  strata::Result<Value> context = strata::jinja::parse_json(json, 64);
  if (!context || !context->is_dict()) return 0;
  strata::Result<strata::jinja::Template> t = strata::jinja::Template::parse(source, limits);
  if (!t) return 0;
  std::tm now{};
  now.tm_year = 124;
  now.tm_mon = 6;
  now.tm_mday = 26;
  strata::Result<std::string> out = t->render(context->as_dict(), now);
  if (!out) return 0;
  if (out->size() > limits.max_output_bytes) __builtin_trap();
  strata::Result<std::string> again = t->render(context->as_dict(), now);
  if (!again || *again != *out) __builtin_trap();
  return 0;
}
