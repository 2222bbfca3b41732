// OpenAI's Responses API (/v1/responses) on top of the chat completions path, as llama-server
// serves it: the request becomes a chat completions body, and the chat completion (or its
// chunks) becomes a response object (or its stream of typed events).
//
// Pure JSON transforms, as compat_anthropic.h. Non-goals: stored responses
// (previous_response_id, GET /v1/responses/{id}), built-in tools (web search, file search),
// images and files in the input (a 400 naming the part type).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/compat_anthropic.h"

namespace strata::server {

// The chat completions body for a Responses request, or the message of a 400.
std::optional<std::string> responses_to_chat(const nlohmann::ordered_json& body,
                                             nlohmann::ordered_json& chat);

// A response object from a (non-streamed) chat.completion with one choice; `created` seconds.
nlohmann::ordered_json chat_to_response(const nlohmann::ordered_json& completion,
                                        const std::string& id, int64_t created);

// Chat completion chunks -> Responses stream events (response.created, response.in_progress,
// output items with their content parts and deltas, response.completed), each with its
// sequence_number.
class ResponsesStream {
 public:
  ResponsesStream(std::string id, std::string model, int64_t created);
  std::vector<SseEvent> on_chunk(const nlohmann::ordered_json& chunk);
  std::vector<SseEvent> finish();

 private:
  enum class Item { kNone, kReasoning, kMessage, kFunctionCall };
  SseEvent event(const std::string& type, nlohmann::ordered_json fields);
  nlohmann::ordered_json response_object(const std::string& status) const;
  void open(Item kind, nlohmann::ordered_json item, std::vector<SseEvent>& out);
  void close(std::vector<SseEvent>& out);

  std::string id_;
  std::string model_;
  int64_t created_ = 0;
  int64_t sequence_ = 0;
  bool started_ = false;
  Item item_ = Item::kNone;
  nlohmann::ordered_json current_;  // the open output item, as it will be when done
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();  // the items done so far
  int tool_index_ = -1;
  std::string finish_reason_ = "stop";
  nlohmann::ordered_json usage_;
};

}  // namespace strata::server
