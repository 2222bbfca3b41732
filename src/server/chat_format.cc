#include "server/chat_format.h"

namespace strata::server {

Result<std::vector<int32_t>> ChatFormatter::prompt(const std::vector<ChatTurn>& turns,
                                                   const Tokenizer& tok) const {
  STRATA_ASSIGN_OR_RETURN(std::string text, tmpl_.render(turns, true));
  return tmpl_.tokenize(tok, text);
}

Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          std::string_view override_name) {
  Result<ChatTemplate> tmpl =
      ChatTemplate::from_model(model.file(), model.tokenizer(), override_name);
  if (!tmpl && override_name.empty()) {
    tmpl = ChatTemplate::from_model(model.file(), model.tokenizer(), "chatml");
  }
  if (!tmpl) return tmpl.status().with_context("--chat-template");
  return std::make_unique<ChatFormatter>(std::move(*tmpl));
}

}  // namespace strata::server
