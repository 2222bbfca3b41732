// The Jinja implementation of ChatRenderer: the model's own template, rendered by src/jinja
// with the variables llama-server and transformers give it (messages, tools,
// add_generation_prompt, bos_token, eos_token, the template options) and the functions they
// define (raise_exception, strftime_now).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "jinja/template.h"
#include "model/chat_template.h"

namespace strata {

class JinjaChatRenderer : public ChatRenderer {
 public:
  // Parses `source` and probes what it can render (ChatCaps).
  static Result<std::shared_ptr<const JinjaChatRenderer>> create(std::string_view source,
                                                                 std::string_view bos,
                                                                 std::string_view eos,
                                                                 const jinja::Limits& limits);

  std::string name() const override { return "jinja"; }
  Result<std::string> render(const ChatInputs& in) const override;
  // The family's end-of-turn texts when the template is one of the named families, and EOS.
  std::vector<std::string> stop_strings() const override { return stops_; }
  ChatCaps caps() const override { return caps_; }
  const std::string& source() const override { return source_; }

 private:
  JinjaChatRenderer(jinja::Template t, std::string_view source, std::string_view bos,
                    std::string_view eos)
      : template_(std::move(t)), source_(source), bos_(bos), eos_(eos) {}
  // Renders with `t` (this template under probe limits), without polyfills; "" when the
  // template fails (a probe that does not apply to it).
  std::string probe(const jinja::Template& t, const jinja::Value& messages,
                    const jinja::Value& tools) const;
  void find_caps(const jinja::Template& t);

  jinja::Template template_;
  std::string source_;
  std::string bos_;
  std::string eos_;
  std::vector<std::string> stops_;
  ChatCaps caps_;
};

}  // namespace strata
