#include "server/chat_format.h"

namespace strata::server {

Result<std::vector<int32_t>> ChatFormatter::prompt(const std::vector<ChatTurn>& turns,
                                                   const Tokenizer& tok) const {
  STRATA_ASSIGN_OR_RETURN(std::string text, tmpl_.render(turns, true));
  return tmpl_.tokenize(tok, text);
}

Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          const ChatTemplateChoice& choice) {
  const std::string& override_name = choice.name_or_text;
  // A template's text, not a name: only the Jinja engine can run it.
  if (override_name.find("{%") != std::string::npos ||
      override_name.find("{{") != std::string::npos) {
    if (!choice.jinja) {
      return invalid_argument(
          "--chat-template: a template's text needs --jinja; without it only named formats "
          "are accepted");
    }
    return unsupported(
        "--chat-template / --chat-template-file: Jinja templates are not supported by this "
        "build; name a format instead (see --help)");
  }
  Result<ChatTemplate> tmpl =
      ChatTemplate::from_model(model.file(), model.tokenizer(), override_name);
  if (!tmpl && override_name.empty()) {
    tmpl = ChatTemplate::from_model(model.file(), model.tokenizer(), "chatml");
  }
  if (!tmpl) return tmpl.status().with_context("--chat-template");
  return std::make_unique<ChatFormatter>(std::move(*tmpl));
}

}  // namespace strata::server
