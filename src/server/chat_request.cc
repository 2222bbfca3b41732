#include "server/chat_request.h"

#include <string_view>

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;
using Error = std::optional<std::string>;

// A string field: absent or null leaves `out` alone.
Error read_string(const Json& obj, const char* key, const std::string& where, std::string& out,
                  bool required = false) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return where + "." + key + ": is required";
    return std::nullopt;
  }
  if (!it->is_string()) return where + "." + key + ": must be a string";
  out = it->get<std::string>();
  return std::nullopt;
}

// Content as a string (null when absent or null): text parts are joined; other parts (images,
// audio) are refused, as this server takes text only.
Error read_content(const Json& m, const std::string& where, Json& out) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    out = nullptr;
    return std::nullopt;
  }
  if (it->is_string()) {
    out = *it;
    return std::nullopt;
  }
  if (!it->is_array()) return where + ".content: must be a string or an array of text parts";
  std::string text;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& part = (*it)[i];
    const std::string pw = where + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) return pw + ": must be an object";
    std::string type;
    if (Error e = read_string(part, "type", pw, type, true)) return e;
    if (type != "text" && type != "input_text") {
      return pw + ": part type '" + type + "' is not supported (text only: no multimodal input)";
    }
    std::string t;
    if (Error e = read_string(part, "text", pw, t, true)) return e;
    text += t;
  }
  out = std::move(text);
  return std::nullopt;
}

Error read_tool_calls(const Json& calls, const std::string& where, Json& out) {
  if (!calls.is_array()) return where + ": must be an array";
  if (calls.size() > kMaxToolCallsPerMessage) {
    return where + ": has " + std::to_string(calls.size()) + " calls; the limit is " +
           std::to_string(kMaxToolCallsPerMessage);
  }
  out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string cw = where + "[" + std::to_string(i) + "]";
    if (!c.is_object()) return cw + ": must be an object";
    std::string type = "function";
    if (Error e = read_string(c, "type", cw, type)) return e;
    if (type != "function") return cw + ".type: must be \"function\"";
    std::string id;
    if (Error e = read_string(c, "id", cw, id)) return e;
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) return cw + ".function: must be an object";
    std::string name;
    if (Error e = read_string(*fn, "name", cw + ".function", name, true)) return e;
    // Arguments are JSON text, as OpenAI sends them; an object is taken as its text.
    std::string arguments = "{}";
    if (auto a = fn->find("arguments"); a != fn->end() && !a->is_null()) {
      if (a->is_string()) {
        arguments = a->get<std::string>();
      } else if (a->is_object()) {
        arguments = a->dump();
      } else {
        return cw + ".function.arguments: must be a string of JSON or an object";
      }
    }
    out.push_back({{"id", id},
                   {"type", "function"},
                   {"function", {{"name", name}, {"arguments", arguments}}}});
  }
  return std::nullopt;
}

Error read_messages(const Json& b, ChatRequest& out) {
  auto it = b.find("messages");
  if (it == b.end() || it->is_null()) return std::string("messages: is required");
  if (!it->is_array() || it->empty()) return std::string("messages: must be a non-empty array");
  if (it->size() > kMaxMessages) {
    return "messages: has " + std::to_string(it->size()) + " entries; the limit is " +
           std::to_string(kMaxMessages);
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return where + ": must be an object";
    std::string role;
    if (Error e = read_string(m, "role", where, role, true)) return e;
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return where + ".role: '" + role + "' is not one of system, developer, user, assistant, tool";
    }
    Json msg = {{"role", role}};
    Json content;
    if (Error e = read_content(m, where, content)) return e;
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (role != "assistant") return where + ".tool_calls: only an assistant message has them";
      Json calls;
      if (Error e = read_tool_calls(*tc, where + ".tool_calls", calls)) return e;
      if (!calls.empty()) {
        msg["tool_calls"] = std::move(calls);
        out.needs_tools_template = true;
      }
    }
    // An assistant turn that only calls tools may have no content; others have text.
    if (content.is_null() && !msg.contains("tool_calls")) content = "";
    msg["content"] = content;
    std::string text;
    if (Error e = read_string(m, "reasoning_content", where, text)) return e;
    if (!text.empty()) msg["reasoning_content"] = text;
    std::string id;
    if (Error e = read_string(m, "tool_call_id", where, id)) return e;
    if (role == "tool") {
      out.needs_tools_template = true;
      msg["tool_call_id"] = id;
    }
    std::string name;
    if (Error e = read_string(m, "name", where, name)) return e;
    if (!name.empty()) msg["name"] = name;
    out.turns.push_back({role, content.is_string() ? content.get<std::string>() : ""});
    out.messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

Error read_tools(const Json& b, ChatRequest& out) {
  auto it = b.find("tools");
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return std::string("tools: must be an array");
  if (it->size() > kMaxTools) {
    return "tools: has " + std::to_string(it->size()) + " entries; the limit is " +
           std::to_string(kMaxTools);
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return where + ": must be an object";
    std::string type;
    if (Error e = read_string(t, "type", where, type, true)) return e;
    if (type != "function") return where + ".type: '" + type + "' is not \"function\"";
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return where + ".function: must be an object";
    Json f = {{"name", ""}};
    std::string name;
    if (Error e = read_string(*fn, "name", where + ".function", name, true)) return e;
    if (name.empty()) return where + ".function.name: is empty";
    f["name"] = name;
    std::string description;
    if (Error e = read_string(*fn, "description", where + ".function", description)) return e;
    if (fn->contains("description")) f["description"] = description;
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) return where + ".function.parameters: must be a JSON schema object";
      f["parameters"] = *p;
    }
    out.tools.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return std::nullopt;
}

Error read_tool_choice(const Json& b, ChatRequest& out) {
  auto it = b.find("tool_choice");
  std::string named;
  if (it != b.end() && !it->is_null()) {
    if (it->is_string()) {
      const std::string c = it->get<std::string>();
      if (c == "auto") {
        out.tool_choice = ToolChoice::kAuto;
      } else if (c == "none") {
        out.tool_choice = ToolChoice::kNone;
      } else if (c == "required") {
        out.tool_choice = ToolChoice::kRequired;
      } else {
        return "tool_choice: '" + c + "' is not one of auto, none, required";
      }
    } else if (it->is_object()) {
      auto fn = it->find("function");
      if (fn == it->end() || !fn->is_object()) {
        return std::string("tool_choice: an object must be {\"type\": \"function\", ") +
               "\"function\": {\"name\": ...}}";
      }
      if (Error e = read_string(*fn, "name", "tool_choice.function", named, true)) return e;
      out.tool_choice = ToolChoice::kNamed;
    } else {
      return std::string("tool_choice: must be a string or an object");
    }
  }
  if (out.tool_choice == ToolChoice::kNone) out.tools = Json::array();
  if (out.tool_choice == ToolChoice::kNamed) {
    Json only = Json::array();
    for (const Json& t : out.tools) {
      if (t["function"]["name"] == named) only.push_back(t);
    }
    if (only.empty()) return "tool_choice: names '" + named + "', which is not among tools";
    out.tools = std::move(only);
  }
  if (out.tool_choice == ToolChoice::kRequired && out.tools.empty()) {
    return std::string("tool_choice: 'required' needs tools");
  }
  if (auto p = b.find("parallel_tool_calls"); p != b.end() && !p->is_null()) {
    if (!p->is_boolean()) return std::string("parallel_tool_calls: must be true or false");
    out.parallel_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> read_chat_request(const Json& body, ChatRequest& out) {
  if (Error e = read_messages(body, out)) return e;
  if (Error e = read_tools(body, out)) return e;
  if (Error e = read_tool_choice(body, out)) return e;
  if (auto a = body.find("add_generation_prompt"); a != body.end() && !a->is_null()) {
    if (!a->is_boolean()) return std::string("add_generation_prompt: must be true or false");
    out.add_generation_prompt = a->get<bool>();
  }
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) return std::string("chat_template_kwargs: must be an object");
    out.template_kwargs = *k;
  }
  if (auto r = body.find("reasoning_effort"); r != body.end() && !r->is_null()) {
    if (!r->is_string()) return std::string("reasoning_effort: must be a string");
    if (*r == "none") {
      out.template_kwargs["enable_thinking"] = false;
    } else if (!out.template_kwargs.contains("reasoning_effort")) {
      out.template_kwargs["reasoning_effort"] = *r;
    }
  }
  if (auto p = body.find("parse_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return std::string("parse_tool_calls: must be true or false");
    out.parse_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

}  // namespace strata::server
