#include "server/compat_responses.h"

#include <utility>

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

// Text of an input message's content: a string, or its input_text / output_text parts joined.
std::optional<std::string> content_text(const Json& content, const std::string& where,
                                        std::string& error) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    error = where + ": must be a string or an array of parts";
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    const std::optional<std::string> type =
        part.is_object() ? request_field<std::string>(part, "type", "") : "";
    if (!type) {
      error = pw + ".type: not a string";
      return std::nullopt;
    }
    if (*type != "input_text" && *type != "output_text" && *type != "text") {
      error = pw + ": part type '" + *type + "' is not supported";
      return std::nullopt;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      error = pw + ".text: not a string";
      return std::nullopt;
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

Json usage_of(const Json& chat_usage) {
  const int64_t in = chat_usage.value("prompt_tokens", 0);
  const int64_t out = chat_usage.value("completion_tokens", 0);
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", 0}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

Json message_item(const std::string& id, const std::string& text, const std::string& status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", Json::array({{{"type", "output_text"},
                                    {"text", text},
                                    {"annotations", Json::array()},
                                    {"logprobs", Json::array()}}})}};
}

Json reasoning_item(const std::string& id, const std::string& text) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", Json::array()},
          {"content", Json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

Json function_item(const std::string& id, const std::string& call_id, const std::string& name,
                   const std::string& arguments, const std::string& status) {
  return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
          {"arguments", arguments},  {"status", status}};
}

// The response object's status fields for a finish_reason.
void set_status(Json& r, const std::string& finish_reason) {
  if (finish_reason == "length") {
    r["status"] = "incomplete";
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  } else {
    r["status"] = "completed";
    r["incomplete_details"] = nullptr;
  }
}

}  // namespace

std::optional<std::string> responses_to_chat(const Json& body, Json& chat) {
  if (!body.is_object()) return "the body must be a JSON object";
  chat = Json::object();
  if (body.contains("model")) chat["model"] = body["model"];
  Json messages = Json::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) return "instructions: must be a string";
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!body.contains("input")) return "input: required";
  const Json& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const Json& item = input[i];
      const std::string where = "input[" + std::to_string(i) + "]";
      if (!item.is_object()) return where + ": must be an object";
      const std::optional<std::string> type_field =
          request_field<std::string>(item, "type", "message");
      if (!type_field) return where + ".type: not a string";
      const std::string& type = *type_field;
      if (type == "message") {
        const std::optional<std::string> role_field = request_field<std::string>(item, "role", "");
        if (!role_field) return where + ".role: not a string";
        const std::string& role = *role_field;
        if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
          return where + ".role: '" + role + "' is not user, assistant, system or developer";
        }
        std::string error;
        std::optional<std::string> text =
            item.contains("content") ? content_text(item["content"], where + ".content", error)
                                     : std::nullopt;
        if (!text) return error.empty() ? where + ": needs 'content'" : error;
        messages.push_back({{"role", role == "developer" ? "system" : role}, {"content", *text}});
      } else if (type == "function_call") {
        if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("name") ||
            !item["name"].is_string()) {
          return where + ": a function_call needs string 'call_id' and 'name'";
        }
        const std::optional<std::string> arguments =
            request_field<std::string>(item, "arguments", "{}");
        if (!arguments) return where + ".arguments: not a string";
        Json call = {{"id", item["call_id"]},
                     {"type", "function"},
                     {"function", {{"name", item["name"]}, {"arguments", *arguments}}}};
        // Consecutive calls belong to one assistant turn.
        if (!messages.empty() && messages.back()["role"] == "assistant" &&
            messages.back().contains("tool_calls")) {
          messages.back()["tool_calls"].push_back(std::move(call));
        } else {
          messages.push_back(
              {{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}});
        }
      } else if (type == "function_call_output") {
        if (!item.contains("call_id") || !item["call_id"].is_string()) {
          return where + ": a function_call_output needs a string 'call_id'";
        }
        const Json& output = item.value("output", Json(""));
        messages.push_back(
            {{"role", "tool"},
             {"tool_call_id", item["call_id"]},
             {"content", output.is_string() ? output.get<std::string>() : output.dump()}});
      } else if (type == "reasoning") {
        continue;  // our own earlier reasoning: the templates drop it from past turns anyway
      } else {
        return where + ".type: '" + type + "' is not supported";
      }
    }
  } else {
    return "input: must be a string or an array of items";
  }
  chat["messages"] = std::move(messages);
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) {
    chat["max_tokens"] = body["max_output_tokens"];
  }
  for (const char* key : {"temperature", "top_p", "stream", "seed"}) {
    if (body.contains(key) && !body[key].is_null()) chat[key] = body[key];
  }
  if (body.contains("tools") && body["tools"].is_array()) {
    Json tools = Json::array();
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const Json& t = body["tools"][i];
      if (!t.is_object() || request_field<std::string>(t, "type", "") != "function" ||
          !t.contains("name") || !t["name"].is_string()) {
        return "tools[" + std::to_string(i) + "]: only function tools with a string 'name'";
      }
      Json fn = {{"name", t["name"]},
                 {"parameters", t.value("parameters", Json{{"type", "object"}})}};
      if (t.contains("description")) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (body.contains("tool_choice")) {
    const Json& tc = body["tool_choice"];
    if (tc.is_string()) {
      chat["tool_choice"] = tc;
    } else if (tc.is_object() && request_field<std::string>(tc, "type", "") == "function" &&
               tc.contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    } else {
      return "tool_choice: must be auto, none, required or {\"type\": \"function\", \"name\"}";
    }
  }
  if (body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>()) {
    chat["stream_options"] = {{"include_usage", true}};
  }
  return std::nullopt;
}

Json chat_to_response(const Json& completion, const std::string& id, int64_t created) {
  Json output = Json::array();
  std::string finish = "stop";
  if (completion.contains("choices") && !completion["choices"].empty()) {
    const Json& choice = completion["choices"][0];
    finish = choice.value("finish_reason", "stop");
    const Json msg = choice.value("message", Json::object());
    const std::string reasoning =
        msg.contains("reasoning_content") && msg["reasoning_content"].is_string()
            ? msg["reasoning_content"].get<std::string>()
            : "";
    if (!reasoning.empty()) output.push_back(reasoning_item("rs_" + id, reasoning));
    const std::string text = msg.contains("content") && msg["content"].is_string()
                                 ? msg["content"].get<std::string>()
                                 : "";
    // An empty message only when there is nothing else to say (as the stream has none either).
    if (!text.empty() || (reasoning.empty() && !msg.contains("tool_calls"))) {
      output.push_back(message_item("msg_" + id, text, "completed"));
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (size_t i = 0; i < msg["tool_calls"].size(); ++i) {
        const Json& call = msg["tool_calls"][i];
        const Json fn = call.value("function", Json::object());
        output.push_back(function_item("fc_" + id + "_" + std::to_string(i), call.value("id", ""),
                                       fn.value("name", ""), fn.value("arguments", "{}"),
                                       "completed"));
      }
    }
  }
  Json r = {{"id", "resp_" + id},
            {"object", "response"},
            {"created_at", created},
            {"model", completion.value("model", "")},
            {"output", std::move(output)},
            {"parallel_tool_calls", true},
            {"tool_choice", "auto"},
            {"tools", Json::array()},
            {"error", nullptr},
            {"usage", usage_of(completion.value("usage", Json::object()))}};
  set_status(r, finish);
  return r;
}

ResponsesStream::ResponsesStream(std::string id, std::string model, int64_t created)
    : id_(std::move(id)), model_(std::move(model)), created_(created) {}

SseEvent ResponsesStream::event(const std::string& type, Json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return {type, std::move(fields)};
}

Json ResponsesStream::response_object(const std::string& status) const {
  Json r = {{"id", "resp_" + id_},
            {"object", "response"},
            {"created_at", created_},
            {"model", model_},
            {"output", output_},
            {"parallel_tool_calls", true},
            {"tool_choice", "auto"},
            {"tools", Json::array()},
            {"error", nullptr},
            {"status", status},
            {"incomplete_details", nullptr}};
  if (!usage_.is_null()) r["usage"] = usage_;
  return r;
}

void ResponsesStream::open(Item kind, Json item, std::vector<SseEvent>& out) {
  close(out);
  item_ = kind;
  current_ = std::move(item);
  const int64_t index = static_cast<int64_t>(output_.size());
  Json added = current_;
  if (kind == Item::kMessage) {
    added["content"] = Json::array();
    added["status"] = "in_progress";
  }
  out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", added}}));
  if (kind == Item::kMessage) {
    out.push_back(
        event("response.content_part.added",
              {{"item_id", current_["id"]},
               {"output_index", index},
               {"content_index", 0},
               {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}}));
  }
}

void ResponsesStream::close(std::vector<SseEvent>& out) {
  if (item_ == Item::kNone) return;
  const int64_t index = static_cast<int64_t>(output_.size());
  if (item_ == Item::kMessage) {
    const Json& part = current_["content"][0];
    out.push_back(event("response.output_text.done", {{"item_id", current_["id"]},
                                                      {"output_index", index},
                                                      {"content_index", 0},
                                                      {"text", part["text"]},
                                                      {"logprobs", Json::array()}}));
    out.push_back(event("response.content_part.done", {{"item_id", current_["id"]},
                                                       {"output_index", index},
                                                       {"content_index", 0},
                                                       {"part", part}}));
  } else if (item_ == Item::kFunctionCall) {
    out.push_back(
        event("response.function_call_arguments.done", {{"item_id", current_["id"]},
                                                        {"output_index", index},
                                                        {"arguments", current_["arguments"]}}));
  }
  if (current_.contains("status")) current_["status"] = "completed";
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", current_}}));
  output_.push_back(std::move(current_));
  current_ = Json();
  item_ = Item::kNone;
}

std::vector<SseEvent> ResponsesStream::on_chunk(const Json& chunk) {
  std::vector<SseEvent> out;
  if (!started_) {
    started_ = true;
    out.push_back(event("response.created", {{"response", response_object("in_progress")}}));
    out.push_back(event("response.in_progress", {{"response", response_object("in_progress")}}));
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = usage_of(chunk["usage"]);
  if (!chunk.contains("choices") || chunk["choices"].empty()) return out;
  const Json& choice = chunk["choices"][0];
  const Json delta = choice.value("delta", Json::object());
  if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
    const std::string s = delta["reasoning_content"].get<std::string>();
    if (!s.empty()) {
      if (item_ != Item::kReasoning) open(Item::kReasoning, reasoning_item("rs_" + id_, ""), out);
      current_["content"][0]["text"] = current_["content"][0]["text"].get<std::string>() + s;
      out.push_back(event("response.reasoning_text.delta", {{"item_id", current_["id"]},
                                                            {"output_index", output_.size()},
                                                            {"content_index", 0},
                                                            {"delta", s}}));
    }
  }
  if (delta.contains("content") && delta["content"].is_string()) {
    const std::string s = delta["content"].get<std::string>();
    if (!s.empty()) {
      if (item_ != Item::kMessage) {
        open(Item::kMessage, message_item("msg_" + id_, "", "in_progress"), out);
      }
      Json& part = current_["content"][0];
      part["text"] = part["text"].get<std::string>() + s;
      out.push_back(event("response.output_text.delta", {{"item_id", current_["id"]},
                                                         {"output_index", output_.size()},
                                                         {"content_index", 0},
                                                         {"delta", s},
                                                         {"logprobs", Json::array()}}));
    }
  }
  if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
    for (const Json& call : delta["tool_calls"]) {
      const int idx = call.value("index", 0);
      const Json fn = call.value("function", Json::object());
      if (item_ != Item::kFunctionCall || idx != tool_index_) {
        open(Item::kFunctionCall,
             function_item("fc_" + id_ + "_" + std::to_string(idx), call.value("id", ""),
                           fn.value("name", ""), "", "in_progress"),
             out);
        tool_index_ = idx;
      }
      const std::string args = fn.value("arguments", "");
      if (!args.empty()) {
        current_["arguments"] = current_["arguments"].get<std::string>() + args;
        out.push_back(event(
            "response.function_call_arguments.delta",
            {{"item_id", current_["id"]}, {"output_index", output_.size()}, {"delta", args}}));
      }
    }
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    finish_reason_ = choice["finish_reason"].get<std::string>();
  }
  return out;
}

std::vector<SseEvent> ResponsesStream::finish() {
  std::vector<SseEvent> out;
  if (!started_) out = on_chunk(Json::object());
  close(out);
  Json r = response_object("completed");
  set_status(r, finish_reason_);
  const std::string type =
      r["status"] == "incomplete" ? "response.incomplete" : "response.completed";
  out.push_back(event(type, {{"response", std::move(r)}}));
  return out;
}

}  // namespace strata::server
