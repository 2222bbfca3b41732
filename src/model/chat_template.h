// Chat templates: turn a conversation into the prompt text a chat model was trained on.
//
// Goal: recognise the family of a model's `tokenizer.chat_template` (Jinja) by distinctive
// substrings, as llama.cpp does, and render system/user/assistant conversations exactly as that
// Jinja would, byte for byte. Each family is a small hand-written renderer; comments in
// chat_template.cc say where the real template does more (tools, dates, reasoning) than we do.
// Non-goals: a Jinja interpreter; tool calls and tool results (a "tool" role is an error).
//
// BOS: render() returns what the Jinja would, so templates that write {{ bos_token }} start
// with the BOS text. Turn the text into ids with tokenize(): it drops that leading BOS text when
// the vocabulary adds a BOS itself and then encodes with add_special = true, parse_special =
// true, so the prompt starts with exactly one BOS whether or not the template wrote it (as
// llama.cpp's server does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

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

class ChatTemplate {
 public:
  // Recognises the family of a Jinja template (or a bare name, as llama.cpp accepts). `bos`
  // and `eos` are the texts of the vocabulary's BOS / EOS tokens ("" when it has none). An
  // unknown template is an error that names the way out: pass --chat-template NAME.
  static Result<ChatTemplate> from_text(std::string_view jinja, std::string_view bos,
                                        std::string_view eos);
  // By name: one of names(), e.g. "chatml", "llama3", "llama3.1", "mistral-v3-tekken".
  static Result<ChatTemplate> from_name(std::string_view name, std::string_view bos,
                                        std::string_view eos);
  // The model's template: `override_name` when not empty, else tokenizer.chat_template from
  // the file (absent: an error that says to pass --chat-template). BOS/EOS texts from `tok`.
  static Result<ChatTemplate> from_model(const GgufFile& file, const Tokenizer& tok,
                                         std::string_view override_name);

  // Every name from_name() accepts, for help and error texts.
  static std::vector<std::string> names();

  std::string name() const;
  ChatFamily family() const { return family_; }

  // The prompt for `messages`; with add_generation_prompt it ends with the opening of an
  // assistant turn. Errors: empty conversation, a role the family cannot express, roles that
  // do not alternate where the model's template requires it (Gemma, Llama 2, Mistral).
  Result<std::string> render(const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt) const;

  // Ids of a rendered prompt, with exactly one BOS where the vocabulary uses one.
  std::vector<int32_t> tokenize(const Tokenizer& tok, std::string_view rendered) const;

  // End-of-turn texts: generation should also stop when one of these appears in the output.
  std::vector<std::string> stop_strings() const;

 private:
  ChatTemplate() = default;

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
