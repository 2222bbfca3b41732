// The real `strata serve` with each chat template of ../shared/templates (--chat-template-file)
// answers /apply-template with Python jinja2's rendering of the variables llama-server passes:
// the messages and tools of the request, bos_token / eos_token of the vocabulary,
// enable_thinking (true unless the request's chat_template_kwargs say otherwise),
// --chat-template-kwargs under the request's, and without the template's leading BOS text when
// the vocabulary adds BOS itself. Conversations are ones llama-server passes on unchanged
// (string content, tool call arguments as strings of JSON), so that the reference's context is
// the request's. Skips without the shared templates or python3-jinja2.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "jinja/json.h"
#include "jinja/json_test_util.h"
#include "jinja/reference_test_util.h"
#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

using jinja::Dict;
using jinja::Value;

const std::string kTemplates = STRATA_SHARED_DIR "/templates";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Value json_value(std::string_view text) {
  Result<Value> v = jinja::parse_json(text, 32);
  EXPECT_TRUE(v.is_ok()) << v.status().message();
  return v ? *v : Value();
}

// The server's --chat-template-kwargs: a fixed date for the templates that write one.
constexpr const char* kServerKwargs = R"({"date_string": "26 Jul 2024"})";

constexpr const char* kWeatherTools = R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city — °C.", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
    "required": ["city"]}}}])";

struct Conversation {
  const char* name;
  const char* messages;
  bool has_system;
  bool has_tool_calls;
};

const Conversation kConversations[] = {
    {"plain", R"([{"role": "user", "content": "Hello"}])", false, false},
    {"multi_turn",
     R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}])",
     true, false},
    {"unicode",
     R"([{"role": "user", "content": "  «Bonjour» — 日本 😀 {{ x }}\n"},
         {"role": "assistant", "content": "<think>\nhm\n</think>\n\nSalut."},
         {"role": "user", "content": "Encore"}])",
     false, false},
    {"tool_call",
     R"([{"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
           "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
           "id": "call12345"}]},
         {"role": "tool", "content": "21 C", "tool_call_id": "call12345"}])",
     false, true},
};

struct Variant {
  const char* name;
  bool tools;
  bool add_generation_prompt;
  const char* request_kwargs;  // chat_template_kwargs of the request; "" for none
};

const Variant kVariants[] = {
    {"", false, true, ""},
    {"+tools", true, true, ""},
    {"-gen", false, false, ""},
    {"+nothink", false, true, R"({"enable_thinking": false})"},
    {"+tools+nothink-gen", true, false, R"({"enable_thinking": false, "extra": [1]})"},
};

// Messages with each tool call's arguments as the object they hold: what a template that
// needs objects (Llama 3.1) is given by the server, as llama-server's polyfill does.
Value with_object_arguments(const Value& messages) {
  std::vector<Value> out;
  for (const Value& m : messages.as_list()) {
    const Value* calls = m.as_dict().find("tool_calls");
    if (calls == nullptr) {
      out.push_back(m);
      continue;
    }
    std::vector<Value> new_calls;
    for (const Value& call : calls->as_list()) {
      Dict fn = call.as_dict().find("function")->as_dict();
      fn.set(Value("arguments"), json_value(fn.find("arguments")->as_string()));
      Dict c = call.as_dict();
      c.set(Value("function"), Value(std::move(fn)));
      new_calls.emplace_back(std::move(c));
    }
    Dict d = m.as_dict();
    d.set(Value("tool_calls"), Value::list(std::move(new_calls)));
    out.emplace_back(std::move(d));
  }
  return Value::list(std::move(out));
}

class ServerTemplateTest : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_server_template_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};

fs::path* ServerTemplateTest::dir_ = nullptr;

// One synthetic model per architecture: llama's vocabulary adds BOS (<s>), qwen2's does not.
TEST_P(ServerTemplateTest, ApplyTemplateIsJinja2sRendering) {
  const std::string arch = GetParam();
  if (!fs::is_directory(kTemplates)) GTEST_SKIP() << "no " << kTemplates;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kTemplates)) {
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  const std::string model = (*dir_ / (arch + ".gguf")).string();
  ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "--arch", arch, "-o", model}), 0);
  const bool add_bos = arch == "llama";

  struct Case {
    std::string label;
    std::string prompt;  // the server's answer
  };
  std::vector<Case> cases;
  std::vector<jinja::reference::ReferenceCase> reference;
  std::vector<std::string> bos_of_case;
  int skipped = 0;
  for (const fs::path& file : files) {
    ServerProcess s({"-m", model, "-t", "1", "-c", "512", "--jinja", "--chat-template-file",
                     file.string(), "--chat-template-kwargs", kServerKwargs});
    ASSERT_GT(s.port(), 0) << file;
    const Reply props = get(s, "/props");
    ASSERT_EQ(props.status, 200) << props.raw;
    const std::string source = slurp(file.string());
    EXPECT_EQ(props.body["chat_template"], source) << file;
    const Json& caps = props.body["chat_template_caps"];
    ASSERT_TRUE(caps.is_object()) << props.raw;
    const std::string bos = props.body["bos_token"];
    const std::string eos = props.body["eos_token"];
    const bool system_role = caps["supports_system_role"];
    const bool object_arguments = caps["requires_object_arguments"];

    for (const Conversation& c : kConversations) {
      // A system message is merged into the next one where the template has no system role:
      // the request's messages are then not the template's (ChatFormat tests check that).
      if (c.has_system && !system_role) {
        skipped += std::size(kVariants);
        continue;
      }
      for (const Variant& v : kVariants) {
        Dict body;
        const Value messages = json_value(c.messages);
        body.set(Value("messages"), messages);
        if (v.tools) body.set(Value("tools"), json_value(kWeatherTools));
        body.set(Value("add_generation_prompt"), Value(v.add_generation_prompt));
        if (*v.request_kwargs)
          body.set(Value("chat_template_kwargs"), json_value(v.request_kwargs));
        const std::string label = file.filename().string() + " / " + c.name + v.name;
        const Reply r = post(s, "/apply-template", testing::dumps(Value(body)));

        Dict ctx;
        ctx.set(Value("messages"),
                c.has_tool_calls && object_arguments ? with_object_arguments(messages) : messages);
        if (v.tools) ctx.set(Value("tools"), json_value(kWeatherTools));
        ctx.set(Value("add_generation_prompt"), Value(v.add_generation_prompt));
        ctx.set(Value("bos_token"), Value(bos));
        ctx.set(Value("eos_token"), Value(eos));
        ctx.set(Value("enable_thinking"), Value(true));
        const Value server_kwargs = json_value(kServerKwargs);
        for (const auto& [k, x] : server_kwargs.as_dict().items()) ctx.set(k, x);
        if (*v.request_kwargs) {
          const Value request_kwargs = json_value(v.request_kwargs);
          for (const auto& [k, x] : request_kwargs.as_dict().items()) ctx.set(k, x);
        }
        reference.push_back({source, std::move(ctx)});
        bos_of_case.push_back(add_bos ? bos : "");
        cases.push_back(
            {label, r.status == 200 ? r.body["prompt"].get<std::string>() : "\x01error " + r.raw});
      }
    }
  }

  std::string why;
  const auto want = jinja::reference::render_with_jinja2(reference, why);
  if (!want) GTEST_SKIP() << why;
  int equal = 0;
  int refused = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const bool ours_ok = !cases[i].prompt.starts_with("\x01error ");
    if (!(*want)[i].ok) {
      // The template refuses the conversation: so must the server (400, the reason said).
      EXPECT_FALSE(ours_ok) << cases[i].label << ": jinja2 raised " << (*want)[i].text;
      if (!ours_ok) ++refused;
      continue;
    }
    std::string expected = (*want)[i].text;
    if (!bos_of_case[i].empty() && expected.starts_with(bos_of_case[i])) {
      expected.erase(0, bos_of_case[i].size());
    }
    EXPECT_EQ(cases[i].prompt, expected) << cases[i].label;
    if (cases[i].prompt == expected) ++equal;
  }
  std::printf(
      "[ jinja2   ] %s: %zu templates, %zu cases: %d equal, %d refused by both, %d "
      "skipped (system role)\n",
      arch.c_str(), files.size(), cases.size(), equal, refused, skipped);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, ServerTemplateTest, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace strata::server::itest
