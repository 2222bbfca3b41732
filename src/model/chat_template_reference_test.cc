// Real chat templates rendered by ChatTemplate (the Jinja implementation, the path the server
// takes) against Python's jinja2 in transformers' environment (tests/reference/jinja_ref.py):
// every template of ../shared/templates, every GGUF under ../shared/models that carries one and
// the one `gguf gen` writes, with every conversation of tests/reference/chat_conversations.json,
// with and without tools, with and without a generation prompt, and with chat_template_kwargs.
// Where jinja2 raises (the template refuses the conversation), ours must fail too.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "jinja/reference_test_util.h"
#include "model/chat_template.h"
#include "model/chat_template_test_util.h"

namespace strata {
namespace {

using jinja::Dict;
using jinja::Value;

struct Variant {
  const char* name;
  bool tools;
  bool add_generation_prompt;
  const char* kwargs;  // chat_template_kwargs, a JSON object
};

// Each conversation under each of these. enable_thinking is Qwen3's option (the others ignore
// it); both values are checked since each takes a different branch.
const Variant kVariants[] = {
    {"", false, true, "{}"},
    {"-gen", false, false, "{}"},
    {"+tools", true, true, "{}"},
    {"+tools-gen", true, false, "{}"},
    {"+nothink", false, true, R"({"enable_thinking": false})"},
    {"+nothink-gen", false, false, R"({"enable_thinking": false})"},
    {"+tools+nothink", true, true, R"({"enable_thinking": false})"},
    {"+think", false, true, R"({"enable_thinking": true})"},
    {"+tools+think-gen", true, false, R"({"enable_thinking": true})"},
    // Llama 3.x's options: tools in the system turn, built-in tools, a given date.
    {"+tools+llama-options", true, true,
     R"({"tools_in_user_message": false, "builtin_tools": ["brave_search", "wolfram_alpha"],
         "date_string": "1 Apr 2000"})"},
    {"+llama-options-gen", false, false,
     R"({"tools_in_user_message": false, "builtin_tools": ["code_interpreter"]})"},
};

struct Case {
  std::string label;  // template / conversation / variant
  const chat_test::Source* source;
  ChatInputs inputs;
};

// The variables JinjaChatRenderer gives the template, as jinja2's context.
Dict reference_context(const chat_test::Source& s, const ChatInputs& in) {
  Dict ctx;
  ctx.set(Value("messages"), in.messages);
  ctx.set(Value("add_generation_prompt"), Value(in.add_generation_prompt));
  ctx.set(Value("bos_token"), Value(s.bos));
  ctx.set(Value("eos_token"), Value(s.eos));
  if (!in.tools.is_undefined()) ctx.set(Value("tools"), in.tools);
  for (const auto& [k, v] : in.kwargs.items()) ctx.set(k, v);
  return ctx;
}

// Where two texts first differ, with a little of each around it.
std::string first_difference(const std::string& ours, const std::string& theirs) {
  size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "at byte " + std::to_string(i) + "\n  ours:   ..." + ours.substr(from, 120) +
         "\n  jinja2: ..." + theirs.substr(from, 120);
}

TEST(ChatTemplateReference, RealTemplatesRenderAsJinja2) {
  const chat_test::Sources sources = chat_test::template_sources();
  if (sources.template_files == 0) {
    GTEST_SKIP() << "no templates in " << chat_test::kShared << "/templates";
  }
  const chat_test::Conversations conv = chat_test::conversations();
  ASSERT_FALSE(conv.chats.empty());

  std::vector<Case> cases;
  for (const chat_test::Source& s : sources.templates) {
    for (const auto& [chat_name, chat] : conv.chats) {
      for (const Variant& v : kVariants) {
        ChatInputs in;
        in.messages = chat;
        if (v.tools) in.tools = conv.tools;
        in.add_generation_prompt = v.add_generation_prompt;
        Result<Value> kwargs = jinja::parse_json(v.kwargs, 4);
        ASSERT_TRUE(kwargs.is_ok() && kwargs->is_dict());
        in.kwargs = kwargs->as_dict();
        in.now = chat_test::fixed_now();
        // The raw template against the raw template: the argument polyfill is llama-server's,
        // not jinja2's (ChatTemplateJinja.ObjectArgumentsPolyfill checks it).
        in.polyfill_object_arguments = false;
        cases.push_back({s.label + " / " + chat_name + v.name, &s, std::move(in)});
      }
    }
  }

  std::vector<jinja::reference::ReferenceCase> reference_cases;
  for (const Case& c : cases) {
    reference_cases.push_back({c.source->text, reference_context(*c.source, c.inputs)});
  }
  std::string why;
  const auto reference = jinja::reference::render_with_jinja2(reference_cases, why);
  if (!reference) GTEST_SKIP() << why;
  ASSERT_EQ(reference->size(), cases.size());

  int equal = 0;
  int both_refused = 0;
  int mismatches = 0;
  const chat_test::Source* parsed_for = nullptr;
  Result<ChatTemplate> t = invalid_argument("unparsed");
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (parsed_for != c.source) {
      t = ChatTemplate::from_jinja(c.source->text, c.source->bos, c.source->eos);
      ASSERT_TRUE(t.is_ok()) << c.source->label << ": " << t.status().message();
      parsed_for = c.source;
    }
    const jinja::reference::ReferenceResult& want = (*reference)[i];
    Result<std::string> got = t->apply(c.inputs);
    if (want.ok && got.is_ok() && *got == want.text) {
      ++equal;
    } else if (!want.ok && !got.is_ok()) {
      ++both_refused;
      // The same reason: a raise_exception's message, or the same error of Python's.
      EXPECT_TRUE(jinja::reference::same_error(got.status().message(), want.text))
          << c.label << ":\n  ours:   " << got.status().message() << "\n  jinja2: " << want.text;
    } else {
      ++mismatches;
      if (mismatches <= 20) {
        ADD_FAILURE() << c.label << ":\n"
                      << (!want.ok       ? "jinja2 raised " + want.text + ", ours rendered"
                          : !got.is_ok() ? "ours failed: " + got.status().message()
                                         : first_difference(*got, want.text));
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  std::printf(
      "[ jinja2   ] %zu templates (%d files, %d of %d shared GGUFs, gguf gen's) x %zu "
      "conversations x %zu variants: %d equal, %d refused by both, %d differ\n",
      sources.templates.size(), sources.template_files, sources.gguf_templates, sources.gguf_files,
      conv.chats.size(), std::size(kVariants), equal, both_refused, mismatches);
}

}  // namespace
}  // namespace strata
