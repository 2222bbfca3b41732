#include "model/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/tokenizer.h"

namespace strata {
namespace {

const std::string kTemplates = STRATA_SHARED_DIR "/templates/";

// The file's text, or nullopt when it is absent.
std::optional<std::string> read_template(const std::string& file) {
  std::ifstream in(kTemplates + file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<ChatMessage> kChat = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello"},
    {"assistant", "Hi there!"},
    {"user", "How are you?"},
};

struct TemplateCase {
  const char* file;
  const char* bos;
  const char* eos;
  const char* name;
  // kChat rendered with add_generation_prompt, worked out by hand from the Jinja text.
  const char* expected;
};

const TemplateCase kTemplateCases[] = {
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", "chatml",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\nHi there!<|im_end|>\n"
     "<|im_start|>user\nHow are you?<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", "qwen3",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\nHi there!<|im_end|>\n"
     "<|im_start|>user\nHow are you?<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>", "deepseek-r1",
     "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello<｜Assistant｜>Hi "
     "there!<｜end▁of▁sentence｜><｜User｜>How are you?<｜Assistant｜><think>\n"},
    {"google-gemma-2-2b-it.jinja", "<bos>", "<eos>", "gemma",
     "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello<end_of_turn>\n"
     "<start_of_turn>model\nHi there!<end_of_turn>\n"
     "<start_of_turn>user\nHow are you?<end_of_turn>\n"
     "<start_of_turn>model\n"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "llama3.1",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
     "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
     "You are a helpful assistant.<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "llama3.1",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
     "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
     "You are a helpful assistant.<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", "phi3",
     "<|system|>\nYou are a helpful assistant.<|end|>\n"
     "<|user|>\nHello<|end|>\n"
     "<|assistant|>\nHi there!<|end|>\n"
     "<|user|>\nHow are you?<|end|>\n"
     "<|assistant|>\n"},
    // Nemo puts the system prompt into the last user turn only.
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", "mistral-v3-tekken",
     "<s>[INST]Hello[/INST]Hi there!</s>[INST]You are a helpful assistant.\n\nHow are "
     "you?[/INST]"},
};

Result<ChatTemplate> load(const TemplateCase& c) {
  auto text = read_template(c.file);
  if (!text) return io_error(std::string("missing ") + c.file);
  return ChatTemplate::from_text(*text, c.bos, c.eos);
}

TEST(ChatTemplate, RecognisesEveryShippedTemplate) {
  if (!std::filesystem::is_directory(kTemplates)) GTEST_SKIP() << "no " << kTemplates;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kTemplates)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string file = entry.path().filename().string();
    auto text = read_template(file);
    ASSERT_TRUE(text.has_value()) << file;
    auto t = ChatTemplate::from_text(*text, "<s>", "</s>");
    ASSERT_TRUE(t.is_ok()) << file << ": " << t.status().message();
    ++n;
    // Every shipped file must be one of the cases whose rendering we check below.
    auto known = std::find_if(std::begin(kTemplateCases), std::end(kTemplateCases),
                              [&](const TemplateCase& c) { return file == c.file; });
    ASSERT_NE(known, std::end(kTemplateCases)) << file << " has no rendering case";
    EXPECT_EQ(t->name(), known->name) << file;
  }
  EXPECT_GT(n, 0);
}

TEST(ChatTemplate, RendersLikeTheJinja) {
  for (const TemplateCase& c : kTemplateCases) {
    if (!read_template(c.file)) GTEST_SKIP() << "no " << kTemplates << c.file;
    auto t = load(c);
    ASSERT_TRUE(t.is_ok()) << c.file << ": " << t.status().message();
    auto text = t->render(kChat, /*add_generation_prompt=*/true);
    ASSERT_TRUE(text.is_ok()) << c.file << ": " << text.status().message();
    EXPECT_EQ(*text, c.expected) << c.file;
    // By name, the same family renders the same text.
    auto by_name = ChatTemplate::from_name(c.name, c.bos, c.eos);
    ASSERT_TRUE(by_name.is_ok()) << c.name;
    EXPECT_EQ(by_name->name(), c.name);
  }
}

TEST(ChatTemplate, QwenDefaultSystemPromptFromTheTemplate) {
  TemplateCase c = kTemplateCases[0];
  if (!read_template(c.file)) GTEST_SKIP() << "no " << c.file;
  auto t = load(c);
  ASSERT_TRUE(t.is_ok());
  auto text = t->render({{"user", "Hi"}}, true);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Plain ChatML (and Qwen3) write no system turn of their own.
  auto plain = ChatTemplate::from_name("chatml", "", "");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(*plain->render({{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3DropsPastReasoningKeepsTheLast) {
  auto t = ChatTemplate::from_name("qwen3", "", "<|im_end|>");
  ASSERT_TRUE(t.is_ok());
  // A past answer loses its <think> block (split on '</think>', leading newlines dropped).
  auto text = t->render(
      {{"user", "Q1"}, {"assistant", "<think>\nmull\n</think>\n\nA1"}, {"user", "Q2"}}, false);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text,
            "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n");
  // The answer after the last query, when last, is written with its reasoning block.
  text = t->render({{"user", "Q1"}, {"assistant", "<think>\nmull\n</think>\n\nA1"}}, false);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text,
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nmull\n</think>\n\nA1<|im_end|>\n");
}

TEST(ChatTemplate, Llama3TrimsAndLlama30HasNoDates) {
  auto t = ChatTemplate::from_name("llama3", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(t.is_ok());
  auto text = t->render({{"system", " Be brief.\n"}, {"user", "\tHi "}}, true);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // 3.1 writes its dated system turn even when the chat has no system message.
  auto t31 = ChatTemplate::from_name("llama3.1", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(t31.is_ok());
  text = t31->render({{"user", "Hi"}}, false);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, NemoDropsSystemWhenChatEndsWithAnswer) {
  auto t = ChatTemplate::from_name("mistral-v3-tekken", "<s>", "</s>");
  ASSERT_TRUE(t.is_ok());
  auto text = t->render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}}, false);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text, "<s>[INST]U[/INST]A</s>");
}

TEST(ChatTemplate, Llama2SystemInFirstTurn) {
  // From Meta's Llama-2-chat template: BOS before every [INST], turn text stripped.
  auto t = ChatTemplate::from_name("llama2", "<s>", "</s>");
  ASSERT_TRUE(t.is_ok());
  auto text = t->render(kChat, true);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text,
            "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello [/INST] Hi there! "
            "</s><s>[INST] How are you? [/INST]");
}

TEST(ChatTemplate, PhiWithoutGenerationPromptEndsWithEos) {
  auto t = ChatTemplate::from_name("phi3", "<s>", "<|endoftext|>");
  ASSERT_TRUE(t.is_ok());
  auto text = t->render({{"system", ""}, {"user", "Hi"}}, false);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text, "<|user|>\nHi<|end|>\n<|endoftext|>");
}

TEST(ChatTemplate, Errors) {
  auto gemma = ChatTemplate::from_name("gemma", "<bos>", "<eos>");
  ASSERT_TRUE(gemma.is_ok());
  auto bad = gemma->render({{"user", "a"}, {"user", "b"}}, true);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("messages[1].role"), std::string::npos)
      << bad.status().message();
  // A system message later than the first cannot be expressed in Gemma.
  EXPECT_FALSE(gemma->render({{"user", "a"}, {"system", "b"}}, true).is_ok());

  auto tool = gemma->render({{"user", "a"}, {"tool", "b"}}, true);
  ASSERT_FALSE(tool.is_ok());
  EXPECT_NE(tool.status().message().find("'tool'"), std::string::npos);

  EXPECT_FALSE(gemma->render({}, true).is_ok());

  auto unknown = ChatTemplate::from_text("{{ 'USR>' + message }}", "", "");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("--chat-template"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("chatml"), std::string::npos);

  auto bad_name = ChatTemplate::from_name("vicuna", "", "");
  ASSERT_FALSE(bad_name.is_ok());
  EXPECT_NE(bad_name.status().message().find("--chat-template"), std::string::npos);
}

TEST(ChatTemplate, NameAsTemplateAndEveryNameRoundTrips) {
  for (const std::string& n : ChatTemplate::names()) {
    auto t = ChatTemplate::from_text(n, "<s>", "</s>");
    ASSERT_TRUE(t.is_ok()) << n;
    EXPECT_EQ(t->name(), n);
    EXPECT_FALSE(t->stop_strings().empty()) << n;
    EXPECT_TRUE(t->render(kChat, true).is_ok()) << n;
  }
}

TEST(ChatTemplate, StopStrings) {
  auto t = ChatTemplate::from_name("llama3.1", "<|begin_of_text|>", "<|end_of_text|>");
  ASSERT_TRUE(t.is_ok());
  const auto stops = t->stop_strings();
  EXPECT_NE(std::find(stops.begin(), stops.end(), "<|eot_id|>"), stops.end());
  EXPECT_NE(std::find(stops.begin(), stops.end(), "<|end_of_text|>"), stops.end());
}

TEST(ChatTemplate, TokenizeGivesOneBos) {
  VocabSpec v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "[INST]"};
  v.scores = {0, 0, 0, -1, -2, 0};
  v.token_types = {2, 3, 3, 1, 1, 3};
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  ASSERT_TRUE(tok->add_bos());
  auto t = ChatTemplate::from_name("mistral-v3-tekken", "<s>", "</s>");
  ASSERT_TRUE(t.is_ok());
  const std::vector<int32_t> with_bos_text = t->tokenize(*tok, "<s>[INST]a");
  const std::vector<int32_t> without = t->tokenize(*tok, "[INST]a");
  ASSERT_FALSE(with_bos_text.empty());
  EXPECT_EQ(with_bos_text[0], 1);
  EXPECT_EQ(std::count(with_bos_text.begin(), with_bos_text.end(), 1), 1);
  EXPECT_EQ(with_bos_text, without);
  // The control token written in the text becomes its id.
  EXPECT_NE(std::find(with_bos_text.begin(), with_bos_text.end(), 5), with_bos_text.end());

  // A vocabulary that adds no BOS keeps the one the template wrote.
  v.add_bos = false;
  auto no_bos = Tokenizer::from_spec(v);
  ASSERT_TRUE(no_bos.is_ok());
  const std::vector<int32_t> ids = t->tokenize(*no_bos, "<s>[INST]a");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);
}

}  // namespace
}  // namespace strata
