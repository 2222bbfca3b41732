// Chat template rendering, which runs on every chat request before the prompt is tokenized.
//
//   BM_ChatTemplateParse/<t>     parse and probe a template (once per model load)
//   BM_ChatTemplateRender/<t>/n  render a chat of n messages (system, then user/assistant turns
//                                with reasoning in the answers) with two tools
// Templates are read from $STRATA_SHARED_DIR/templates (default: ../shared, run from the
// source tree or build/); a missing one skips its benchmark. Nothing here is asserted.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include "jinja/json.h"
#include "model/chat_template.h"

namespace strata {
namespace {

using jinja::Dict;
using jinja::Value;

// The template's text, or "" when it is not found.
std::string template_text(const char* file) {
  const char* env = std::getenv("STRATA_SHARED_DIR");
  // Run from the source tree or from build/: ../shared sits next to the sources.
  for (std::string dir :
       {std::string(env ? env : ""), std::string("../shared"), std::string("../../shared")}) {
    if (dir.empty()) continue;
    std::ifstream in(dir + "/templates/" + file, std::ios::binary);
    if (!in) continue;
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  return "";
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the weather.",
   "parameters": {"type": "object", "properties": {"location": {"type": "string"},
   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search the web.",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
   "required": ["query"]}}}])";

ChatInputs chat_of(int n_messages) {
  std::vector<Value> messages;
  Dict system;
  system.set(Value("role"), Value("system"));
  system.set(Value("content"), Value("You are a helpful assistant. Answer briefly."));
  messages.emplace_back(std::move(system));
  for (int i = 1; i < n_messages; ++i) {
    Dict m;
    const bool user = i % 2 == 1;
    m.set(Value("role"), Value(user ? "user" : "assistant"));
    std::string text = user ? "Question number " + std::to_string(i) +
                                  ": what is the weather like, and why is the sky blue?"
                            : "<think>\nThe user asks about the weather and the sky.\n</think>\n\n"
                              "It is sunny; the sky is blue because of Rayleigh scattering.";
    m.set(Value("content"), Value(std::move(text)));
    messages.emplace_back(std::move(m));
  }
  ChatInputs in;
  in.messages = Value::list(std::move(messages));
  in.tools = *jinja::parse_json(kTools, 16);
  std::tm now{};
  now.tm_year = 124;
  now.tm_mday = 1;
  in.now = now;
  return in;
}

void BM_ChatTemplateParse(benchmark::State& state, const char* file) {
  const std::string text = template_text(file);
  if (text.empty()) {
    state.SkipWithError("template not found (set STRATA_SHARED_DIR)");
    return;
  }
  for (auto _ : state) {
    Result<ChatTemplate> t = ChatTemplate::from_jinja(text, "<s>", "</s>");
    benchmark::DoNotOptimize(t);
  }
}

void BM_ChatTemplateRender(benchmark::State& state, const char* file) {
  const std::string text = template_text(file);
  Result<ChatTemplate> t = ChatTemplate::from_jinja(text, "<s>", "</s>");
  if (text.empty() || !t) {
    state.SkipWithError("template not found (set STRATA_SHARED_DIR)");
    return;
  }
  const ChatInputs in = chat_of(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    Result<std::string> out = t->apply(in);
    if (!out) {
      state.SkipWithError(out.status().message().c_str());
      return;
    }
    bytes = out->size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["prompt_bytes"] = static_cast<double>(bytes);
}

BENCHMARK_CAPTURE(BM_ChatTemplateParse, qwen3, "Qwen-Qwen3-0.6B.jinja");
BENCHMARK_CAPTURE(BM_ChatTemplateParse, llama31, "meta-llama-Llama-3.1-8B-Instruct.jinja");
BENCHMARK_CAPTURE(BM_ChatTemplateRender, qwen3, "Qwen-Qwen3-0.6B.jinja")->Arg(2)->Arg(20)->Arg(200);
BENCHMARK_CAPTURE(BM_ChatTemplateRender, llama31, "meta-llama-Llama-3.1-8B-Instruct.jinja")
    ->Arg(20);
BENCHMARK_CAPTURE(BM_ChatTemplateRender, nemo, "mistralai-Mistral-Nemo-Instruct-2407.jinja")
    ->Arg(21);

}  // namespace
}  // namespace strata
