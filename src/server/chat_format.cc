#include "server/chat_format.h"

#include <ctime>

#include "jinja/json.h"
#include "model/tokenizer.h"

namespace strata::server {
namespace {

using jinja::Dict;
using jinja::Value;

// A chat_template_kwargs object nests like a request body; deeper is refused by name.
constexpr int kMaxKwargsDepth = 64;

std::string at(size_t i) { return "messages[" + std::to_string(i) + "]"; }

Status wrong_type(const std::string& where, std::string_view want, const Value& got) {
  return invalid_argument(where + ": " + std::string(want) + " is needed, not " +
                          std::string(got.type_name()));
}

// A message's content as llama-server hands it to a template: a string, or its text parts
// (joined by "\n" where the template reads only strings, kept as parts where it reads only
// parts), "" for null.
Result<Value> shaped_content(const Value* content, const std::string& where, const ChatCaps& caps) {
  const bool only_strings = caps.supports_string_content && !caps.supports_typed_content;
  const bool only_parts = !caps.supports_string_content && caps.supports_typed_content;
  auto as_parts = [](const std::string& text) {
    Dict part;
    part.set(Value("type"), Value("text"));
    part.set(Value("text"), Value(text));
    return Value::list({Value(std::move(part))});
  };
  if (content == nullptr || content->is_none() || content->is_undefined()) {
    return only_parts ? as_parts("") : Value("");
  }
  if (content->is_string()) return only_parts ? as_parts(content->as_string()) : *content;
  if (!content->is_list()) return wrong_type(where, "a string, a list of parts or null", *content);
  std::string joined;
  std::vector<Value> parts;
  for (size_t j = 0; j < content->as_list().size(); ++j) {
    const Value& part = content->as_list()[j];
    const std::string here = where + "[" + std::to_string(j) + "]";
    if (!part.is_dict()) return wrong_type(here, "a content part object", part);
    const Value* type = part.as_dict().find("type");
    const Value* text = part.as_dict().find("text");
    if (type == nullptr || !type->is_string()) return invalid_argument(here + ".type: missing");
    if (type->as_string() != "text") {
      return invalid_argument(here + ".type: '" + type->as_string() +
                              "' is not supported (only text parts)");
    }
    if (text == nullptr || !text->is_string()) {
      return invalid_argument(here + ".text: a string is needed");
    }
    if (!joined.empty()) joined += '\n';
    joined += text->as_string();
    Dict d;
    d.set(Value("type"), Value("text"));
    d.set(Value("text"), *text);
    parts.emplace_back(std::move(d));
  }
  if (only_strings) return Value(joined);
  // An empty list is no content: "" (or one empty part), as for null.
  if (parts.empty()) return only_parts ? as_parts("") : Value("");
  return Value::list(std::move(parts));
}

// A tool call as llama-server passes it on: {"type", "function": {"name", "arguments"}, "id"},
// arguments as a string of JSON (templates that need the object get it back from
// ChatTemplate's polyfill).
Result<Value> shaped_tool_call(const Value& call, const std::string& where) {
  if (!call.is_dict()) return wrong_type(where, "a tool call object", call);
  const Value* type = call.as_dict().find("type");
  if (type == nullptr || !type->is_string() || type->as_string() != "function") {
    return invalid_argument(where + ".type: 'function' is needed");
  }
  const Value* fn = call.as_dict().find("function");
  if (fn == nullptr || !fn->is_dict()) return invalid_argument(where + ".function: missing");
  const Value* name = fn->as_dict().find("name");
  if (name == nullptr || !name->is_string()) {
    return invalid_argument(where + ".function.name: a string is needed");
  }
  const Value* args = fn->as_dict().find("arguments");
  Value arguments("");
  if (args != nullptr && args->is_string()) {
    arguments = *args;
  } else if (args != nullptr && !args->is_undefined()) {
    jinja::JsonFormat compact;
    compact.item_separator = ",";
    compact.key_separator = ":";
    std::string text;
    if (Status s = jinja::dump_json(*args, compact, text); !s) {
      return s.with_context(where + ".function.arguments");
    }
    arguments = Value(text);
  }
  Dict f;
  f.set(Value("name"), *name);
  f.set(Value("arguments"), std::move(arguments));
  Dict out;
  out.set(Value("type"), Value("function"));
  out.set(Value("function"), Value(std::move(f)));
  const Value* id = call.as_dict().find("id");
  if (id != nullptr && id->is_string() && !id->as_string().empty()) out.set(Value("id"), *id);
  return Value(std::move(out));
}

// The messages as llama-server rebuilds them before rendering: role, content, then
// reasoning_content, name, tool_call_id and tool_calls where not empty; nothing else.
Result<Value> shaped_messages(const Value& messages, const ChatCaps& caps,
                              bool developer_is_system) {
  if (!messages.is_list()) return wrong_type("messages", "a list of messages", messages);
  std::vector<Value> out;
  for (size_t i = 0; i < messages.as_list().size(); ++i) {
    const Value& m = messages.as_list()[i];
    if (!m.is_dict()) return wrong_type(at(i), "a message object", m);
    const Dict& d = m.as_dict();
    const Value* role = d.find("role");
    if (role == nullptr || !role->is_string()) {
      return invalid_argument(at(i) + ".role: a string is needed");
    }
    const Value* content = d.find("content");
    const Value* calls = d.find("tool_calls");
    if (content == nullptr && calls == nullptr) {
      return invalid_argument(at(i) + ": 'content' or 'tool_calls' is needed");
    }
    Dict msg;
    msg.set(Value("role"),
            developer_is_system && role->as_string() == "developer" ? Value("system") : *role);
    STRATA_ASSIGN_OR_RETURN(Value c, shaped_content(content, at(i) + ".content", caps));
    msg.set(Value("content"), std::move(c));
    for (const char* key : {"reasoning_content", "name", "tool_call_id"}) {
      const Value* v = d.find(key);
      if (v == nullptr || v->is_none()) continue;
      if (!v->is_string()) return wrong_type(at(i) + "." + key, "a string", *v);
      if (!v->as_string().empty()) msg.set(Value(key), *v);
    }
    if (calls != nullptr && !calls->is_none()) {
      if (!calls->is_list()) return wrong_type(at(i) + ".tool_calls", "a list", *calls);
      std::vector<Value> shaped;
      for (size_t j = 0; j < calls->as_list().size(); ++j) {
        STRATA_ASSIGN_OR_RETURN(Value call,
                                shaped_tool_call(calls->as_list()[j],
                                                 at(i) + ".tool_calls[" + std::to_string(j) + "]"));
        shaped.push_back(std::move(call));
      }
      if (!shaped.empty()) msg.set(Value("tool_calls"), Value::list(std::move(shaped)));
    }
    out.emplace_back(std::move(msg));
  }
  // A template without a system role: the system text goes before the next message's, or is
  // dropped when it is alone.
  if (!caps.supports_system_role && !out.empty()) {
    const Value* role = out.front().as_dict().find("role");
    if (role->as_string() == "system") {
      if (out.size() > 1) {
        const Value* first = out[0].as_dict().find("content");
        const Value* second = out[1].as_dict().find("content");
        if (!first->is_string() || !second->is_string()) {
          return invalid_argument(
              "messages[0]: the template has no system role, and a system message in parts "
              "cannot be merged into the next one");
        }
        Dict merged = out[1].as_dict();
        merged.set(Value("content"), Value(first->as_string() + "\n" + second->as_string()));
        out[1] = Value(std::move(merged));
      }
      out.erase(out.begin());
    }
  }
  return Value::list(std::move(out));
}

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm out{};
  localtime_r(&t, &out);
  return out;
}

std::string format_date(const std::tm& t, const char* format) {
  char buf[64];
  const size_t n = std::strftime(buf, sizeof buf, format, &t);
  return std::string(buf, n);
}

}  // namespace

ChatFormatter::ChatFormatter(ChatTemplate tmpl, jinja::Dict kwargs, bool add_bos, bool add_eos)
    : tmpl_(std::move(tmpl)),
      caps_(tmpl_.caps()),
      kwargs_(std::move(kwargs)),
      add_bos_(add_bos),
      add_eos_(add_eos) {}

Result<std::string> ChatFormatter::render(const ChatInputs& in) const {
  ChatInputs full;
  // GPT-OSS has a developer role of its own; other templates take it as system.
  const bool developer_is_system = tmpl_.source().find("<|channel|>") == std::string::npos;
  STRATA_ASSIGN_OR_RETURN(full.messages, shaped_messages(in.messages, caps_, developer_is_system));
  // An empty list of tools is no tools, as llama-server passes none.
  if (!in.tools.is_undefined() && !in.tools.is_none() &&
      !(in.tools.is_list() && in.tools.as_list().empty())) {
    full.tools = in.tools;
  }
  full.add_generation_prompt = in.add_generation_prompt;
  full.polyfill_object_arguments = in.polyfill_object_arguments;
  full.now = in.now ? *in.now : local_now();
  // llama-server's order: today's date, then the server's kwargs, then the request's.
  full.kwargs.set(Value("datetime"), Value(format_date(*full.now, "%b %d %Y")));
  full.kwargs.set(Value("date_string"), Value(format_date(*full.now, "%d %b %Y")));
  for (const auto& [k, v] : kwargs_.items()) full.kwargs.set(k, v);
  for (const auto& [k, v] : in.kwargs.items()) full.kwargs.set(k, v);

  STRATA_ASSIGN_OR_RETURN(std::string text, tmpl_.apply(full));
  // The tokenizer adds BOS (EOS) itself: a template's own would be a second one.
  const std::string& bos = tmpl_.bos();
  const std::string& eos = tmpl_.eos();
  if (add_bos_ && !bos.empty() && text.starts_with(bos)) text.erase(0, bos.size());
  if (add_eos_ && !eos.empty() && text.ends_with(eos)) text.resize(text.size() - eos.size());
  return text;
}

Result<std::string> ChatFormatter::render(const std::vector<ChatTurn>& turns) const {
  if (turns.empty()) return invalid_argument("messages: empty; a chat needs one message");
  ChatInputs in;
  in.messages = chat_messages(turns);
  in.add_generation_prompt = true;
  return render(in);
}

Result<std::vector<int32_t>> ChatFormatter::prompt(const std::vector<ChatTurn>& turns,
                                                   const Tokenizer& tok) const {
  STRATA_ASSIGN_OR_RETURN(std::string text, render(turns));
  return tmpl_.tokenize(tok, text);
}

Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          const ChatTemplateChoice& choice) {
  Dict kwargs;
  // llama-server always defines enable_thinking: true unless thinking is turned off.
  kwargs.set(Value("enable_thinking"), Value(choice.enable_thinking));
  Result<Value> extra = jinja::parse_json(choice.kwargs_json, kMaxKwargsDepth);
  if (!extra || !extra->is_dict()) {
    return invalid_argument("--chat-template-kwargs: '" + choice.kwargs_json +
                            "' is not a JSON object" +
                            (extra ? std::string() : " (" + extra.status().message() + ")"));
  }
  for (const auto& [k, v] : extra->as_dict().items()) kwargs.set(k, v);

  ChatTemplateOptions options;
  options.jinja = choice.jinja;
  options.template_arg = choice.name_or_text;
  const Tokenizer& tok = model.tokenizer();
  Result<ChatTemplate> tmpl = ChatTemplate::for_model(model.file(), tok, options);
  if (!tmpl) {
    return choice.name_or_text.empty() ? tmpl.status()
                                       : tmpl.status().with_context("--chat-template");
  }
  return std::make_unique<ChatFormatter>(std::move(*tmpl), std::move(kwargs), tok.add_bos(),
                                         tok.add_eos());
}

}  // namespace strata::server
