// The server's chat formatting: llama-server's variables and message shaping around a
// ChatTemplate, and the choice of template from the server's flags.
#include "server/chat_format.h"

#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "jinja/json.h"
#include "model/model.h"
#include "model/synth.h"
#include "unit/synth_file.h"

namespace strata::server {
namespace {

using jinja::Dict;
using jinja::Value;

Value json(std::string_view text) {
  Result<Value> v = jinja::parse_json(text, 32);
  EXPECT_TRUE(v.is_ok()) << v.status().message();
  return v ? *v : Value();
}

Dict json_dict(std::string_view text) { return json(text).as_dict(); }

ChatFormatter formatter(std::string_view source, Dict kwargs = {}, bool add_bos = false,
                        bool add_eos = false) {
  Result<ChatTemplate> t = ChatTemplate::from_jinja(source, "<s>", "</s>");
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return ChatFormatter(std::move(*t), std::move(kwargs), add_bos, add_eos);
}

std::tm day(int year, int month, int mday) {
  std::tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = mday;
  return t;
}

// Each message as role=content|, so that a test sees what the template was given.
constexpr std::string_view kEcho =
    "{% for m in messages %}{{ m.role }}={{ m.content }}|{% endfor %}"
    "{% if add_generation_prompt %}>{% endif %}";

TEST(ChatFormat, ServerKwargsGoUnderTheRequests) {
  const ChatFormatter f = formatter(
      "{{ enable_thinking }} {{ mode }} {{ extra | default('-') }} {{ date_string }} {{ datetime "
      "}}",
      json_dict(R"({"enable_thinking": true, "mode": "server", "extra": 1})"));
  ChatInputs in;
  in.messages = json(R"([{"role": "user", "content": "hi"}])");
  in.now = day(2025, 3, 9);
  Result<std::string> out = f.render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "True server 1 09 Mar 2025 Mar 09 2025");
  // The request's chat_template_kwargs win, the date included.
  in.kwargs = json_dict(R"({"enable_thinking": false, "mode": "request", "date_string": "x"})");
  out = f.render(in);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out, "False request 1 x Mar 09 2025");
}

TEST(ChatFormat, BosAndEosTheTokenizerAddsAreDropped) {
  const std::string source = "{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}";
  ChatInputs in;
  in.messages = json(R"([{"role": "user", "content": "hi"}])");
  Result<std::string> kept = formatter(source).render(in);
  ASSERT_TRUE(kept.is_ok());
  EXPECT_EQ(*kept, "<s>[hi]</s>");
  Result<std::string> dropped = formatter(source, {}, true, true).render(in);
  ASSERT_TRUE(dropped.is_ok());
  EXPECT_EQ(*dropped, "[hi]");
}

TEST(ChatFormat, MessagesAreShapedAsLlamaServerDoes) {
  const ChatFormatter f = formatter(kEcho);
  EXPECT_TRUE(f.caps().supports_string_content);
  EXPECT_FALSE(f.caps().supports_typed_content);  // it prints a list as Python does
  ChatInputs in;
  in.messages = json(R"([
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": {"x": [1, 2], "y": "é"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok", "extra": "dropped"}])");
  Result<std::string> out = f.render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "system=Be brief.|user=a\nb|assistant=|tool=ok|>");

  // Tool calls: arguments as a compact string of JSON, the id kept; empty fields dropped.
  const ChatFormatter calls = formatter("{{ messages | tojson }}");
  in.messages = json(R"([{"role": "assistant", "content": "", "reasoning_content": "",
      "name": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": {"x": [1, 2], "y": "é"}}}]}])");
  // This template writes arguments with tojson: it is given the object back (the polyfill of
  // Llama 3.1's templates), unless the polyfill is off.
  EXPECT_TRUE(calls.caps().requires_object_arguments);
  out = calls.render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_NE(out->find(R"("arguments": {"x": [1, 2], "y": "é"})"), std::string::npos) << *out;
  in.polyfill_object_arguments = false;
  out = calls.render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, R"([{"role": "assistant", "content": "", "tool_calls": [{"type": "function", )"
                  R"("function": {"name": "f", "arguments": "{\"x\":[1,2],\"y\":\"é\"}"}, )"
                  R"("id": "c1"}]}])");
}

TEST(ChatFormat, SystemGoesIntoTheNextMessageWithoutASystemRole) {
  const ChatFormatter f = formatter(
      "{% for m in messages %}{% if m.role == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}"
      "{{ m.role }}={{ m.content }}|{% endfor %}");
  EXPECT_FALSE(f.caps().supports_system_role);
  ChatInputs in;
  in.messages = json(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  Result<std::string> out = f.render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "user=S\nU|");
  in.messages = json(R"([{"role": "system", "content": "S"}])");
  out = f.render(in);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out, "");
}

TEST(ChatFormat, BadMessagesNameTheField) {
  const ChatFormatter f = formatter(kEcho);
  ChatInputs in;
  struct Bad {
    const char* messages;
    const char* field;
  };
  const Bad bad[] = {
      {R"({"role": "user"})", "messages: a list of messages is needed"},
      {R"([{"content": "x"}])", "messages[0].role"},
      {R"([{"role": "user"}])", "messages[0]: 'content' or 'tool_calls' is needed"},
      {R"([{"role": "user", "content": 5}])", "messages[0].content"},
      {R"([{"role": "user", "content": [{"type": "image_url"}]}])", "messages[0].content[0].type"},
      {R"([{"role": "assistant", "content": "", "tool_calls": [{"type": "x"}]}])",
       "messages[0].tool_calls[0].type"},
  };
  for (const Bad& b : bad) {
    in.messages = json(b.messages);
    Result<std::string> out = f.render(in);
    ASSERT_FALSE(out.is_ok()) << b.messages;
    EXPECT_NE(out.status().message().find(b.field), std::string::npos) << out.status().message();
  }
  // A template's own refusal reaches the request.
  const ChatFormatter refusing = formatter("{{ raise_exception('roles must alternate') }}");
  in.messages = json(R"([{"role": "user", "content": "x"}])");
  Result<std::string> out = refusing.render(in);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("roles must alternate"), std::string::npos);
}

TEST(ChatFormat, ChoiceFromTheServersFlags) {
  SynthParams p;
  p.arch = "qwen2";
  p.n_embd = 64;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.n_ff = 128;
  p.n_layer = 1;
  Result<std::unique_ptr<Model>> opened = Model::open(testing::synth_file("chat_format_qwen2", p));
  ASSERT_TRUE(opened.is_ok()) << opened.status().message();
  const Model* model = opened->get();

  ChatTemplateChoice choice;
  Result<std::unique_ptr<ChatFormatter>> f = chat_formatter_for(*model, choice);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->name(), "jinja");
  EXPECT_EQ((*f)->source(), *model->file().get_string("tokenizer.chat_template"));
  EXPECT_TRUE((*f)->caps().supports_system_role);
  Result<std::string> text = (*f)->render({{"user", "Hi"}});
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  choice.name_or_text = "{{ enable_thinking }}/{{ k }}";
  choice.kwargs_json = R"({"k": [1, "two"]})";
  choice.enable_thinking = false;
  f = chat_formatter_for(*model, choice);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  text = (*f)->render({{"user", "Hi"}});
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text, "False/[1, 'two']");

  choice.kwargs_json = "[1]";
  f = chat_formatter_for(*model, choice);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("--chat-template-kwargs"), std::string::npos);
  choice.kwargs_json = "{";
  EXPECT_FALSE(chat_formatter_for(*model, choice).is_ok());

  choice = {};
  choice.name_or_text = "{% for %}";
  f = chat_formatter_for(*model, choice);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("--chat-template"), std::string::npos);
  EXPECT_NE(f.status().message().find("line 1"), std::string::npos);

  // Without Jinja, a template's text is recognised as one of the named families.
  choice.jinja = false;
  choice.name_or_text = "{{ '<|start_header_id|>' + m.role + '<|end_header_id|>' }}";
  f = chat_formatter_for(*model, choice);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->name(), "llama3");
  EXPECT_EQ((*f)->source(), "");
}

}  // namespace
}  // namespace strata::server
