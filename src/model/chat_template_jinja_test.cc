// Real chat templates through the Jinja implementation of ChatTemplate: each template of
// ../shared/templates, the templates inside the GGUFs of ../shared, and the one `gguf gen`
// writes, with the conversations of tests/reference/chat_conversations.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "jinja/json.h"
#include "model/chat_template.h"
#include "model/chat_template_test_util.h"
#include "model/gguf.h"
#include "model/synth.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

using chat_test::conversations;
using chat_test::Conversations;
using chat_test::find_source;
using chat_test::fixed_now;
using chat_test::Source;
using chat_test::template_sources;
using jinja::Dict;
using jinja::Value;

// An OpenAI client sends tool call arguments as a string of JSON; Llama 3.1 writes
// `arguments | tojson` and needs the object. As llama-server, the string becomes the object.
TEST(ChatTemplateJinja, ObjectArgumentsPolyfill) {
  const std::vector<Source> sources = template_sources().templates;
  const Source* llama = find_source(sources, "Llama-3.1");
  const Source* qwen3 = find_source(sources, "Qwen3");
  if (llama == nullptr || qwen3 == nullptr) GTEST_SKIP() << "no Llama 3.1 / Qwen3 template";
  const Conversations conv = conversations();
  Value chat;
  for (const auto& [name, c] : conv.chats) {
    if (name == "tool_call_string_arguments") chat = c;
  }
  ASSERT_TRUE(chat.is_list());

  Result<ChatTemplate> t = ChatTemplate::from_jinja(llama->text, llama->bos, llama->eos);
  ASSERT_TRUE(t.is_ok());
  EXPECT_TRUE(t->caps().requires_object_arguments);
  ChatInputs in;
  in.messages = chat;
  in.now = fixed_now();
  Result<std::string> polyfilled = t->apply(in);
  ASSERT_TRUE(polyfilled.is_ok()) << polyfilled.status().message();
  EXPECT_NE(polyfilled->find(R"("parameters": {"query": "jinja", "filters": {"recent": true}})"),
            std::string::npos)
      << *polyfilled;
  in.polyfill_object_arguments = false;
  Result<std::string> raw = t->apply(in);
  ASSERT_TRUE(raw.is_ok());
  EXPECT_NE(raw->find(R"("parameters": "{\"query\")"), std::string::npos) << *raw;

  // Qwen3 writes a string as it is and an object with tojson: nothing to polyfill.
  Result<ChatTemplate> q = ChatTemplate::from_jinja(qwen3->text, qwen3->bos, qwen3->eos);
  ASSERT_TRUE(q.is_ok());
  EXPECT_FALSE(q->caps().requires_object_arguments);
  EXPECT_TRUE(q->caps().supports_tool_calls);
}

TEST(ChatTemplateJinja, CapsOfRealTemplates) {
  const std::vector<Source> sources = template_sources().templates;
  struct Want {
    const char* marker;
    bool system, tools, tool_calls, parallel, responses;
  };
  // What each template does with each part of a chat, read from its text.
  const Want wants[] = {
      {"Qwen3", true, true, true, true, true},       {"Qwen2.5", true, true, true, true, true},
      {"Llama-3.1", true, true, true, false, true},  {"gemma-2", false, false, false, false, false},
      {"Phi-3.5", true, false, false, false, false}, {"Mistral-Nemo", true, true, true, true, true},
  };
  for (const Want& w : wants) {
    const Source* s = find_source(sources, w.marker);
    if (s == nullptr) continue;
    Result<ChatTemplate> t = ChatTemplate::from_jinja(s->text, s->bos, s->eos);
    ASSERT_TRUE(t.is_ok()) << w.marker;
    const ChatCaps c = t->caps();
    EXPECT_EQ(c.supports_system_role, w.system) << w.marker;
    EXPECT_EQ(c.supports_tools, w.tools) << w.marker;
    EXPECT_EQ(c.supports_tool_calls, w.tool_calls) << w.marker;
    EXPECT_EQ(c.supports_parallel_tool_calls, w.parallel) << w.marker;
    EXPECT_EQ(c.supports_tool_responses, w.responses) << w.marker;
  }
}

// Content shapes and reasoning, on templates small enough to read the answer off.
TEST(ChatTemplateJinja, CapsOfContentAndReasoning) {
  struct Want {
    const char* source;
    bool string_content, typed_content, preserve_reasoning;
  };
  const Want wants[] = {
      {"{% for m in messages %}{{ m.content }}{% endfor %}", true, false, false},
      {"{% for m in messages %}{{ m.content[0].text }}{% endfor %}", false, true, false},
      {"{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
       "{{ m.content | map(attribute='text') | join }}{% endif %}{% endfor %}",
       true, true, false},
      {"{% for m in messages %}{{ m.reasoning_content }}{{ m.content }}{% endfor %}", true, false,
       true},
  };
  for (const Want& w : wants) {
    Result<ChatTemplate> t = ChatTemplate::from_jinja(w.source, "", "");
    ASSERT_TRUE(t.is_ok()) << w.source;
    const ChatCaps c = t->caps();
    EXPECT_EQ(c.supports_string_content, w.string_content) << w.source;
    EXPECT_EQ(c.supports_typed_content, w.typed_content) << w.source;
    EXPECT_EQ(c.supports_preserve_reasoning, w.preserve_reasoning) << w.source;
  }
}

TEST(ChatTemplateJinja, DateAndOptions) {
  const std::vector<Source> sources = template_sources().templates;
  const Source* llama32 = find_source(sources, "Llama-3.2");
  if (llama32 == nullptr) GTEST_SKIP() << "no Llama 3.2 template";
  Result<ChatTemplate> t = ChatTemplate::from_jinja(llama32->text, llama32->bos, llama32->eos);
  ASSERT_TRUE(t.is_ok());
  ChatInputs in;
  in.messages = chat_messages({{"user", "Hi"}});
  std::tm day{};
  day.tm_year = 125;
  day.tm_mon = 0;
  day.tm_mday = 2;
  in.now = day;
  Result<std::string> out = t->apply(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_NE(out->find("Today Date: 02 Jan 2025"), std::string::npos) << *out;
  // A template option overrides what is passed by default (here, date_string).
  in.kwargs.set(Value("date_string"), Value("1 Apr 2000"));
  out = t->apply(in);
  ASSERT_TRUE(out.is_ok());
  EXPECT_NE(out->find("Today Date: 1 Apr 2000"), std::string::npos);
  // The end-of-turn texts of the family the template belongs to.
  const std::vector<std::string> stops = t->stop_strings();
  EXPECT_NE(std::find(stops.begin(), stops.end(), "<|eot_id|>"), stops.end());
}

TEST(ChatTemplateJinja, ErrorsAreClear) {
  Result<ChatTemplate> bad = ChatTemplate::from_jinja("{% for m in messages %}", "", "");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("chat template: template line 1"), std::string::npos)
      << bad.status().message();

  Result<ChatTemplate> t =
      ChatTemplate::from_jinja("{{ raise_exception('roles must alternate') }}", "", "");
  ASSERT_TRUE(t.is_ok());
  Result<std::string> out = t->render({{"user", "x"}}, true);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("roles must alternate"), std::string::npos);

  ChatInputs in;
  in.messages = Value("not a list");
  EXPECT_FALSE(t->apply(in).is_ok());
}

TEST(ChatTemplateJinja, NamedFamiliesTakeStructuredMessages) {
  Result<ChatTemplate> t = ChatTemplate::from_name("chatml", "", "<|im_end|>");
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->is_jinja());
  ChatInputs in;
  Result<Value> parsed = jinja::parse_json(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])",
      8);
  ASSERT_TRUE(parsed.is_ok());
  in.messages = *parsed;
  Result<std::string> out = t->apply(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
  // Tools need a Jinja template: the error says so.
  in.tools = Value::list({Value("x")});
  Result<std::string> tools = t->apply(in);
  ASSERT_FALSE(tools.is_ok());
  EXPECT_NE(tools.status().message().find("--jinja"), std::string::npos);
}

// The named families were written to render as their Jinja templates do: now the Jinja engine
// checks them, on the conversations both can express.
TEST(ChatTemplateJinja, NamedFamiliesRenderAsTheirTemplates) {
  const std::vector<Source> sources = template_sources().templates;
  const Conversations conv = conversations();
  int compared = 0;
  for (const Source& src : sources) {
    Result<ChatTemplate> named = ChatTemplate::from_text(src.text, src.bos, src.eos);
    Result<ChatTemplate> jinja = ChatTemplate::from_jinja(src.text, src.bos, src.eos);
    ASSERT_TRUE(named.is_ok() && jinja.is_ok()) << src.label;
    for (const auto& [chat_name, chat] : conv.chats) {
      if (chat_name != "plain" && chat_name != "system_multi_turn" &&
          chat_name != "no_system_multi_turn" && chat_name != "ends_with_assistant" &&
          chat_name != "whitespace_and_unicode" && chat_name != "think_in_content") {
        continue;
      }
      for (bool generation_prompt : {true, false}) {
        ChatInputs in;
        in.messages = chat;
        in.add_generation_prompt = generation_prompt;
        in.now = fixed_now();
        // R1's template closes the think block unless thinking is on; the family renders it on.
        in.kwargs.set(Value("enable_thinking"), Value(true));
        Result<std::string> want = jinja->apply(in);
        if (!want) continue;  // the template refuses (Gemma's system role); the family merges
        Result<std::string> got = named->apply(in);
        ASSERT_TRUE(got.is_ok()) << src.label << " / " << chat_name << ": "
                                 << got.status().message();
        EXPECT_EQ(*got, *want) << src.label << " / " << chat_name
                               << (generation_prompt ? " +gen" : "");
        ++compared;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "no templates under " << chat_test::kShared;
}

// llama-server's choice of template: --jinja (default) renders the model's own; a file or a
// template text overrides it; a family name picks the family; without a template, ChatML.
TEST(ChatTemplateJinja, ChoiceForAModel) {
  SynthParams p;
  p.arch = "qwen2";
  p.n_embd = 64;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.n_ff = 128;
  p.n_layer = 1;
  const std::string qwen_path = ::testing::TempDir() + "/chat_template_choice_qwen.gguf";
  ASSERT_TRUE(synth_write(p, qwen_path).is_ok());
  p.arch = "llama";  // gguf gen writes no chat template for llama
  const std::string llama_path = ::testing::TempDir() + "/chat_template_choice_llama.gguf";
  ASSERT_TRUE(synth_write(p, llama_path).is_ok());
  Result<GgufFile> qwen = GgufFile::open(qwen_path);
  Result<GgufFile> llama = GgufFile::open(llama_path);
  ASSERT_TRUE(qwen.is_ok() && llama.is_ok());
  Result<Tokenizer> qwen_tok = Tokenizer::from_gguf(*qwen);
  Result<Tokenizer> llama_tok = Tokenizer::from_gguf(*llama);
  ASSERT_TRUE(qwen_tok.is_ok() && llama_tok.is_ok());
  const std::vector<ChatMessage> chat = {{"user", "Hi"}};
  const std::string chatml = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";

  ChatTemplateOptions o;
  Result<ChatTemplate> t = ChatTemplate::for_model(*qwen, *qwen_tok, o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_TRUE(t->is_jinja());
  EXPECT_EQ(t->source(), *qwen->get_string("tokenizer.chat_template"));
  EXPECT_EQ(*t->render(chat, true), chatml);

  t = ChatTemplate::for_model(*llama, *llama_tok, o);  // no template: ChatML, as Jinja
  ASSERT_TRUE(t.is_ok());
  EXPECT_TRUE(t->is_jinja());
  EXPECT_EQ(*t->render(chat, true), chatml);

  o.template_arg = "{{ bos_token }}[{{ messages[0].content }}]";
  t = ChatTemplate::for_model(*llama, *llama_tok, o);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->render(chat, true), t->bos() + "[Hi]");

  o.template_arg = "llama3";
  t = ChatTemplate::for_model(*qwen, *qwen_tok, o);
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->is_jinja());
  EXPECT_EQ(t->name(), "llama3");

  const std::string file = ::testing::TempDir() + "/chat_template_choice.jinja";
  {
    std::ofstream out(file);
    out << "file:{% for m in messages %}{{ m.role }}{% endfor %}\n";
  }
  o.file = file;
  t = ChatTemplate::for_model(*qwen, *qwen_tok, o);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->render(chat, true), "file:user");
  o.file = file + ".missing";
  t = ChatTemplate::for_model(*qwen, *qwen_tok, o);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("--chat-template-file"), std::string::npos);

  ChatTemplateOptions no_jinja;
  no_jinja.jinja = false;
  t = ChatTemplate::for_model(*qwen, *qwen_tok, no_jinja);
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->is_jinja());
  EXPECT_EQ(t->name(), "chatml");
  t = ChatTemplate::for_model(*llama, *llama_tok, no_jinja);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->name(), "chatml");
  std::remove(file.c_str());
  std::remove(qwen_path.c_str());
  std::remove(llama_path.c_str());
}

}  // namespace
}  // namespace strata
