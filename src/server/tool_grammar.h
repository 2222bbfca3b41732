// The grammar that makes a chat model call its tools: for tool_choice "required" or a named
// function, generation is constrained (engine/grammar.h) to calls of the request's tools, in
// the syntax of the model's tool-call format, with each tool's arguments valid under its
// `parameters` schema (server/json_schema_grammar.h). So a reply the client demanded to be a
// call always parses as one (server/reply_parse.h), instead of being whatever text the model
// chose. For tool_choice "auto" the same grammar is lazy (engine/grammar.h, GrammarTrigger): the
// reply is free text until the format's call opening, and from there on calls.
//
// Goal: every sentence of the grammar is read back by parse_reply as calls of the tools, and
// nothing else. Non-goals: the formats whose markers are control tokens (Mistral's
// [TOOL_CALLS], DeepSeek R1's, gpt-oss's harmony): a grammar allows only tokens that print text,
// so there they stay unconstrained, as before; and Functionary v3.2 under "auto" (its calls have
// no opening word: a reply is "all\n" text or "name\n" arguments).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engine/grammar.h"
#include "server/reply_parse.h"

namespace strata::server {

struct ToolGrammarOptions {
  ToolCallFormat format = ToolCallFormat::kNone;
  // One call or more; false: exactly one (the request's parallel_tool_calls).
  bool parallel = true;
  // The prompt ended inside <think>: reasoning text and "</think>" come before the calls.
  bool thinking_forced_open = false;
  // The chat template knows <think>: an optional "<think>...</think>" block before the calls.
  bool may_think = false;
  // For a lazy grammar: the sentences start at the call opening (the trigger word), with no
  // reasoning before them (the trigger skips it).
  bool lazy = false;
};

// GBNF rules (root `root`) whose sentences are calls of `tools` (ChatRequest::tools: {"type":
// "function", "function": {"name", "parameters"}} each) in o.format's syntax, or nullopt when
// that format has no grammar here (above). A tool whose `parameters` the schema converter cannot
// honour takes any JSON object as its arguments: the call still parses, and the client's own
// validation sees what the model wrote. (Tools whose grammar passes the grammar engine's limits
// stay unconstrained: the server does not fail a request that works without one.)
std::optional<std::string> tool_call_grammar(const nlohmann::ordered_json& tools,
                                             const ToolGrammarOptions& o);

// The trigger of o.format's lazy grammar (tool_choice auto): its call opening, found after any
// reasoning block; nullopt where the format has no lazy grammar here.
std::optional<GrammarTrigger> tool_call_trigger(const ToolGrammarOptions& o);

// GBNF rules named `name`, `name`-1, ...: any text that does not contain `end`, then `end`
// (the states of the string matcher of `end` as rules, so that a long text costs no depth).
std::string gbnf_text_until(std::string_view name, std::string_view end);

}  // namespace strata::server
