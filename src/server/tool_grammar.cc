#include "server/tool_grammar.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "server/json_schema_grammar.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

std::string hex_member(unsigned char c) {
  static const char kDigits[] = "0123456789ABCDEF";
  return std::string("\\x") + kDigits[c >> 4] + kDigits[c & 15];
}

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

// The call of one tool in the format's syntax, as parse_reply reads it back.
std::string call_expr(ToolCallFormat f, const std::string& name, const std::string& args) {
  switch (f) {
    case ToolCallFormat::kHermes:  // the Qwen and Hermes templates' layout
      return "\"<tool_call>\\n\" " + json_call(name, "arguments", args) + " \"\\n</tool_call>\"";
    case ToolCallFormat::kLlama3:
      return json_call(name, "parameters", args);
    case ToolCallFormat::kFunctionaryV31:
      return "\"<function=\" " + gbnf_quoted(name) + " \">\" " + args + " \"</function>\"";
    case ToolCallFormat::kFunctionaryV32:  // the generation prompt ends with ">>>"
      return gbnf_quoted(name) + " \"\\n\" " + args;
    default:
      return "";
  }
}

// What comes between two calls.
std::string call_separator(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kLlama3:
      return "\";\" space";
    case ToolCallFormat::kFunctionaryV32:
      return "\">>>\"";
    default:
      return "space";
  }
}

bool has_grammar(ToolCallFormat f) {
  return f == ToolCallFormat::kHermes || f == ToolCallFormat::kLlama3 ||
         f == ToolCallFormat::kFunctionaryV31 || f == ToolCallFormat::kFunctionaryV32;
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
  for (char c : chars) others += hex_member(static_cast<unsigned char>(c));
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
  GrammarTrigger t;
  t.thinking_forced_open = o.thinking_forced_open;
  t.may_think = o.may_think;
  switch (o.format) {
    case ToolCallFormat::kHermes:
      t.words = {"<tool_call>"};
      return t;
    case ToolCallFormat::kFunctionaryV31:
      t.words = {"<function="};
      return t;
    case ToolCallFormat::kLlama3:  // the reply is calls or text from its first character
      t.words = {"{"};
      t.at_start = true;
      return t;
    default:
      return std::nullopt;
  }
}

std::optional<std::string> tool_call_grammar(const Json& tools, const ToolGrammarOptions& o) {
  if (!has_grammar(o.format) || !tools.is_array() || tools.empty()) return std::nullopt;
  if (o.lazy && !tool_call_trigger(o)) return std::nullopt;
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
    // Each schema on its own first: one the converter refuses becomes any object.
    if (!json_schema_to_gbnf(*params).is_ok()) params = &kAnyObject;
    schemas.push_back(params);
    wanted.push_back("tool-" + std::to_string(schemas.size() - 1) + "-args");
  }
  std::vector<std::string> args;
  Result<std::string> rules = json_schemas_to_gbnf(schemas, wanted, args);
  if (!rules.is_ok()) {  // the schemas together past a limit: any object for each
    schemas.assign(schemas.size(), &kAnyObject);
    rules = json_schemas_to_gbnf(schemas, wanted, args);
    STRATA_CHECK(rules.is_ok(), "tool_call_grammar: plain objects must convert");
  }
  std::string call = "tool-call ::= ";
  for (size_t i = 0; i < names.size(); ++i) {
    call += (i == 0 ? "" : " | ") + call_expr(o.format, names[i], args[i]);
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
  if (o.parallel) root += " ( " + call_separator(o.format) + " tool-call )*";
  std::string out = root + "\n" + call + "\n" + *rules;
  if (think_first || may_think) out += gbnf_text_until("tool-think", "</think>");
  return out;
}

}  // namespace strata::server
