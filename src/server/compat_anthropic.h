// Anthropic's Messages API (/v1/messages) on top of the chat completions path, as llama-server
// serves it: the request is converted into an OpenAI chat completions body, and the chat
// completion (or its stream of chunks) back into an Anthropic message (or its events).
//
// Pure JSON transforms: no model, no server state, so that each direction is tested alone and
// the server handler is a thin composition. Non-goals: images and documents in content (a 400
// that names the block type), prompt caching and citations (their fields are ignored).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::server {

// A field of a request object as T (std::string or bool), or `fallback` when it is absent or
// null; nullopt when it holds another type. (json::value() throws there instead: a request with
// a number where a string belongs must be a 400 naming the field, not an exception.)
template <typename T>
std::optional<T> request_field(const nlohmann::ordered_json& obj, const char* key, T fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return std::nullopt;
  } else {
    if (!it->is_string()) return std::nullopt;
  }
  return it->template get<T>();
}

// One server-sent event: "event: <name>\ndata: <json>\n\n".
struct SseEvent {
  std::string event;
  nlohmann::ordered_json data;
};

// The chat completions body for a Messages request, or the message of a 400 (naming the field).
// `require_max_tokens`: /v1/messages needs max_tokens, /v1/messages/count_tokens does not.
std::optional<std::string> anthropic_to_chat(const nlohmann::ordered_json& body,
                                             bool require_max_tokens, nlohmann::ordered_json& chat);

// An Anthropic message from a (non-streamed) chat.completion body with one choice.
nlohmann::ordered_json chat_to_anthropic(const nlohmann::ordered_json& completion);

// Chat completion chunks -> Anthropic stream events: message_start, then for each content
// block (thinking, text, tool_use) content_block_start, its deltas and content_block_stop, then
// message_delta (stop reason, output tokens) and message_stop.
class AnthropicStream {
 public:
  AnthropicStream(std::string id, std::string model, int64_t input_tokens);
  std::vector<SseEvent> on_chunk(const nlohmann::ordered_json& chunk);
  // After the last chunk: closes the open block and the message.
  std::vector<SseEvent> finish();

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  void open(Block kind, nlohmann::ordered_json content_block, std::vector<SseEvent>& out);
  void close(std::vector<SseEvent>& out);

  std::string id_;
  std::string model_;
  int64_t input_tokens_ = 0;
  int64_t output_tokens_ = 0;
  bool started_ = false;
  Block block_ = Block::kNone;
  int index_ = -1;
  int tool_index_ = -1;  // the chunk's tool call index of the open tool_use block
  std::string stop_reason_ = "end_turn";
};

// OpenAI finish_reason -> Anthropic stop_reason.
std::string anthropic_stop_reason(const std::string& finish_reason);

}  // namespace strata::server
