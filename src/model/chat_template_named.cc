#include "model/chat_template_named.h"

#include <algorithm>
#include <array>

namespace strata {
namespace {

struct NamedVariant {
  const char* name;
  ChatFamily family;
  bool flag;  // the family's variant bit: see the members of ChatTemplate
};

// Canonical names, as llama.cpp spells them where it has one.
constexpr std::array<NamedVariant, 14> kNames = {{
    {"chatml", ChatFamily::kChatml, false},
    {"qwen3", ChatFamily::kChatml, true},
    {"llama2", ChatFamily::kLlama2, false},
    {"llama3", ChatFamily::kLlama3, false},
    {"llama3.1", ChatFamily::kLlama3, true},
    {"mistral-v1", ChatFamily::kMistralV1, false},
    {"mistral-v3", ChatFamily::kMistralV3, false},
    {"mistral-v3-tekken", ChatFamily::kMistralV3Tekken, false},
    {"mistral-v7", ChatFamily::kMistralV7, true},
    {"mistral-v7-tekken", ChatFamily::kMistralV7, false},
    {"gemma", ChatFamily::kGemma, false},
    {"phi3", ChatFamily::kPhi3, false},
    {"deepseek3", ChatFamily::kDeepseekR1, false},
    {"deepseek-r1", ChatFamily::kDeepseekR1, true},
}};

// Jinja's `trim` (Python's str.strip()); ASCII whitespace only, where Python also strips
// Unicode spaces: only a message that starts or ends with one renders differently.
std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

std::string_view strip_chars(std::string_view s, char c, bool left, bool right) {
  while (left && !s.empty() && s.front() == c) s.remove_prefix(1);
  while (right && !s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::string all_names() {
  std::string out;
  for (const NamedVariant& v : kNames) {
    if (!out.empty()) out += ", ";
    out += v.name;
  }
  return out;
}

Status unsupported_role(std::string_view family, size_t index, std::string_view role) {
  return invalid_argument("messages[" + std::to_string(index) + "].role: '" + std::string(role) +
                          "' is not supported by the " + std::string(family) +
                          " chat template (supported: system, user, assistant)");
}

// The default system prompt a ChatML template writes when the chat has none, as Qwen2.5's
// '<|im_start|>system\nYou are Qwen...<|im_end|>\n': a string literal that continues past the
// system header. Jinja escapes in it are decoded.
std::string chatml_default_system(std::string_view jinja) {
  constexpr std::string_view kHeader = "<|im_start|>system\\n";
  for (size_t at = jinja.find(kHeader); at != std::string_view::npos;
       at = jinja.find(kHeader, at + 1)) {
    const size_t begin = at + kHeader.size();
    if (begin >= jinja.size() || jinja[begin] == '\'' || jinja[begin] == '"') continue;
    const size_t end = jinja.find("<|im_end|>", begin);
    if (end == std::string_view::npos) continue;
    const std::string_view raw = jinja.substr(begin, end - begin);
    if (contains(raw, "'") || contains(raw, "\"") || contains(raw, "{")) continue;
    std::string text;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\' || i + 1 == raw.size()) {
        text += raw[i];
        continue;
      }
      const char c = raw[++i];
      text += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    }
    return text;
  }
  return {};
}

// Qwen3: the answer of an assistant message without its reasoning, and the reasoning.
struct Reasoning {
  std::string_view content;
  std::string_view reasoning;
};

Reasoning split_reasoning(std::string_view text) {
  const size_t last_close = text.rfind("</think>");
  if (last_close == std::string_view::npos) return {text, {}};
  Reasoning r;
  r.content = strip_chars(text.substr(last_close + 8), '\n', true, false);
  std::string_view before = strip_chars(text.substr(0, text.find("</think>")), '\n', false, true);
  const size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before = before.substr(open + 7);
  r.reasoning = strip_chars(before, '\n', true, false);
  return r;
}

// Roles after an optional leading system message must go user, assistant, user...: Gemma,
// Llama 2 and Mistral's templates raise an exception otherwise.
Status check_alternation(const std::vector<ChatMessage>& messages, size_t first,
                         std::string_view family) {
  for (size_t i = first; i < messages.size(); ++i) {
    const std::string_view want = (i - first) % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != want) {
      return invalid_argument("messages[" + std::to_string(i) + "].role: '" + messages[i].role +
                              "', but the " + std::string(family) +
                              " chat template needs roles alternating user/assistant after an "
                              "optional first system message (expected '" +
                              std::string(want) + "')");
    }
  }
  return Status::ok();
}

// Plain messages from structured ones: text content (parts joined), and a clear error for
// what only a Jinja template can render.
Result<std::vector<ChatMessage>> plain_messages(const ChatInputs& in, std::string_view family) {
  const std::string jinja_hint = "; the model's Jinja template can (--jinja)";
  if (!in.tools.is_undefined() && !in.tools.is_none() && in.tools.truthy()) {
    return unsupported("tools: the " + std::string(family) + " chat template cannot render tools" +
                       jinja_hint);
  }
  if (!in.messages.is_list()) {
    return invalid_argument("messages: a list of messages is needed, not " +
                            std::string(in.messages.type_name()));
  }
  std::vector<ChatMessage> out;
  const auto& list = in.messages.as_list();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!list[i].is_dict()) return invalid_argument(where + ": a message must be an object");
    const jinja::Dict& m = list[i].as_dict();
    const jinja::Value* role = m.find("role");
    if (role == nullptr || !role->is_string()) {
      return invalid_argument(where + ".role: must be a string");
    }
    const jinja::Value* calls = m.find("tool_calls");
    if (calls != nullptr && calls->truthy()) {
      return unsupported(where + ".tool_calls: the " + std::string(family) +
                         " chat template cannot render tool calls" + jinja_hint);
    }
    ChatMessage msg;
    msg.role = role->as_string();
    const jinja::Value* content = m.find("content");
    if (content == nullptr || content->is_none()) {
      // An assistant turn that only called tools has no content.
    } else if (content->is_string()) {
      msg.content = content->as_string();
    } else if (content->is_list()) {
      for (const jinja::Value& part : content->as_list()) {
        const jinja::Value* text = part.is_dict() ? part.as_dict().find("text") : nullptr;
        const jinja::Value* type = part.is_dict() ? part.as_dict().find("type") : nullptr;
        if (text == nullptr || !text->is_string() || type == nullptr || !(*type == "text")) {
          return invalid_argument(where +
                                  ".content: parts must be {\"type\": \"text\", "
                                  "\"text\": ...}");
        }
        msg.content += text->as_string();
      }
    } else {
      return invalid_argument(where + ".content: must be a string, a list of text parts or null");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

const std::string NamedChatRenderer::kNoSource;

Result<std::string> NamedChatRenderer::render(const ChatInputs& in) const {
  STRATA_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, plain_messages(in, name()));
  return render_plain(messages, in.add_generation_prompt);
}

ChatCaps NamedChatRenderer::caps() const {
  ChatCaps c;
  c.supports_system_role = true;  // every family writes a system message, merged where needed
  // Lists of text parts: the server joins them with "\n" first, as llama-server does for its
  // named formats.
  c.supports_string_content = true;
  c.supports_typed_content = false;
  return c;
}

std::vector<std::string> NamedChatRenderer::names() {
  std::vector<std::string> out;
  for (const NamedVariant& v : kNames) out.emplace_back(v.name);
  return out;
}

Result<NamedChatRenderer> NamedChatRenderer::from_name(std::string_view name, std::string_view bos,
                                                       std::string_view eos) {
  for (const NamedVariant& v : kNames) {
    if (name != v.name) continue;
    NamedChatRenderer t;
    t.family_ = v.family;
    t.bos_ = bos;
    t.eos_ = eos;
    switch (v.family) {
      case ChatFamily::kChatml:
        t.strip_reasoning_ = v.flag;
        break;
      case ChatFamily::kLlama3:
        t.dated_system_ = v.flag;
        break;
      case ChatFamily::kMistralV7:
        t.spaced_ = v.flag;
        break;
      case ChatFamily::kDeepseekR1:
        t.think_prompt_ = v.flag;
        break;
      default:
        break;
    }
    return t;
  }
  return invalid_argument("unknown chat template name '" + std::string(name) +
                          "'; pass --chat-template NAME, one of: " + all_names());
}

Result<NamedChatRenderer> NamedChatRenderer::from_text(std::string_view jinja, std::string_view bos,
                                                       std::string_view eos) {
  for (const NamedVariant& v : kNames) {
    if (jinja == v.name) return from_name(jinja, bos, eos);
  }
  auto make = [&](std::string_view name) -> Result<NamedChatRenderer> {
    return from_name(name, bos, eos);
  };
  // Checked in llama.cpp's order: later markers can occur inside earlier families' templates.
  if (contains(jinja, "<|im_start|>")) {
    // Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) use ChatML markers differently.
    if (!contains(jinja, "<|im_sep|>") && !contains(jinja, "<end_of_utterance>")) {
      STRATA_ASSIGN_OR_RETURN(NamedChatRenderer t, make("chatml"));
      t.default_system_ = chatml_default_system(jinja);
      t.strip_reasoning_ = contains(jinja, "</think>");
      return t;
    }
  } else if (jinja.starts_with("mistral") || contains(jinja, "[INST]")) {
    if (contains(jinja, "[SYSTEM_PROMPT]")) {
      const bool spaced = contains(jinja, "'[INST] '") || contains(jinja, "\"[INST] \"");
      return make(spaced ? "mistral-v7" : "mistral-v7-tekken");
    }
    if (contains(jinja, "[AVAILABLE_TOOLS]")) {
      // The spaced " [INST] " form of Mistral's cookbook v1 template is not rendered here.
      if (!contains(jinja, " [INST]")) {
        return make(contains(jinja, "\"[INST]\"") ? "mistral-v3-tekken" : "mistral-v3");
      }
    } else if (contains(jinja, "<<SYS>>")) {
      return make("llama2");
    } else {
      return make("mistral-v1");
    }
  } else if (contains(jinja, "<|assistant|>") && contains(jinja, "<|end|>")) {
    return make("phi3");
  } else if (contains(jinja, "<start_of_turn>")) {
    return make("gemma");
  } else if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>")) {
    return make(contains(jinja, "Cutting Knowledge Date") ? "llama3.1" : "llama3");
  } else if (contains(jinja, "<｜Assistant｜>") && contains(jinja, "<｜User｜>") &&
             contains(jinja, "<｜end▁of▁sentence｜>")) {
    return make(contains(jinja, "<｜Assistant｜><think>") ? "deepseek-r1" : "deepseek3");
  }
  std::string head(jinja.substr(0, 60));
  for (char& c : head) {
    if (c == '\n') c = ' ';
  }
  return unsupported("chat template not recognised (it starts '" + head +
                     "...'); pass --chat-template NAME, one of: " + all_names());
}

std::string NamedChatRenderer::name() const {
  for (const NamedVariant& v : kNames) {
    if (v.family != family_) continue;
    bool flag = false;
    switch (family_) {
      case ChatFamily::kChatml:
        flag = strip_reasoning_;
        break;
      case ChatFamily::kLlama3:
        flag = dated_system_;
        break;
      case ChatFamily::kMistralV7:
        flag = spaced_;
        break;
      case ChatFamily::kDeepseekR1:
        flag = think_prompt_;
        break;
      default:
        break;
    }
    if (v.flag == flag) return v.name;
  }
  return "unknown";
}

std::vector<std::string> NamedChatRenderer::stop_strings() const {
  std::vector<std::string> out;
  switch (family_) {
    case ChatFamily::kChatml:
      out = {"<|im_end|>"};
      break;
    case ChatFamily::kLlama3:
      out = {"<|eot_id|>", "<|eom_id|>"};
      break;
    case ChatFamily::kGemma:
      out = {"<end_of_turn>"};
      break;
    case ChatFamily::kPhi3:
      out = {"<|end|>"};
      break;
    case ChatFamily::kDeepseekR1:
      out = {"<｜end▁of▁sentence｜>"};
      break;
    default:  // Llama 2 and Mistral end an answer with the EOS token itself.
      break;
  }
  if (!eos_.empty() && std::find(out.begin(), out.end(), eos_) == out.end()) out.push_back(eos_);
  return out;
}

Result<std::string> NamedChatRenderer::render_plain(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt) const {
  if (messages.empty()) return invalid_argument("messages: empty; a chat needs one message");
  const std::string family = name();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant") return unsupported_role(family, i, r);
  }
  const bool has_system = messages[0].role == "system";
  std::string out;
  switch (family_) {
    case ChatFamily::kChatml: {
      // Qwen2.5 writes its default system turn when the chat has none; tools are not rendered.
      if (!has_system && !default_system_.empty()) {
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      }
      // Qwen3 keeps the reasoning only of answers after the last user query (an agent's
      // multi-step turn); earlier answers lose their <think> block.
      size_t last_query = messages.size() - 1;
      for (size_t i = messages.size(); i-- > 0;) {
        if (messages[i].role == "user") {
          last_query = i;
          break;
        }
      }
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        out += "<|im_start|>" + m.role + "\n";
        if (m.role == "assistant" && strip_reasoning_) {
          const Reasoning r = split_reasoning(m.content);
          const bool last = i + 1 == messages.size();
          if (i > last_query && (last || !r.reasoning.empty())) {
            out += "<think>\n";
            out += strip_chars(r.reasoning, '\n', true, true);
            out += "\n</think>\n\n";
            out += strip_chars(r.content, '\n', true, false);
          } else {
            out += r.content;
          }
        } else {
          out += m.content;
        }
        out += "<|im_end|>\n";
      }
      // Qwen3's enable_thinking=false (an empty <think> block) is not offered.
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatFamily::kLlama3: {
      out += bos_;
      size_t first = 0;
      if (dated_system_) {
        // Llama 3.1 (and 3.2, whose template asks strftime_now for today's date) always opens
        // with a system turn holding fixed dates; we write 3.1's default date so the prompt
        // does not change from day to day. Tools ("Environment: ipython") are not rendered.
        out +=
            "<|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
        if (has_system) {
          out += trim(messages[0].content);
          first = 1;
        }
        out += "<|eot_id|>";
      }
      for (size_t i = first; i < messages.size(); ++i) {
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
        out += trim(messages[i].content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatFamily::kLlama2: {
      // Meta's Llama-2-chat template: every user turn starts with BOS, the system prompt sits
      // inside the first one, and the whole turn text is stripped. No generation prompt: the
      // "[/INST]" is where the answer starts.
      const size_t first = has_system ? 1 : 0;
      STRATA_RETURN_IF_ERROR(check_alternation(messages, first, family));
      for (size_t i = first; i < messages.size(); ++i) {
        std::string content = messages[i].content;
        if (i == first && has_system) {
          content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
        }
        if (messages[i].role == "user") {
          out += bos_ + "[INST] " + std::string(trim(content)) + " [/INST]";
        } else {
          out += " " + std::string(trim(content)) + " " + eos_;
        }
      }
      break;
    }
    case ChatFamily::kMistralV1: {
      // Mistral 7B v0.1/v0.2 and Mixtral: that template has no system role and raises; like
      // llama.cpp we put the system text at the head of the first user turn instead.
      out += bos_;
      const size_t first = has_system ? 1 : 0;
      STRATA_RETURN_IF_ERROR(check_alternation(messages, first, family));
      for (size_t i = first; i < messages.size(); ++i) {
        if (messages[i].role == "user") {
          out += "[INST] ";
          if (i == first && has_system) out += messages[0].content + "\n\n";
          out += messages[i].content + " [/INST]";
        } else {
          out += messages[i].content + eos_;
        }
      }
      break;
    }
    case ChatFamily::kMistralV3:
    case ChatFamily::kMistralV3Tekken: {
      // The system prompt goes into the *last* user turn, and only when the chat ends with
      // that turn: answers to earlier turns were produced without it. Tools are not rendered.
      const bool tekken = family_ == ChatFamily::kMistralV3Tekken;
      out += bos_;
      const size_t first = has_system ? 1 : 0;
      STRATA_RETURN_IF_ERROR(check_alternation(messages, first, family));
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          out += tekken ? "[INST]" : "[INST] ";
          if (i + 1 == messages.size() && has_system) out += messages[0].content + "\n\n";
          out += m.content + "[/INST]";
        } else if (tekken) {
          out += m.content + eos_;
        } else {
          out += " " + std::string(trim(m.content)) + eos_;
        }
      }
      break;
    }
    case ChatFamily::kMistralV7: {
      // As llama.cpp renders it: the shipped templates also add a default system prompt with
      // today's date when there is none, which we do not.
      const std::string sp = spaced_ ? " " : "";
      out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          out += "[SYSTEM_PROMPT]" + sp + m.content + "[/SYSTEM_PROMPT]";
        } else if (m.role == "user") {
          out += "[INST]" + sp + m.content + "[/INST]";
        } else {
          out += sp + m.content + eos_;
        }
      }
      break;
    }
    case ChatFamily::kGemma: {
      // Gemma's template raises on a system message; like llama.cpp we merge it into the
      // first user turn ("system\n\nuser"), as Gemma 3's template does itself.
      out += bos_;
      const size_t first = has_system ? 1 : 0;
      STRATA_RETURN_IF_ERROR(check_alternation(messages, first, family));
      for (size_t i = first; i < messages.size(); ++i) {
        const bool user = messages[i].role == "user";
        out += user ? "<start_of_turn>user\n" : "<start_of_turn>model\n";
        if (i == first && has_system) {
          out += std::string(trim(messages[0].content)) + "\n\n";
        }
        out += trim(messages[i].content);
        out += "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
    case ChatFamily::kPhi3: {
      // No BOS in the template (the vocabulary adds it); an empty system message is skipped;
      // a chat that does not ask for an answer ends with EOS.
      for (const ChatMessage& m : messages) {
        if (m.role == "system" && m.content.empty()) continue;
        out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      }
      out += add_generation_prompt ? "<|assistant|>\n" : eos_;
      break;
    }
    case ChatFamily::kDeepseekR1: {
      // The last system message's text goes first, bare; past answers lose their reasoning.
      // R1's generation prompt opens a <think> block: the shipped template closes it at once
      // unless enable_thinking is set, and we render it with thinking enabled, as the
      // original R1 template and llama.cpp's server do. Tool calls are not rendered.
      out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") out += m.content;
      }
      for (const ChatMessage& m : messages) {
        if (m.role == "user") {
          out += "<｜User｜>" + m.content;
        } else if (m.role == "assistant") {
          std::string_view content = m.content;
          const size_t close = content.rfind("</think>");
          if (close != std::string_view::npos) content.remove_prefix(close + 8);
          out += "<｜Assistant｜>";
          out += content;
          out += "<｜end▁of▁sentence｜>";
        }
      }
      if (add_generation_prompt)
        out += think_prompt_ ? "<｜Assistant｜><think>\n" : "<｜Assistant｜>";
      break;
    }
  }
  return out;
}

}  // namespace strata
