// How the server turns chat messages into a prompt. The model's own template (from its GGUF
// metadata) is rendered by the model layer's chat templates; until those are available the
// server formats every model as ChatML, the format most instruction-tuned models accept.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace strata::server {

struct ChatTurn {
  std::string role;
  std::string content;
};

class ChatFormatter {
 public:
  virtual ~ChatFormatter() = default;
  virtual std::string name() const = 0;
  virtual std::string render(const std::vector<ChatTurn>& turns,
                             bool add_generation_prompt) const = 0;
};

// The formatter for `model`; `override_name` (from --chat-template) picks one by name when it
// is not empty. An unknown name is an error that lists the known ones.
Result<std::unique_ptr<ChatFormatter>> chat_formatter_for(const Model& model,
                                                          std::string_view override_name);

}  // namespace strata::server
