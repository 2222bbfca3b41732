#include "server/chat_format.h"

namespace strata::server {
namespace {

class ChatMl final : public ChatFormatter {
 public:
  std::string name() const override { return "chatml"; }
  std::string render(const std::vector<ChatTurn>& turns,
                     bool add_generation_prompt) const override {
    std::string out;
    for (const ChatTurn& t : turns)
      out += "<|im_start|>" + t.role + "\n" + t.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
};

}  // namespace

Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          std::string_view override_name) {
  if (!override_name.empty() && override_name != "chatml") {
    return invalid_argument("--chat-template: unknown template '" + std::string(override_name) +
                            "' (known: chatml)");
  }
  return std::unique_ptr<ChatFormatter>(std::make_unique<ChatMl>());
}

}  // namespace strata::server
