// How the server turns chat messages into a prompt, as llama-server does: the template
// ChatTemplate::for_model chooses from --jinja / --chat-template / --chat-template-file (the
// model's own by default, ChatML when it has none), rendered with the variables llama-server
// gives it: bos_token, eos_token, enable_thinking (true unless thinking is off), datetime and
// date_string (today), --chat-template-kwargs, then the request's chat_template_kwargs. The
// messages are shaped for the template first, as llama-server does: null content becomes "",
// text parts are joined where the template reads only strings, a developer message is a system
// one, and a system message goes into the next message where the template has no system role.
// A leading BOS text is dropped when the vocabulary adds BOS itself (a trailing EOS likewise),
// so that what /apply-template answers is llama-server's prompt.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "jinja/value.h"
#include "model/chat_template.h"
#include "model/model.h"

namespace strata::server {

using ChatTurn = ChatMessage;

class ChatFormatter {
 public:
  // `kwargs`: template variables under every request's (enable_thinking, --chat-template-kwargs).
  // `add_bos` / `add_eos`: the vocabulary adds BOS / EOS when it tokenizes a prompt.
  ChatFormatter(ChatTemplate tmpl, jinja::Dict kwargs, bool add_bos, bool add_eos);
  explicit ChatFormatter(ChatTemplate tmpl) : ChatFormatter(std::move(tmpl), {}, false, false) {}

  // "jinja", or the named family ("chatml", "llama3"...).
  std::string name() const { return tmpl_.name(); }
  // The Jinja source in use ("" for a named family) and what it can render.
  const std::string& source() const { return tmpl_.source(); }
  const ChatCaps& caps() const { return caps_; }

  // The prompt text of a conversation (what /apply-template answers). The server's kwargs go
  // under in.kwargs (the request's chat_template_kwargs win). A conversation the template
  // refuses (raise_exception) or cannot express is an error for the request.
  Result<std::string> render(const ChatInputs& in) const;
  // Plain turns, ending with the opening of the assistant's turn.
  Result<std::string> render(const std::vector<ChatTurn>& turns) const;
  // Ids of a rendered prompt, with exactly one BOS where the vocabulary uses one.
  std::vector<int32_t> tokenize(const std::string& rendered, const Tokenizer& tok) const {
    return tmpl_.tokenize(tok, rendered);
  }
  Result<std::vector<int32_t>> prompt(const std::vector<ChatTurn>& turns,
                                      const Tokenizer& tok) const;
  // End-of-turn texts, added to a chat request's stop strings.
  std::vector<std::string> stop_strings() const { return tmpl_.stop_strings(); }

 private:
  ChatTemplate tmpl_;
  ChatCaps caps_;
  jinja::Dict kwargs_;
  bool add_bos_;
  bool add_eos_;
};

// How the server was told to format chats (--chat-template[-file], --jinja,
// --chat-template-kwargs, and whether thinking is on).
struct ChatTemplateChoice {
  std::string name_or_text;  // a family name or a template's text; "": the model's own template
  bool jinja = true;
  std::string kwargs_json = "{}";  // extra template variables, a JSON object
  bool enable_thinking = true;     // false: --reasoning off or --reasoning-budget 0
};

Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          const ChatTemplateChoice& choice);
inline Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                                 std::string_view override_name) {
  return chat_formatter_for(model, ChatTemplateChoice{std::string(override_name)});
}

}  // namespace strata::server
