// Chat templates: turn a conversation into the prompt text a chat model was trained on.
//
// One interface, ChatRenderer, with two implementations:
// - the Jinja engine (src/jinja) rendering the model's own `tokenizer.chat_template` (or a
//   template from a file) byte for byte as Python's jinja2 does in transformers and
//   llama-server: any model, tools, tool calls, reasoning, template options (chat_template_kwargs);
// - the named families (chat_template_named.h): hand-written renderers of 14 common formats,
//   recognised from the template's text or chosen by name (`--chat-template NAME`).
// ChatTemplate is the handle the server keeps: cheap to copy, immutable, shared by all threads.
//
// A conversation is a jinja::Value, as OpenAI's chat API spells it: a list of messages, each a
// dict with "role" (system, user, assistant, tool), "content" (a string, a list of
// {"type": "text", "text": ...} parts, or null) and optionally "tool_calls" (a list of
// {"id", "type": "function", "function": {"name", "arguments"}}), "reasoning_content", "name",
// "tool_call_id". The template reads exactly that structure.
//
// BOS: a render returns what the template writes, so templates that write {{ bos_token }}
// start with the BOS text. Turn the text into ids with tokenize(): it drops that leading BOS
// text when the vocabulary adds a BOS itself and then encodes with add_special = true,
// parse_special = true, so the prompt starts with exactly one BOS whether or not the template
// wrote it (as llama-server does).
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "jinja/limits.h"
#include "jinja/value.h"

namespace strata {

class GgufFile;
class Tokenizer;

// A message with a role and plain text: what the server builds today.
struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// What a template renders, with the variables llama-server gives a template.
struct ChatInputs {
  jinja::Value messages;  // a list of message dicts (see above)
  // A list of {"type": "function", "function": {"name", "description", "parameters"}}.
  // Undefined (the default): `tools` is not defined in the template, as llama-server leaves
  // it when a request has none.
  jinja::Value tools;
  bool add_generation_prompt = true;
  // More template variables, set last (they override the ones above): chat_template_kwargs
  // such as {"enable_thinking": false}.
  jinja::Dict kwargs;
  // The local date and time strftime_now() formats (Llama 3.2 writes today's date); unset:
  // the clock's. Tests fix it.
  std::optional<std::tm> now;
  // Arguments of tool calls that are a string of JSON become the object it holds when the
  // template needs objects (ChatCaps::requires_object_arguments), as llama-server does.
  bool polyfill_object_arguments = true;
};

// The messages as dicts {"role", "content"}.
jinja::Value chat_messages(const std::vector<ChatMessage>& messages);

// What a template can render, found by rendering probe conversations at load (as llama-server
// does): the server uses them to shape a request's messages and reports them in /props.
struct ChatCaps {
  bool supports_string_content = true;  // content as a string
  bool supports_typed_content = false;  // content as a list of {"type": "text", "text"} parts
  bool supports_system_role = false;
  bool supports_tools = false;
  bool supports_tool_calls = false;
  bool supports_tool_responses = false;
  bool supports_parallel_tool_calls = false;
  bool supports_tool_call_id = false;
  bool supports_preserve_reasoning = false;  // reasoning_content of past answers is written
  bool requires_object_arguments = false;    // tool_call.arguments | tojson (Llama 3.1)
  bool requires_non_null_content = false;
};

// Each capability by the name /props reports it under (llama-server's names, then ours).
struct ChatCapField {
  const char* name;
  bool ChatCaps::*field;
};
extern const ChatCapField kChatCapFields[11];

// The interface of the two implementations. Immutable once built.
class ChatRenderer {
 public:
  virtual ~ChatRenderer() = default;
  // "chatml", "llama3.1"... for a named family; "jinja" for a Jinja template.
  virtual std::string name() const = 0;
  virtual Result<std::string> render(const ChatInputs& in) const = 0;
  // End-of-turn texts: generation also stops where one appears in the output.
  virtual std::vector<std::string> stop_strings() const = 0;
  virtual ChatCaps caps() const = 0;
  // The Jinja source; empty for a named family.
  virtual const std::string& source() const = 0;
};

// How to choose a model's template, as llama-server's flags do.
struct ChatTemplateOptions {
  bool jinja = true;         // --jinja (llama-server's default) / --no-jinja
  std::string template_arg;  // --chat-template: a family name, or (with jinja) Jinja text
  std::string file;          // --chat-template-file: Jinja text in a file
  jinja::Limits limits;
};

class ChatTemplate {
 public:
  // ---- named families

  // Recognises the family of a Jinja template (or a bare name, as llama.cpp accepts). `bos`
  // and `eos` are the texts of the vocabulary's BOS / EOS tokens ("" when it has none). An
  // unknown template is an error that names the way out: pass --chat-template NAME.
  static Result<ChatTemplate> from_text(std::string_view jinja, std::string_view bos,
                                        std::string_view eos);
  // By name: one of names(), e.g. "chatml", "llama3", "llama3.1", "mistral-v3-tekken".
  static Result<ChatTemplate> from_name(std::string_view name, std::string_view bos,
                                        std::string_view eos);
  // The named family of the model: `override_name` when not empty, else the family of
  // tokenizer.chat_template (absent: an error that says to pass --chat-template).
  static Result<ChatTemplate> from_model(const GgufFile& file, const Tokenizer& tok,
                                         std::string_view override_name);
  // Every name from_name() accepts, for help and error texts.
  static std::vector<std::string> names();

  // ---- Jinja

  // A Jinja template; syntax errors name the line and column.
  static Result<ChatTemplate> from_jinja(std::string_view source, std::string_view bos,
                                         std::string_view eos, const jinja::Limits& limits = {});
  // The model's template as llama-server picks it. With `jinja`: the file, else a
  // --chat-template that is a family name (that family), else --chat-template as Jinja text,
  // else tokenizer.chat_template, else ChatML (as Jinja). Without: the family that the file,
  // --chat-template (a name or a template's text) or else the model's template is, and ChatML
  // when the model's template is none of them.
  static Result<ChatTemplate> for_model(const GgufFile& file, const Tokenizer& tok,
                                        const ChatTemplateOptions& options);

  // ---- rendering

  std::string name() const { return impl_->name(); }
  bool is_jinja() const { return !impl_->source().empty(); }
  const std::string& source() const { return impl_->source(); }
  ChatCaps caps() const { return impl_->caps(); }
  const std::string& bos() const { return bos_; }
  const std::string& eos() const { return eos_; }

  Result<std::string> apply(const ChatInputs& in) const { return impl_->render(in); }

  // The prompt for plain `messages`; with add_generation_prompt it ends with the opening of an
  // assistant turn. Errors: empty conversation, a role the template cannot express, roles that
  // do not alternate where the template requires it (Gemma, Llama 2, Mistral).
  Result<std::string> render(const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt) const;

  // Ids of a rendered prompt, with exactly one BOS where the vocabulary uses one.
  std::vector<int32_t> tokenize(const Tokenizer& tok, std::string_view rendered) const;

  std::vector<std::string> stop_strings() const { return impl_->stop_strings(); }

 private:
  ChatTemplate(std::shared_ptr<const ChatRenderer> impl, std::string_view bos, std::string_view eos)
      : impl_(std::move(impl)), bos_(bos), eos_(eos) {}

  std::shared_ptr<const ChatRenderer> impl_;
  std::string bos_;
  std::string eos_;
};

}  // namespace strata
