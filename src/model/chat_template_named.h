// The named chat-template families: hand-written renderers of 14 common formats.
//
// Goal: recognise the family of a model's `tokenizer.chat_template` by distinctive substrings,
// as llama.cpp does, and render system/user/assistant conversations exactly as that Jinja
// would, byte for byte; or render a family chosen by name (--chat-template NAME). Comments in
// chat_template_named.cc say where the real template does more (tools, dates, reasoning).
// Non-goals: tools and tool calls (an error that points to the Jinja template), template
// options such as enable_thinking (ignored).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/chat_template.h"

namespace strata {

enum class ChatFamily : uint8_t {
  kChatml,           // <|im_start|>role\n...<|im_end|>: Qwen 2/2.5/3, Yi, many fine-tunes
  kLlama2,           // [INST] <<SYS>>...<</SYS>> ... [/INST]: Llama 2 chat
  kLlama3,           // <|start_header_id|>role<|end_header_id|>: Llama 3 / 3.1 / 3.2 / 3.3
  kMistralV1,        // [INST] ... [/INST] without <<SYS>>: Mistral 7B v0.1/v0.2, Mixtral
  kMistralV3,        // [INST] ...[/INST], system before the last user turn: Mistral 7B v0.3
  kMistralV3Tekken,  // [INST]...[/INST], no spaces: Mistral Nemo
  kMistralV7,        // [SYSTEM_PROMPT]: Mistral Large 2411, Small 3 (and -tekken)
  kGemma,            // <start_of_turn>user / model: Gemma 1/2/3
  kPhi3,             // <|user|>...<|end|>: Phi-3, Phi-3.5
  kDeepseekR1,       // <｜User｜>...<｜Assistant｜>: DeepSeek V3 / R1 and R1 distills
};

class NamedChatRenderer : public ChatRenderer {
 public:
  // See ChatTemplate::from_text and from_name.
  static Result<NamedChatRenderer> from_text(std::string_view jinja, std::string_view bos,
                                             std::string_view eos);
  static Result<NamedChatRenderer> from_name(std::string_view name, std::string_view bos,
                                             std::string_view eos);
  static std::vector<std::string> names();

  std::string name() const override;
  // Messages with plain text content (a list of text parts is joined); tools, tool calls and
  // the "tool" role are an error.
  Result<std::string> render(const ChatInputs& in) const override;
  std::vector<std::string> stop_strings() const override;
  ChatCaps caps() const override;
  const std::string& source() const override { return kNoSource; }

  ChatFamily family() const { return family_; }
  Result<std::string> render_plain(const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) const;

 private:
  NamedChatRenderer() = default;
  static const std::string kNoSource;

  ChatFamily family_ = ChatFamily::kChatml;
  std::string bos_;
  std::string eos_;
  // Family variants, found in the template text or implied by the name.
  std::string default_system_;    // chatml: system turn written when the chat has none (Qwen2.5)
  bool strip_reasoning_ = false;  // chatml: drop <think>...</think> from past answers (Qwen3)
  bool dated_system_ = false;     // llama3: 3.1+ always writes a system turn with dates
  bool spaced_ = false;           // mistral-v7: "[INST] " and " answer" (not -tekken)
  bool think_prompt_ = false;     // deepseek: generation prompt opens "<think>\n" (R1)
};

}  // namespace strata
