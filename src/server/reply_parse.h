// What a chat model generated, as an OpenAI assistant message: content, reasoning (the
// <think>...</think> part, or gpt-oss's analysis channel) and tool calls, in the formats the common
// model families write them. The format is recognised once from the chat template's text (as
// llama.cpp does), the reasoning handling comes from --reasoning-format / the request.
//
// Streaming: parse_reply(text, ..., partial = true) holds back what cannot be decided yet (the
// start of a marker, an unfinished call), so the content and reasoning of every partial parse
// are prefixes of the final ones and a complete tool call never changes once seen: ReplyStream
// turns successive parses into OpenAI deltas by difference. A tool call is sent whole (id,
// name and arguments in one delta) when its closing marker or the end of its JSON arrives.
//
// Constraining generation to the tools is server/tool_grammar.h's (for tool_choice required).
// Non-goals: the Python-tag built-in tools of Llama 3.1 (their text stays content).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::server {

enum class ToolCallFormat : uint8_t {
  kNone,            // tool calls are not parsed: everything is content
  kLlama3,          // {"name": ..., "parameters": {...}} at the start (Llama 3.1-3.3)
  kHermes,          // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen 2.5/3)
  kMistral,         // [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}] (Mistral, Nemo)
  kFunctionaryV32,  // >>>name\n{args} ... , >>>all\ntext (Functionary v3.2)
  kFunctionaryV31,  // <function=name>{args}</function> (Functionary v3.1 on Llama 3.1)
  kDeepSeekR1,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name ... (R1)
  // OpenAI's harmony (gpt-oss): <|channel|>analysis<|message|>...<|end|>, then
  // <|start|>assistant<|channel|>final<|message|>...<|return|> or a message to=functions.NAME.
  // Its channels are parsed with or without tools.
  kGptOss,
};

std::string_view tool_call_format_name(ToolCallFormat f);
// The format whose syntax the chat template writes for tool calls; kHermes when the template
// mentions tools but in none of the known syntaxes (the generic <tool_call> form is what
// instruction-tuned models without their own syntax most often produce), kNone when it does not
// mention tools at all.
ToolCallFormat tool_call_format_detect(std::string_view chat_template);

enum class ReasoningFormat : uint8_t {
  kNone,            // <think> text (gpt-oss: the analysis message, raw) stays in the content
  kDeepseek,        // moved to reasoning_content
  kDeepseekLegacy,  // copied to reasoning_content and kept in the content, raw
  kAuto,            // as kDeepseek
};
// --reasoning-format / "reasoning_format": none, deepseek, deepseek-legacy, auto.
Result<ReasoningFormat> reasoning_format_from_name(std::string_view name);

struct ToolCall {
  std::string id;  // from the model where its format carries one (Mistral), else empty
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedReply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};

struct ReplyParseOptions {
  ToolCallFormat tools = ToolCallFormat::kNone;
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  // The prompt ended inside <think> (DeepSeek R1 and Qwen3 templates open it for the model):
  // the text starts as reasoning without an opening tag.
  bool thinking_forced_open = false;
  // false: only the first tool call is kept (the request's parallel_tool_calls).
  bool parallel_tool_calls = true;
  // Whether tool calls are read: the request has tools and did not turn parsing off. false
  // leaves the call syntax in the content; gpt-oss's channels are still separated.
  bool parse_tool_calls = true;
};

// `text` is what the model generated (stop strings removed). With `partial`, the text may end
// anywhere; see the header comment.
ParsedReply parse_reply(std::string_view text, const ReplyParseOptions& o, bool partial);

// One streaming update: text to append to content and reasoning, and tool calls that are new.
struct ReplyDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  size_t first_tool_index = 0;  // index (in the message) of tool_calls[0]
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class ReplyStream {
 public:
  // Tool calls without an id get `id_prefix` + their index: ids that are the same for the same
  // request, whatever else the server does.
  ReplyStream(ReplyParseOptions o, std::string id_prefix);
  // The whole text generated so far; `final` when generation has ended.
  ReplyDelta update(std::string_view text, bool final);
  // Everything sent so far: the final message once update(..., true) has run.
  const ParsedReply& sent() const { return sent_; }

 private:
  ReplyParseOptions o_;
  std::string id_prefix_;
  ParsedReply sent_;
};

// Fills empty ids with prefix + index, as ReplyStream does.
void tool_call_ids_fill(std::vector<ToolCall>& calls, std::string_view prefix);

}  // namespace strata::server
