// The conversation of a chat request, as OpenAI's chat API spells it, validated: messages of
// every role (system, developer, user, assistant with tool_calls and reasoning_content, tool
// with tool_call_id), the tools a model may call, tool_choice, parallel_tool_calls and the
// request's chat_template_kwargs. It keeps the JSON a template reads (normalised: one spelling
// per field) and, for the named template families, the plain turns.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_format.h"

namespace strata::server {

// Limits of a request's conversation, beside the body size limit: each costs template work.
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxTools = 512;
inline constexpr size_t kMaxToolCallsPerMessage = 128;

enum class ToolChoice {
  kAuto,      // the model may call tools
  kNone,      // tools are not shown to the model and no call is parsed
  kRequired,  // the model should call a tool (not enforced: no constrained decoding)
  kNamed,     // {"type": "function", "function": {"name"}}: only that tool is shown
};

struct ChatRequest {
  // Every message as {"role", "content"} (a string, or null for an assistant turn that only
  // calls tools), plus "tool_calls" ({"id", "type": "function", "function": {"name",
  // "arguments": JSON text}}), "reasoning_content", "tool_call_id" and "name" where given.
  // "developer" is "system"; content given as text parts is joined.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // The plain turns (role and text) for the named families, which render nothing else.
  std::vector<ChatTurn> turns;
  // True when a message carries what only a Jinja template renders (tool calls, tool results).
  bool needs_tools_template = false;
  // {"type": "function", "function": {"name", "description", "parameters"}} each; after
  // tool_choice is applied (empty for none; only the named one for kNamed).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice = ToolChoice::kAuto;
  bool parallel_tool_calls = true;
  // Whether the prompt ends with the opening of the assistant's turn (llama-server reads it
  // from a request too).
  bool add_generation_prompt = true;
  // parse_tool_calls (llama-server's): false leaves tool calls in the text.
  bool parse_tool_calls = true;
  // The request's chat_template_kwargs (an object; merged over the server's), with
  // reasoning_effort: "none" is enable_thinking false, another value is passed on as
  // reasoning_effort (gpt-oss templates read it).
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
};

// Reads and validates `messages`, `tools`, `tool_choice`, `parallel_tool_calls` and
// `chat_template_kwargs` of a chat request body. An error names the field (`messages[3].
// tool_calls[0].function.name`) and what is wrong.
std::optional<std::string> read_chat_request(const nlohmann::ordered_json& body, ChatRequest& out);

}  // namespace strata::server
