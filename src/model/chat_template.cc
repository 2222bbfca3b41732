#include "model/chat_template.h"

#include <fstream>
#include <sstream>

#include "model/chat_template_jinja.h"
#include "model/chat_template_named.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

// What llama-server renders when a model has no template: ChatML.
constexpr std::string_view kChatmlJinja =
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

std::string token_text(const Tokenizer& tok, int32_t id) {
  return id >= 0 ? tok.token_text(id) : std::string();
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("--chat-template-file: cannot open '" + path + "'");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

const ChatCapField kChatCapFields[11] = {
    {"supports_string_content", &ChatCaps::supports_string_content},
    {"supports_typed_content", &ChatCaps::supports_typed_content},
    {"supports_tools", &ChatCaps::supports_tools},
    {"supports_tool_calls", &ChatCaps::supports_tool_calls},
    {"supports_parallel_tool_calls", &ChatCaps::supports_parallel_tool_calls},
    {"supports_system_role", &ChatCaps::supports_system_role},
    {"supports_preserve_reasoning", &ChatCaps::supports_preserve_reasoning},
    {"supports_tool_responses", &ChatCaps::supports_tool_responses},
    {"supports_tool_call_id", &ChatCaps::supports_tool_call_id},
    {"requires_object_arguments", &ChatCaps::requires_object_arguments},
    {"requires_non_null_content", &ChatCaps::requires_non_null_content},
};

jinja::Value chat_messages(const std::vector<ChatMessage>& messages) {
  std::vector<jinja::Value> out;
  out.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set(jinja::Value("role"), jinja::Value(m.role));
    d.set(jinja::Value("content"), jinja::Value(m.content));
    out.emplace_back(std::move(d));
  }
  return jinja::Value::list(std::move(out));
}

Result<ChatTemplate> ChatTemplate::from_text(std::string_view jinja, std::string_view bos,
                                             std::string_view eos) {
  STRATA_ASSIGN_OR_RETURN(NamedChatRenderer r, NamedChatRenderer::from_text(jinja, bos, eos));
  return ChatTemplate(std::make_shared<const NamedChatRenderer>(std::move(r)), bos, eos);
}

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name, std::string_view bos,
                                             std::string_view eos) {
  STRATA_ASSIGN_OR_RETURN(NamedChatRenderer r, NamedChatRenderer::from_name(name, bos, eos));
  return ChatTemplate(std::make_shared<const NamedChatRenderer>(std::move(r)), bos, eos);
}

std::vector<std::string> ChatTemplate::names() { return NamedChatRenderer::names(); }

Result<ChatTemplate> ChatTemplate::from_model(const GgufFile& file, const Tokenizer& tok,
                                              std::string_view override_name) {
  const std::string bos = token_text(tok, tok.bos());
  const std::string eos = token_text(tok, tok.eos());
  if (!override_name.empty()) return from_name(override_name, bos, eos);
  if (file.find("tokenizer.chat_template") == nullptr) {
    std::string all;
    for (const std::string& n : names()) all += (all.empty() ? "" : ", ") + n;
    return invalid_argument(
        "the model has no tokenizer.chat_template; pass --chat-template NAME, one of: " + all);
  }
  STRATA_ASSIGN_OR_RETURN(std::string jinja, file.get_string("tokenizer.chat_template"));
  return from_text(jinja, bos, eos);
}

Result<ChatTemplate> ChatTemplate::from_jinja(std::string_view source, std::string_view bos,
                                              std::string_view eos, const jinja::Limits& limits) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const JinjaChatRenderer> r,
                          JinjaChatRenderer::create(source, bos, eos, limits));
  return ChatTemplate(std::move(r), bos, eos);
}

Result<ChatTemplate> ChatTemplate::for_model(const GgufFile& file, const Tokenizer& tok,
                                             const ChatTemplateOptions& options) {
  const std::string bos = token_text(tok, tok.bos());
  const std::string eos = token_text(tok, tok.eos());
  if (!options.jinja) {
    // Named families only: a name, or a template's text recognised as one of them.
    std::string text = options.template_arg;
    if (!options.file.empty()) {
      STRATA_ASSIGN_OR_RETURN(text, read_file(options.file));
    }
    if (!text.empty()) return from_text(text, bos, eos);
    // The model's template when it is one of them, else ChatML (as llama-server falls back).
    Result<ChatTemplate> t = from_model(file, tok, "");
    return t ? t : from_name("chatml", bos, eos);
  }
  if (!options.file.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string text, read_file(options.file));
    return from_jinja(text, bos, eos, options.limits);
  }
  if (!options.template_arg.empty()) {
    // A family name picks that family (rendering the name itself as Jinja would print it).
    for (const std::string& n : names()) {
      if (n == options.template_arg) return from_name(n, bos, eos);
    }
    return from_jinja(options.template_arg, bos, eos, options.limits);
  }
  if (file.find("tokenizer.chat_template") == nullptr) {
    return from_jinja(kChatmlJinja, bos, eos, options.limits);
  }
  STRATA_ASSIGN_OR_RETURN(std::string text, file.get_string("tokenizer.chat_template"));
  return from_jinja(text, bos, eos, options.limits);
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const {
  if (messages.empty()) return invalid_argument("messages: empty; a chat needs one message");
  ChatInputs in;
  in.messages = chat_messages(messages);
  in.add_generation_prompt = add_generation_prompt;
  return apply(in);
}

std::vector<int32_t> ChatTemplate::tokenize(const Tokenizer& tok, std::string_view rendered) const {
  if (tok.add_bos() && !bos_.empty() && rendered.starts_with(bos_)) {
    rendered.remove_prefix(bos_.size());
  }
  return tok.encode(rendered, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace strata
