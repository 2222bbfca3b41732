#include "server/tool_grammar.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "server/json_schema_grammar.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

// The quoted JSON string of a tool's name, as a GBNF literal.
std::string json_name_literal(const std::string& name) {
  return gbnf_quoted(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace));
}

// `{"name": NAME, "KEY": ARGS}` with the schema converter's whitespace between the tokens.
std::string json_call(const std::string& name, std::string_view key, const std::string& args) {
  return "\"{\" space \"\\\"name\\\"\" space \":\" space " + json_name_literal(name) +
         " space \",\" space " + gbnf_quoted("\"" + std::string(key) + "\"") +
         " space \":\" space " + args + " \"}\"";
}

// How a format writes its calls, as parse_reply reads them back: `before`, then either
// {"name": NAME, args_key: ARGS} or the name as written, `between` and ARGS; then `after`
// (GBNF, empty for nothing). A format with a grammar here is a row.
struct FormatRow {
  ToolCallFormat format;
  const char* before;
  const char* args_key;  // nullptr: the name is written raw
  const char* between;
  const char* after;
  const char* separator;  // GBNF between two calls
  const char* trigger;    // the opening word of tool_choice auto; nullptr: no lazy grammar
  bool trigger_at_start;  // the word counts only as the reply's first text
};

constexpr FormatRow kFormatRows[] = {
    // The Qwen and Hermes templates' layout.
    {ToolCallFormat::kHermes, "\"<tool_call>\\n\"", "arguments", "", "\"\\n</tool_call>\"", "space",
     "<tool_call>", false},
    // The reply is calls or text from its first character.
    {ToolCallFormat::kLlama3, "", "parameters", "", "", "\";\" space", "{", true},
    {ToolCallFormat::kFunctionaryV31, "\"<function=\"", nullptr, "\">\"", "\"</function>\"",
     "space", "<function=", false},
    // The generation prompt ends with ">>>"; a call has no opening word.
    {ToolCallFormat::kFunctionaryV32, "", nullptr, "\"\\n\"", "", "\">>>\"", nullptr, false},
};

const FormatRow* format_row(ToolCallFormat f) {
  for (const FormatRow& r : kFormatRows) {
    if (r.format == f) return &r;
  }
  return nullptr;
}

std::string call_expr(const FormatRow& f, const std::string& name, const std::string& args) {
  const std::string call = f.args_key != nullptr ? json_call(name, f.args_key, args)
                                                 : gbnf_quoted(name) + " " + f.between + " " + args;
  return std::string(f.before) + " " + call + " " + f.after;
}

}  // namespace

std::string gbnf_text_until(std::string_view name, std::string_view end) {
  STRATA_CHECK(!end.empty() && end.size() <= 64, "gbnf_text_until: an end of 1 to 64 bytes");
  std::string chars;  // the distinct bytes of `end`
  for (char c : end) {
    STRATA_CHECK(static_cast<unsigned char>(c) < 0x80, "gbnf_text_until: an ASCII end");
    if (chars.find(c) == std::string::npos) chars += c;
  }
  // State i: the text so far ends with end[0, i) and nowhere contains `end`. Its next state on c:
  // the longest prefix of `end` that the text plus c ends with.
  const auto next = [&](size_t i, char c) {
    const std::string seen = std::string(end.substr(0, i)) + c;
    for (size_t k = std::min(seen.size(), end.size()); k > 0; --k) {
      if (seen.compare(seen.size() - k, k, end, 0, k) == 0) return k;
    }
    return size_t{0};
  };
  const auto state = [&](size_t i) {
    return i == 0 ? std::string(name) : std::string(name) + "-" + std::to_string(i);
  };
  std::string others = "[^";
  for (char c : chars) others += gbnf_hex_byte(static_cast<unsigned char>(c));
  others += "]";
  std::string out;
  for (size_t i = 0; i < end.size(); ++i) {
    out += state(i) + " ::= ";
    for (char c : chars) {
      const size_t j = next(i, c);
      out += gbnf_quoted(std::string(1, c)) + (j == end.size() ? "" : " " + state(j)) + " | ";
    }
    out += others + " " + state(0) + "\n";
  }
  return out;
}

std::optional<GrammarTrigger> tool_call_trigger(const ToolGrammarOptions& o) {
  const FormatRow* f = format_row(o.format);
  if (f == nullptr || f->trigger == nullptr) return std::nullopt;
  GrammarTrigger t;
  t.words = {f->trigger};
  t.at_start = f->trigger_at_start;
  t.thinking_forced_open = o.thinking_forced_open;
  t.may_think = o.may_think;
  return t;
}

std::optional<std::string> tool_call_grammar(const Json& tools, const ToolGrammarOptions& o) {
  const FormatRow* f = format_row(o.format);
  if (f == nullptr || !tools.is_array() || tools.empty()) return std::nullopt;
  if (o.lazy && f->trigger == nullptr) return std::nullopt;
  static const Json kNoParameters = Json::parse(R"({"type": "object", "properties": {}})");
  static const Json kAnyObject = Json::parse(R"({"type": "object"})");
  std::vector<std::string> names;
  std::vector<const Json*> schemas;
  std::vector<std::string> wanted;
  for (const Json& tool : tools) {
    const Json& fn = tool.at("function");
    names.push_back(fn.at("name").get<std::string>());
    const Json* params = &kNoParameters;
    if (auto it = fn.find("parameters"); it != fn.end() && !it->is_null()) params = &*it;
    schemas.push_back(params);
    wanted.push_back("tool-" + std::to_string(schemas.size() - 1) + "-args");
  }
  std::vector<std::string> args;
  Result<std::string> rules = json_schemas_to_gbnf(schemas, wanted, args);
  if (!rules.is_ok()) {
    // A schema the converter refuses becomes any object (each is tried on its own to find
    // which); if they still do not fit together, every one does.
    for (const Json*& schema : schemas) {
      if (!json_schema_to_gbnf(*schema).is_ok()) schema = &kAnyObject;
    }
    rules = json_schemas_to_gbnf(schemas, wanted, args);
    if (!rules.is_ok()) {
      schemas.assign(schemas.size(), &kAnyObject);
      rules = json_schemas_to_gbnf(schemas, wanted, args);
    }
    STRATA_CHECK(rules.is_ok(), "tool_call_grammar: plain objects must convert");
  }
  std::string call = "tool-call ::= ";
  for (size_t i = 0; i < names.size(); ++i) {
    call += (i == 0 ? "" : " | ") + call_expr(*f, names[i], args[i]);
  }
  std::string root = "root ::= ";
  const bool think_first = !o.lazy && o.thinking_forced_open;
  const bool may_think = !o.lazy && !o.thinking_forced_open && o.may_think;
  if (think_first) {
    root += "tool-think space ";
  } else if (may_think) {
    root += "( \"<think>\" tool-think space )? ";
  }
  root += "tool-call";
  if (o.parallel) root += " ( " + std::string(f->separator) + " tool-call )*";
  std::string out = root + "\n" + call + "\n" + *rules;
  if (think_first || may_think) out += gbnf_text_until("tool-think", "</think>");
  return out;
}

}  // namespace strata::server
