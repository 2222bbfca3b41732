#include "server/compat_anthropic.h"

#include <utility>

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

// Text of a content field: a string, or the text blocks of an array joined.
std::optional<std::string> text_of(const Json& content, const std::string& where,
                                   std::string& error) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    error = where + ": must be a string or an array of content blocks";
    return std::nullopt;
  }
  std::string text;
  for (const Json& block : content) {
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
      error = where + ": every block needs a string 'type'";
      return std::nullopt;
    }
    const std::string type = block["type"].get<std::string>();
    if (type != "text") {
      error = where + ": block type '" + type + "' is not supported here";
      return std::nullopt;
    }
    if (!block.contains("text") || !block["text"].is_string()) {
      error = where + ": a text block needs a string 'text'";
      return std::nullopt;
    }
    text += block["text"].get<std::string>();
  }
  return text;
}

// One Anthropic message as OpenAI messages: a user message's tool_result blocks become tool
// messages (before its text, as they answer the previous turn); an assistant's tool_use blocks
// become tool_calls and its thinking blocks reasoning_content.
std::optional<std::string> convert_message(const Json& m, size_t i, Json& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    return where + ": needs a string 'role'";
  }
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant") {
    return where + ".role: '" + role + "' is not user or assistant";
  }
  if (!m.contains("content")) return where + ": needs 'content'";
  const Json& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return std::nullopt;
  }
  if (!content.is_array()) return where + ".content: must be a string or an array";
  std::string text, thinking;
  Json tool_calls = Json::array();
  for (size_t b = 0; b < content.size(); ++b) {
    const Json& block = content[b];
    const std::string bw = where + ".content[" + std::to_string(b) + "]";
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
      return bw + ": needs a string 'type'";
    }
    const std::string type = block["type"].get<std::string>();
    if (type == "text") {
      if (!block.contains("text") || !block["text"].is_string()) return bw + ".text: not a string";
      text += block["text"].get<std::string>();
    } else if (type == "thinking" && role == "assistant") {
      if (block.contains("thinking") && block["thinking"].is_string()) {
        thinking += block["thinking"].get<std::string>();
      }
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;
    } else if (type == "tool_use" && role == "assistant") {
      if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") ||
          !block["name"].is_string()) {
        return bw + ": a tool_use block needs string 'id' and 'name'";
      }
      const Json input = block.value("input", Json::object());
      tool_calls.push_back({{"id", block["id"]},
                            {"type", "function"},
                            {"function", {{"name", block["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
        return bw + ": a tool_result block needs a string 'tool_use_id'";
      }
      std::string error;
      std::optional<std::string> result =
          block.contains("content") ? text_of(block["content"], bw + ".content", error) : "";
      if (!result) return error;
      const std::optional<bool> is_error = request_field<bool>(block, "is_error", false);
      if (!is_error) return bw + ".is_error: not a boolean";
      if (*is_error) *result = "Error: " + *result;
      out.push_back(
          {{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", *result}});
    } else {
      return bw + ": block type '" + type + "' is not supported in a " + role + " message";
    }
  }
  if (role == "user") {
    if (!text.empty()) out.push_back({{"role", "user"}, {"content", text}});
    return std::nullopt;
  }
  Json msg = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
  out.push_back(std::move(msg));
  return std::nullopt;
}

}  // namespace

std::string anthropic_stop_reason(const std::string& finish_reason) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  return "end_turn";
}

std::optional<std::string> anthropic_to_chat(const Json& body, bool require_max_tokens,
                                             Json& chat) {
  if (!body.is_object()) return "the body must be a JSON object";
  chat = Json::object();
  if (body.contains("model")) chat["model"] = body["model"];
  Json messages = Json::array();
  if (body.contains("system")) {
    std::string error;
    std::optional<std::string> system = text_of(body["system"], "system", error);
    if (!system) return error;
    messages.push_back({{"role", "system"}, {"content", *system}});
  }
  if (!body.contains("messages") || !body["messages"].is_array()) {
    return "messages: required, an array";
  }
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    if (std::optional<std::string> e = convert_message(body["messages"][i], i, messages)) return e;
  }
  chat["messages"] = std::move(messages);
  if (body.contains("max_tokens")) {
    if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1) {
      return "max_tokens: must be a positive integer";
    }
    chat["max_tokens"] = body["max_tokens"];
  } else if (require_max_tokens) {
    return "max_tokens: required";
  }
  for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
    if (body.contains(key)) chat[key] = body[key];
  }
  if (body.contains("stop_sequences")) chat["stop"] = body["stop_sequences"];
  if (body.contains("tools")) {
    if (!body["tools"].is_array()) return "tools: must be an array";
    Json tools = Json::array();
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const Json& t = body["tools"][i];
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
        return "tools[" + std::to_string(i) + "]: needs a string 'name'";
      }
      Json fn = {{"name", t["name"]},
                 {"parameters", t.value("input_schema", Json{{"type", "object"}})}};
      if (t.contains("description")) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (body.contains("tool_choice")) {
    const Json& tc = body["tool_choice"];
    const std::string type =
        tc.is_object() ? request_field<std::string>(tc, "type", "").value_or("") : "";
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      chat["tool_choice"] = "none";
    } else if (type == "tool" && tc.contains("name") && tc["name"].is_string()) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    } else {
      return "tool_choice: must be {\"type\": auto | any | none | tool (with a name)}";
    }
    if (auto it = tc.find("disable_parallel_tool_use"); it != tc.end()) {
      if (!it->is_boolean()) return "tool_choice.disable_parallel_tool_use: must be a boolean";
      chat["parallel_tool_calls"] = !it->get<bool>();
    }
  }
  if (body.contains("thinking") && body["thinking"].is_object()) {
    const std::optional<std::string> type =
        request_field<std::string>(body["thinking"], "type", "");
    if (!type) return "thinking.type: not a string";
    const bool enabled = *type == "enabled";
    chat["chat_template_kwargs"] = {{"enable_thinking", enabled}};
  }
  return std::nullopt;
}

Json chat_to_anthropic(const Json& completion) {
  Json content = Json::array();
  std::string finish = "stop";
  if (completion.contains("choices") && !completion["choices"].empty()) {
    const Json& choice = completion["choices"][0];
    finish = choice.value("finish_reason", "stop");
    const Json msg = choice.value("message", Json::object());
    if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string() &&
        !msg["reasoning_content"].get<std::string>().empty()) {
      content.push_back(
          {{"type", "thinking"}, {"thinking", msg["reasoning_content"]}, {"signature", ""}});
    }
    if (msg.contains("content") && msg["content"].is_string() &&
        !msg["content"].get<std::string>().empty()) {
      content.push_back({{"type", "text"}, {"text", msg["content"]}});
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (const Json& call : msg["tool_calls"]) {
        const Json fn = call.value("function", Json::object());
        Json input = Json::parse(fn.value("arguments", "{}"), nullptr, false);
        if (input.is_discarded() || !input.is_object()) input = Json::object();
        content.push_back({{"type", "tool_use"},
                           {"id", call.value("id", "")},
                           {"name", fn.value("name", "")},
                           {"input", std::move(input)}});
      }
    }
  }
  const Json usage = completion.value("usage", Json::object());
  return {{"id", completion.value("id", "msg")},
          {"type", "message"},
          {"role", "assistant"},
          {"model", completion.value("model", "")},
          {"content", std::move(content)},
          {"stop_reason", anthropic_stop_reason(finish)},
          {"stop_sequence", nullptr},
          {"usage",
           {{"input_tokens", usage.value("prompt_tokens", 0)},
            {"output_tokens", usage.value("completion_tokens", 0)}}}};
}

AnthropicStream::AnthropicStream(std::string id, std::string model, int64_t input_tokens)
    : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens) {}

void AnthropicStream::open(Block kind, Json content_block, std::vector<SseEvent>& out) {
  close(out);
  block_ = kind;
  ++index_;
  out.push_back({"content_block_start",
                 {{"type", "content_block_start"},
                  {"index", index_},
                  {"content_block", std::move(content_block)}}});
}

void AnthropicStream::close(std::vector<SseEvent>& out) {
  if (block_ == Block::kNone) return;
  out.push_back({"content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}});
  block_ = Block::kNone;
}

std::vector<SseEvent> AnthropicStream::on_chunk(const Json& chunk) {
  std::vector<SseEvent> out;
  if (!started_) {
    started_ = true;
    out.push_back({"message_start",
                   {{"type", "message_start"},
                    {"message",
                     {{"id", id_},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"model", model_},
                      {"content", Json::array()},
                      {"stop_reason", nullptr},
                      {"stop_sequence", nullptr},
                      {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}}}}});
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    output_tokens_ = chunk["usage"].value("completion_tokens", output_tokens_);
  }
  if (!chunk.contains("choices") || chunk["choices"].empty()) return out;
  const Json& choice = chunk["choices"][0];
  const Json delta = choice.value("delta", Json::object());
  auto text_delta = [&](const char* key, Block kind, const char* block_type,
                        const char* delta_type) {
    if (!delta.contains(key) || !delta[key].is_string()) return;
    const std::string s = delta[key].get<std::string>();
    if (s.empty()) return;
    if (block_ != kind) open(kind, {{"type", block_type}, {block_type, ""}}, out);
    out.push_back({"content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", index_},
                    {"delta", {{"type", delta_type}, {block_type, s}}}}});
  };
  text_delta("reasoning_content", Block::kThinking, "thinking", "thinking_delta");
  text_delta("content", Block::kText, "text", "text_delta");
  if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
    for (const Json& call : delta["tool_calls"]) {
      const int idx = call.value("index", 0);
      const Json fn = call.value("function", Json::object());
      if (block_ != Block::kToolUse || idx != tool_index_) {
        open(Block::kToolUse,
             {{"type", "tool_use"},
              {"id", call.value("id", "")},
              {"name", fn.value("name", "")},
              {"input", Json::object()}},
             out);
        tool_index_ = idx;
      }
      const std::string args = fn.value("arguments", "");
      if (!args.empty()) {
        out.push_back({"content_block_delta",
                       {{"type", "content_block_delta"},
                        {"index", index_},
                        {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}}});
      }
    }
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    stop_reason_ = anthropic_stop_reason(choice["finish_reason"].get<std::string>());
  }
  return out;
}

std::vector<SseEvent> AnthropicStream::finish() {
  std::vector<SseEvent> out;
  if (!started_) out = on_chunk(Json::object());
  close(out);
  out.push_back({"message_delta",
                 {{"type", "message_delta"},
                  {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", nullptr}}},
                  {"usage", {{"output_tokens", output_tokens_}}}}});
  out.push_back({"message_stop", {{"type", "message_stop"}}});
  return out;
}

}  // namespace strata::server
