// Tool calls end to end: the real `strata serve` over scripted models (gguf gen --script: the
// greedy reply is a known tool call in a model family's format) with that family's real chat
// template, through the OpenAI chat API, Anthropic's Messages API and OpenAI's Responses API,
// collected and streamed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

// A model family: its template (from the shared folder, or its text) and a tool call in its
// format.
struct Family {
  const char* name;
  const char* template_file;
  std::vector<std::string> script;
  const char* template_text = nullptr;  // written out and used instead of template_file
};

const Family kHermes = {"hermes",
                        "Qwen-Qwen2.5-7B-Instruct.jinja",
                        {"<tool_call>", "\n{\"name\": ", "\"get_weather\", ",
                         "\"arguments\": ", "{\"city\": ", "\"Paris\"}}", "\n</tool_call>"}};
const Family kLlama3 = {
    "llama3",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    {"{\"name\": ", "\"get_weather\", ", "\"parameters\": ", "{\"city\": ", "\"Paris\"}}"}};

// gpt-oss's harmony format: the template is a minimal one of the same shape (the real one is
// not in the shared folder), the reply thinks on the analysis channel, then calls. <|call|> ends
// generation (the tokenizer takes it as end-of-generation), so the text stops before it.
const Family kGptOss = {
    "gpt-oss",
    "gpt-oss (inline)",
    {"<|channel|>analysis<|message|>", "Need weather.", "<|end|><|start|>assistant",
     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
     "{\"city\": ", "\"Paris\"}", "<|call|>"},
    R"({%- if tools %}<|start|>developer<|message|>{{ tools | tojson }}<|end|>{%- endif %}
{%- for m in messages %}
{%- if m.role == "assistant" %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif %}
{%- endfor %}<|start|>assistant)"};

// Models of seeded random weights (no script): unconstrained, what they write is never a call.
const Family kHermesRandom = {"hermes-random", "Qwen-Qwen2.5-7B-Instruct.jinja", {}};
const Family kLlama3Random = {"llama3-random", "meta-llama-Llama-3.1-8B-Instruct.jinja", {}};

// A Hermes reply that says something, opens a call, then misspells the tool and its argument.
const Family kHermesMisspelled = {
    "hermes-misspelled",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    {"Let me check. ", "<tool_call>", "\n{\"name\": ", "\"get_wether\", ",
     "\"arguments\": ", "{\"town\": ", "\"Paris\"}}", "\n</tool_call>"}};

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather",
    "description": "The weather in a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

class ServerToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::temp_directory_path() / ("strata_tools_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // The server of a family, or nullptr (test skipped) when its template is absent.
  static std::unique_ptr<ServerProcess> serve(const Family& f, std::vector<std::string> more = {}) {
    std::string tmpl = std::string(STRATA_SHARED_DIR) + "/templates/" + f.template_file;
    if (f.template_text != nullptr) {
      tmpl = (*dir_ / (std::string(f.name) + ".jinja")).string();
      std::ofstream(tmpl) << f.template_text;
    }
    if (!fs::exists(tmpl)) return nullptr;
    const std::string model = (*dir_ / (std::string(f.name) + ".gguf")).string();
    if (!fs::exists(model)) {
      std::vector<std::string> gen = {STRATA_BINARY, "gguf",   "gen",       "-o",  model,
                                      "--n-embd",    "320",    "--n-vocab", "300", "--n-layer",
                                      "1",           "--n-ff", "64"};
      if (!f.script.empty()) {
        const std::string script = (*dir_ / (std::string(f.name) + ".json")).string();
        std::ofstream(script) << Json(f.script).dump();
        gen.insert(gen.end(), {"--script", script});
      }
      EXPECT_EQ(run_command(gen), 0);
    }
    std::vector<std::string> args = {"-m", model, "-t", "1", "-c", "4096", "--chat-template-file",
                                     tmpl};
    args.insert(args.end(), more.begin(), more.end());
    return std::make_unique<ServerProcess>(args);
  }

  static fs::path* dir_;
};

fs::path* ServerToolsTest::dir_ = nullptr;

#define SERVE_OR_SKIP(var, family, ...)                                               \
  std::unique_ptr<ServerProcess> var = serve(family, ##__VA_ARGS__);                  \
  if (var == nullptr)                                                                 \
    GTEST_SKIP() << (family).template_file << " is absent from " << STRATA_SHARED_DIR \
                 << "/templates";                                                     \
  ASSERT_GT(var->port(), 0)

std::string chat_body(const std::string& more) {
  return R"({"messages": [{"role": "user", "content": "Weather in Paris?"}],
             "temperature": 0, "max_tokens": 64)" +
         more + "}";
}

void expect_weather_call(const Json& call) {
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris"})"));
  EXPECT_FALSE(call["id"].get<std::string>().empty());
}

// What a streamed chat completion's deltas add up to.
struct StreamedChat {
  bool done = false;  // the stream ended with [DONE]
  std::string content, reasoning, finish;
  std::vector<Json> calls;
};

StreamedChat collect_chat_stream(const std::string& raw) {
  StreamedChat out;
  for (const Json& e : sse_events(raw, &out.done)) {
    const Json& d = e["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) out.content += d["content"];
    if (d.contains("reasoning_content")) out.reasoning += d["reasoning_content"];
    if (d.contains("tool_calls")) {
      for (const Json& c : d["tool_calls"]) out.calls.push_back(c);
    }
    if (!e["choices"][0]["finish_reason"].is_null()) out.finish = e["choices"][0]["finish_reason"];
  }
  return out;
}

TEST_F(ServerToolsTest, ChatReturnsToolCallsInEachFormat) {
  for (const Family* f : {&kHermes, &kLlama3}) {
    SCOPED_TRACE(f->name);
    SERVE_OR_SKIP(s, *f);
    const Reply r =
        post(*s, "/v1/chat/completions", chat_body(std::string(R"(, "tools": )") + kTools));
    ASSERT_EQ(r.status, 200) << r.raw;
    const Json& choice = r.body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_TRUE(choice["message"]["content"].is_null()) << r.raw;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.raw;
    expect_weather_call(choice["message"]["tool_calls"][0]);

    // Without tools (or with tool_choice none) the same text is plain content.
    std::string script;
    for (const std::string& p : f->script) script += p;
    const Reply plain = post(*s, "/v1/chat/completions", chat_body(""));
    EXPECT_EQ(plain.body["choices"][0]["message"]["content"], script);
    EXPECT_EQ(plain.body["choices"][0]["finish_reason"], "stop");
    const Reply none =
        post(*s, "/v1/chat/completions",
             chat_body(std::string(R"(, "tool_choice": "none", "tools": )") + kTools));
    EXPECT_EQ(none.body["choices"][0]["message"]["content"], script);
  }
}

// tool_choice "required" or a named function constrains generation to calls of the tools
// (server/tool_grammar.h): a model of random weights, sampled, calls them with arguments valid
// under their schemas, while the same requests with "auto" get no call at all.
TEST_F(ServerToolsTest, RequiredToolChoiceForcesCallsOfTheTools) {
  const std::string tools = R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12},
                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])";
  const auto expect_valid = [](const Json& call, const std::string& only) {
    SCOPED_TRACE(call.dump());
    const std::string name = call["function"]["name"];
    const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
    if (!only.empty()) {
      EXPECT_EQ(name, only);
    }
    if (name == "get_weather") {
      ASSERT_TRUE(args.contains("city") && args["city"].is_string());
      const size_t n = args["city"].get<std::string>().size();  // code points <= bytes
      EXPECT_GE(n, 1u);
      for (const auto& [k, v] : args.items()) EXPECT_TRUE(k == "city" || k == "days") << k;
      if (args.contains("days")) {
        ASSERT_TRUE(args["days"].is_number_integer());
        EXPECT_GE(args["days"].get<int>(), 1);
        EXPECT_LE(args["days"].get<int>(), 7);
      }
    } else {
      EXPECT_EQ(name, "get_time");
      ASSERT_TRUE(args.contains("zone"));
      EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET");
    }
  };
  for (const Family* f : {&kHermesRandom, &kLlama3Random}) {
    SCOPED_TRACE(f->name);
    SERVE_OR_SKIP(s, *f);
    int unforced_calls = 0;
    for (int seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(seed);
      const std::string common =
          R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "temperature": 1,
              "max_tokens": 600, "parallel_tool_calls": false, "seed": )" +
          std::to_string(seed) + R"(, "tools": )" + tools;
      for (const char* choice :
           {R"("required")", R"({"type": "function", "function": {"name": "get_time"}})"}) {
        const Reply r =
            post(*s, "/v1/chat/completions", common + R"(, "tool_choice": )" + choice + "}");
        ASSERT_EQ(r.status, 200) << r.raw;
        const Json& choice0 = r.body["choices"][0];
        EXPECT_EQ(choice0["finish_reason"], "tool_calls") << r.raw;
        const Json calls = choice0["message"].value("tool_calls", Json::array());
        ASSERT_EQ(calls.size(), 1u) << r.raw;
        expect_valid(calls[0], choice[0] == '{' ? "get_time" : std::string());
      }
      const Reply a = post(*s, "/v1/chat/completions", common + R"(, "tool_choice": "auto"})");
      ASSERT_EQ(a.status, 200) << a.raw;
      unforced_calls += static_cast<int>(
          a.body["choices"][0]["message"].value("tool_calls", Json::array()).size());
    }
    EXPECT_EQ(unforced_calls, 0);
  }
}

// Under tool_choice auto the tools' grammar is lazy: the text before a call's opening is free,
// and once "<tool_call>" comes, what follows is a call of the tools. So the scripted model's
// misspelled call becomes a call of get_weather with valid arguments (greedy: the best tokens
// the grammar allows), its text before stays content, and without tools the script is
// unchanged.
TEST_F(ServerToolsTest, AutoToolChoiceConstrainsACallOnceItOpens) {
  SERVE_OR_SKIP(s, kHermesMisspelled);
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "minLength": 1,
      "maxLength": 12}}, "required": ["city"], "additionalProperties": false}}}])";
  const std::string common = R"({"messages": [{"role": "user", "content": "Weather in Paris?"}],
      "temperature": 0, "parallel_tool_calls": false, "tools": )" +
                             tools;
  const auto expect_weather = [](const Json& message) {
    const Json calls = message.value("tool_calls", Json::array());
    ASSERT_EQ(calls.size(), 1u) << message.dump();
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    const Json args = Json::parse(calls[0]["function"]["arguments"].get<std::string>());
    ASSERT_EQ(args.size(), 1u) << args.dump();
    ASSERT_TRUE(args["city"].is_string());
    EXPECT_FALSE(args["city"].get<std::string>().empty());
  };
  const Reply a = post(*s, "/v1/chat/completions", common + R"(, "max_tokens": 300})");
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["choices"][0]["finish_reason"], "tool_calls") << a.raw;
  EXPECT_EQ(a.body["choices"][0]["message"]["content"], "Let me check. ") << a.raw;
  expect_weather(a.body["choices"][0]["message"]);

  // Streamed: the same call.
  const Reply st =
      post(*s, "/v1/chat/completions", common + R"(, "max_tokens": 300, "stream": true})");
  const StreamedChat sc = collect_chat_stream(st.raw);
  ASSERT_EQ(sc.calls.size(), 1u) << st.raw;
  EXPECT_EQ(sc.calls[0]["function"]["arguments"],
            a.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]);

  // Required: no text before the call. Off its script the model's logits tie, and greedy takes
  // the lowest allowed id, a tab: every optional whitespace of the grammar is written in full.
  const Reply r = post(*s, "/v1/chat/completions",
                       common + R"(, "tool_choice": "required", "max_tokens": 1500})");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_TRUE(r.body["choices"][0]["message"]["content"].is_null()) << r.raw;
  expect_weather(r.body["choices"][0]["message"]);

  // No tools shown: nothing constrains the script.
  std::string script;
  for (const std::string& p : kHermesMisspelled.script) script += p;
  const Reply none =
      post(*s, "/v1/chat/completions", common + R"(, "max_tokens": 300, "tool_choice": "none"})");
  EXPECT_EQ(none.body["choices"][0]["message"]["content"], script) << none.raw;
}

// Tools too large for a grammar (a 1.5 MB name: past the engine's 1 MiB of rules) are served
// unconstrained, as before, not refused. The template names the Hermes syntax but renders only
// the messages, so that the prompt stays short.
TEST_F(ServerToolsTest, ToolsPastTheGrammarLimitsStayUnconstrained) {
  const Family lean = {
      "hermes-lean",
      "hermes-lean (inline)",
      {},
      "{#- tools are called in <tool_call> tags -#}{%- for m in messages %}{{ m.content }}"
      "{%- endfor %}"};
  SERVE_OR_SKIP(s, lean);
  const Json tools =
      Json::array({{{"type", "function"}, {"function", {{"name", std::string(1500000, 'n')}}}}});
  const std::string call = "<tool_call>\n{\"name\": \"" + std::string(100, 'n');
  for (const char* choice : {"\"required\"", "\"auto\""}) {
    const Reply r = post(*s, "/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 16,
                             "temperature": 0, "tool_choice": )" +
                             std::string(choice) + R"(, "tools": )" + tools.dump() + "}");
    ASSERT_EQ(r.status, 200) << choice << " " << r.raw.substr(0, 300);
    // Free text: under a grammar the reply would spell the call's opening.
    const std::string content = r.body["choices"][0]["message"].value("content", "");
    EXPECT_FALSE(call.starts_with(content)) << choice << " " << content;
  }
}

// gpt-oss: the analysis channel is reasoning whether or not the request has tools; the call
// is a call with tools (whole and streamed) and stays content as written without them or with
// parse_tool_calls false.
TEST_F(ServerToolsTest, GptOssChannelsAndCall) {
  SERVE_OR_SKIP(s, kGptOss);
  const Reply r =
      post(*s, "/v1/chat/completions", chat_body(std::string(R"(, "tools": )") + kTools));
  ASSERT_EQ(r.status, 200) << r.raw;
  const Json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null()) << r.raw;
  EXPECT_EQ(choice["message"]["reasoning_content"], "Need weather.") << r.raw;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.raw;
  expect_weather_call(choice["message"]["tool_calls"][0]);

  const Reply plain = post(*s, "/v1/chat/completions", chat_body(""));
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(plain.body["choices"][0]["message"]["reasoning_content"], "Need weather.");
  EXPECT_EQ(plain.body["choices"][0]["message"]["content"],
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
            "<|message|>{\"city\": \"Paris\"}");
  EXPECT_EQ(plain.body["choices"][0]["finish_reason"], "stop");
  const Reply off =
      post(*s, "/v1/chat/completions",
           chat_body(std::string(R"(, "parse_tool_calls": false, "tools": )") + kTools));
  EXPECT_EQ(off.body["choices"][0]["message"]["content"],
            plain.body["choices"][0]["message"]["content"])
      << off.raw;
  EXPECT_EQ(off.body["choices"][0]["message"]["reasoning_content"], "Need weather.");

  const Reply st = post(*s, "/v1/chat/completions",
                        chat_body(std::string(R"(, "stream": true, "tools": )") + kTools));
  ASSERT_EQ(st.status, 200) << st.raw;
  const StreamedChat streamed = collect_chat_stream(st.raw);
  EXPECT_TRUE(streamed.done);
  EXPECT_EQ(streamed.content, "");
  EXPECT_EQ(streamed.reasoning, "Need weather.");
  ASSERT_EQ(streamed.calls.size(), 1u);
  expect_weather_call(streamed.calls[0]);
}

// --skip-chat-parsing: the reply stays the model's text, tools or not.
TEST_F(ServerToolsTest, SkipChatParsingKeepsTheText) {
  SERVE_OR_SKIP(s, kHermes, std::vector<std::string>{"--skip-chat-parsing"});
  std::string script;
  for (const std::string& p : kHermes.script) script += p;
  const Reply r =
      post(*s, "/v1/chat/completions", chat_body(std::string(R"(, "tools": )") + kTools));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], script);
  EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ServerToolsTest, StreamedToolCallIsOneDeltaWithItsIndex) {
  SERVE_OR_SKIP(s, kHermes);
  const Reply r = post(*s, "/v1/chat/completions",
                       chat_body(std::string(R"(, "stream": true, "tools": )") + kTools));
  ASSERT_EQ(r.status, 200) << r.raw;
  const StreamedChat streamed = collect_chat_stream(r.raw);
  EXPECT_TRUE(streamed.done);
  EXPECT_EQ(streamed.content, "");
  EXPECT_EQ(streamed.finish, "tool_calls");
  ASSERT_EQ(streamed.calls.size(), 1u);
  EXPECT_EQ(streamed.calls[0]["index"], 0);
  expect_weather_call(streamed.calls[0]);
}

TEST_F(ServerToolsTest, AnthropicToolUseAndResponsesFunctionCall) {
  SERVE_OR_SKIP(s, kHermes);
  const std::string anthropic_tools = R"([{"name": "get_weather",
      "description": "The weather in a city", "input_schema": {"type": "object",
      "properties": {"city": {"type": "string"}}}}])";
  const std::string body = R"({"model": "claude", "max_tokens": 64, "temperature": 0,
      "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": )" +
                           anthropic_tools;
  const Reply m = post(*s, "/v1/messages", body + "}");
  ASSERT_EQ(m.status, 200) << m.raw;
  EXPECT_EQ(m.body["stop_reason"], "tool_use");
  const Json& block = m.body["content"].back();
  EXPECT_EQ(block["type"], "tool_use");
  EXPECT_EQ(block["name"], "get_weather");
  EXPECT_EQ(block["input"], Json::parse(R"({"city": "Paris"})"));

  const Reply ms = post(*s, "/v1/messages", body + R"(, "stream": true})");
  bool done = false;
  std::string json_text, stop_reason;
  for (const Json& e : sse_events(ms.raw, &done)) {
    if (e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use") {
      EXPECT_EQ(e["content_block"]["name"], "get_weather");
    }
    if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta") {
      json_text += e["delta"]["partial_json"].get<std::string>();
    }
    if (e["type"] == "message_delta") stop_reason = e["delta"]["stop_reason"];
  }
  EXPECT_EQ(Json::parse(json_text), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(stop_reason, "tool_use");

  const Reply r = post(*s, "/v1/responses", R"({"model": "gpt-5", "input": "Weather in Paris?",
      "temperature": 0, "tools": [{"type": "function", "name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]})");
  ASSERT_EQ(r.status, 200) << r.raw;
  const Json& item = r.body["output"].back();
  EXPECT_EQ(item["type"], "function_call");
  EXPECT_EQ(item["name"], "get_weather");
  EXPECT_EQ(Json::parse(item["arguments"].get<std::string>()), Json::parse(R"({"city":"Paris"})"));
  EXPECT_FALSE(item["call_id"].get<std::string>().empty());
}

// The second turn: the assistant's tool call and the tool's result render through the template
// (the tool result appears in the prompt), and the request's parallel_tool_calls and
// tool_choice errors are the client's.
TEST_F(ServerToolsTest, ToolResultsRenderIntoTheNextPrompt) {
  SERVE_OR_SKIP(s, kHermes);
  const std::string turn2 = std::string(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_7", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 22 C"}],
      "tools": )") + kTools +
                            "}";
  const Reply t = post(*s, "/apply-template", turn2);
  ASSERT_EQ(t.status, 200) << t.raw;
  const std::string prompt = t.body["prompt"];
  EXPECT_NE(prompt.find("sunny, 22 C"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("get_weather"), std::string::npos) << prompt;
  const Reply r = post(*s, "/v1/chat/completions", turn2);
  ASSERT_EQ(r.status, 200) << r.raw;
  expect_error(post(*s, "/v1/chat/completions",
                    chat_body(R"(, "tools": [{"type": "function", "function": {"name": "a"}}],
                                 "tool_choice": {"type": "function", "function": {"name": "b"}})")),
               400);
}

}  // namespace
}  // namespace strata::server::itest
