// How the server turns chat messages into a prompt: the model's chat template (or the one
// --chat-template names); ChatML when the model has none and none is named, as llama-server does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/chat_template.h"
#include "model/model.h"

namespace strata::server {

using ChatTurn = ChatMessage;

class ChatFormatter {
 public:
  explicit ChatFormatter(ChatTemplate tmpl) : tmpl_(std::move(tmpl)) {}
  std::string name() const { return tmpl_.name(); }
  // Prompt ids of a conversation, ending with the opening of the assistant's turn. A
  // conversation the template cannot express is an error for the request.
  Result<std::vector<int32_t>> prompt(const std::vector<ChatTurn>& turns,
                                      const Tokenizer& tok) const;
  // The conversation as the template renders it (what /apply-template answers), and its ids.
  Result<std::string> render(const std::vector<ChatTurn>& turns) const {
    return tmpl_.render(turns, true);
  }
  std::vector<int32_t> tokenize(const std::string& rendered, const Tokenizer& tok) const {
    return tmpl_.tokenize(tok, rendered);
  }
  // End-of-turn texts, added to a chat request's stop strings.
  std::vector<std::string> stop_strings() const { return tmpl_.stop_strings(); }

 private:
  ChatTemplate tmpl_;
};

// How the server was told to format chats (--chat-template[-file], --jinja,
// --chat-template-kwargs). This is where the Jinja engine plugs in: a template's text (or, with
// jinja, the model's own template) goes to it; names go to the named families.
struct ChatTemplateChoice {
  std::string name_or_text;  // "": the model's own template
  bool jinja = true;
  std::string kwargs_json = "{}";  // extra template variables, a JSON object
};

Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          const ChatTemplateChoice& choice);
inline Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                                 std::string_view override_name) {
  return chat_formatter_for(model, ChatTemplateChoice{std::string(override_name)});
}

}  // namespace strata::server
