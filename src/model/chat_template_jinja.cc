#include "model/chat_template_jinja.h"

#include <ctime>

#include "jinja/json.h"
#include "model/chat_template_named.h"

namespace strata {
namespace {

using jinja::Dict;
using jinja::Value;

Value dict(std::initializer_list<std::pair<const char*, Value>> items) {
  Dict d;
  for (const auto& [k, v] : items) d.set(Value(k), v);
  return Value(std::move(d));
}

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm out{};
  localtime_r(&t, &out);
  return out;
}

// A copy of `d` with `key` set to `value` (in place when it exists, keeping the key order).
Value with(const Value& d, const char* key, Value value) {
  Dict copy = d.as_dict();
  copy.set(Value(key), std::move(value));
  return Value(std::move(copy));
}

// llama-server's polyfill for templates that write `arguments | tojson`: an OpenAI client sends
// the arguments as a string of JSON, the template wants the object it holds. Strings that are
// not JSON stay strings.
Value with_object_arguments(const Value& messages) {
  std::vector<Value> out;
  for (const Value& m : messages.as_list()) {
    const Value* calls = m.is_dict() ? m.as_dict().find("tool_calls") : nullptr;
    if (calls == nullptr || !calls->is_list()) {
      out.push_back(m);
      continue;
    }
    std::vector<Value> new_calls;
    for (const Value& call : calls->as_list()) {
      const Value* fn = call.is_dict() ? call.as_dict().find("function") : nullptr;
      const Value* args =
          fn != nullptr && fn->is_dict() ? fn->as_dict().find("arguments") : nullptr;
      if (args == nullptr || !args->is_string()) {
        new_calls.push_back(call);
        continue;
      }
      Result<Value> parsed = jinja::parse_json(args->as_string(), 256);
      new_calls.push_back(parsed ? with(call, "function", with(*fn, "arguments", *parsed)) : call);
    }
    out.push_back(with(m, "tool_calls", Value::list(std::move(new_calls))));
  }
  return Value::list(std::move(out));
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// A probe costs far less than a request may: a template that loops forever on a probe delays
// loading by a fraction of a second, not by the full budget of a render.
jinja::Limits probe_limits(const jinja::Limits& limits) {
  jinja::Limits l = limits;
  l.max_work = std::min<int64_t>(l.max_work, 1'000'000);
  l.max_loop_iterations = std::min<int64_t>(l.max_loop_iterations, 100'000);
  return l;
}

}  // namespace

Result<std::shared_ptr<const JinjaChatRenderer>> JinjaChatRenderer::create(
    std::string_view source, std::string_view bos, std::string_view eos,
    const jinja::Limits& limits) {
  Result<jinja::Template> t = jinja::Template::parse(source, limits);
  if (!t) return t.status().with_context("chat template");
  std::shared_ptr<JinjaChatRenderer> r(new JinjaChatRenderer(std::move(*t), source, bos, eos));
  Result<NamedChatRenderer> family = NamedChatRenderer::from_text(source, bos, eos);
  if (family) {
    r->stops_ = family->stop_strings();
  } else if (!eos.empty()) {
    r->stops_ = {std::string(eos)};
  }
  Result<jinja::Template> probing = jinja::Template::parse(source, probe_limits(limits));
  if (probing) r->find_caps(*probing);
  return std::shared_ptr<const JinjaChatRenderer>(std::move(r));
}

Result<std::string> JinjaChatRenderer::render(const ChatInputs& in) const {
  if (!in.messages.is_list()) {
    return invalid_argument("messages: a list of messages is needed, not " +
                            std::string(in.messages.type_name()));
  }
  Dict ctx;
  const bool polyfill = in.polyfill_object_arguments && caps_.requires_object_arguments;
  ctx.set(Value("messages"), polyfill ? with_object_arguments(in.messages) : in.messages);
  ctx.set(Value("add_generation_prompt"), Value(in.add_generation_prompt));
  ctx.set(Value("bos_token"), Value(bos_));
  ctx.set(Value("eos_token"), Value(eos_));
  if (!in.tools.is_undefined()) ctx.set(Value("tools"), in.tools);
  for (const auto& [k, v] : in.kwargs.items()) ctx.set(k, v);
  Result<std::string> out = template_.render(ctx, in.now ? *in.now : local_now());
  if (!out) return out.status().with_context("chat template");
  return out;
}

std::string JinjaChatRenderer::probe(const jinja::Template& t, const Value& messages,
                                     const Value& tools) const {
  Dict ctx;
  ctx.set(Value("messages"), messages);
  ctx.set(Value("add_generation_prompt"), Value(false));
  ctx.set(Value("bos_token"), Value(bos_));
  ctx.set(Value("eos_token"), Value(eos_));
  if (!tools.is_undefined()) ctx.set(Value("tools"), tools);
  Result<std::string> out = t.render(ctx, std::tm{});
  return out ? *out : std::string();
}

// The probes llama-server renders to learn what a template does with each part of a chat.
void JinjaChatRenderer::find_caps(const jinja::Template& t) {
  const std::string user_needle = "<User Needle>";
  const std::string system_needle = "<System Needle>";
  auto text_part = [](const std::string& text) {
    return Value::list({dict({{"type", Value("text")}, {"text", Value(text)}})});
  };
  const Value str_user = dict({{"role", Value("user")}, {"content", Value(user_needle)}});
  const Value typed_user = dict({{"role", Value("user")}, {"content", text_part(user_needle)}});
  caps_.supports_string_content = contains(probe(t, Value::list({str_user}), Value()), user_needle);
  // A template that writes the list of parts as Python prints it has not read them.
  const std::string typed = probe(t, Value::list({typed_user}), Value());
  caps_.supports_typed_content =
      contains(typed, user_needle) && !contains(typed, "'text': '" + user_needle);
  const bool typed_only = !caps_.supports_string_content && caps_.supports_typed_content;
  const Value user = typed_only ? typed_user : str_user;
  const Value system =
      dict({{"role", Value("system")},
            {"content", typed_only ? text_part(system_needle) : Value(system_needle)}});
  caps_.supports_system_role =
      contains(probe(t, Value::list({system, user}), Value()), system_needle);

  // Reasoning of an answer that a later question follows (Qwen3 drops it, others keep it).
  const std::string reasoning_needle = "<Reasoning Needle>";
  const Value thought = dict({{"role", Value("assistant")},
                              {"content", Value("Some answer.")},
                              {"reasoning_content", Value(reasoning_needle)}});
  caps_.supports_preserve_reasoning =
      contains(probe(t, Value::list({user, thought, user}), Value()), reasoning_needle);

  const Value tool =
      dict({{"name", Value("some_tool")},
            {"type", Value("function")},
            {"function",
             dict({{"name", Value("some_tool")},
                   {"description", Value("Some tool.")},
                   {"parameters",
                    dict({{"type", Value("object")},
                          {"properties",
                           dict({{"arg", dict({{"type", Value("string")},
                                               {"description", Value("Some argument.")}})}})},
                          {"required", Value::list({Value("arg")})}})}})}});
  caps_.supports_tools = contains(probe(t, Value::list({user}), Value::list({tool})), "some_tool");

  // An assistant message that only calls tools has null content; a template that cannot take
  // null (Qwen3's `'</think>' in content`) is probed again with "".
  Value call_content = Value::none();
  auto calls_message = [&call_content](std::vector<Value> calls) {
    return dict({{"role", Value("assistant")},
                 {"content", call_content},
                 {"tool_calls", Value::list(std::move(calls))}});
  };
  auto call = [](const char* name, Value arguments) {
    return dict({{"id", Value("call_1___")},
                 {"type", Value("function")},
                 {"function", dict({{"arguments", std::move(arguments)}, {"name", Value(name)}})}});
  };
  const Value args_object = dict({{"argument_needle", Value("print('Hello, World!')")}});
  std::string args_text;
  (void)jinja::dump_json(args_object, jinja::JsonFormat{}, args_text);
  auto renders_arguments = [&](const Value& arguments) {
    const std::string out =
        probe(t, Value::list({user, calls_message({call("ipython", arguments)})}), Value());
    return contains(out, "\"argument_needle\":") || contains(out, "'argument_needle':");
  };
  bool string_args = renders_arguments(Value(args_text));
  bool object_args = renders_arguments(args_object);
  if (!string_args && !object_args) {
    call_content = Value("");
    string_args = renders_arguments(Value(args_text));
    object_args = renders_arguments(args_object);
  }
  caps_.supports_tool_calls = string_args || object_args;
  caps_.requires_object_arguments = !string_args && object_args;

  const Value empty_answer = dict({{"role", Value("assistant")}, {"content", Value("")}});
  const Value null_answer = dict({{"role", Value("assistant")}, {"content", Value::none()}});
  caps_.requires_non_null_content =
      contains(probe(t, Value::list({user, empty_answer}), Value()), user_needle) &&
      !contains(probe(t, Value::list({user, null_answer}), Value()), user_needle);

  if (!caps_.supports_tool_calls) return;
  const Value args = caps_.requires_object_arguments ? args_object : Value(args_text);
  const Value call1 = call("test_tool1", args);
  const Value call2 = call("test_tool2", args);
  const std::string parallel =
      probe(t, Value::list({user, calls_message({call1, call2})}), Value());
  caps_.supports_parallel_tool_calls =
      contains(parallel, "test_tool1") && contains(parallel, "test_tool2");
  const Value response = dict({{"role", Value("tool")},
                               {"name", Value("test_tool1")},
                               {"content", Value("Some response!")},
                               {"tool_call_id", Value("call_911_")}});
  const std::string answered =
      probe(t, Value::list({user, calls_message({call1}), response}), Value());
  caps_.supports_tool_responses = contains(answered, "Some response!");
  caps_.supports_tool_call_id = contains(answered, "call_911_");
}

}  // namespace strata
