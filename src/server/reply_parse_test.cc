#include "server/reply_parse.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace strata::server {
namespace {

using F = ToolCallFormat;
using R = ReasoningFormat;

struct Call {
  std::string name, arguments, id = "";
};

struct Case {
  const char* what;
  F format;
  R reasoning;
  bool forced_open;
  std::string text;
  std::string content;
  std::string reasoning_text;
  std::vector<Call> calls;
  bool parse_tool_calls = true;  // false: the request had no tools
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {"plain content", F::kHermes, R::kAuto, false, "Hello there.", "Hello there.", "", {}},
      {"no format: markers are content",
       F::kNone,
       R::kNone,
       false,
       "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>",
       "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>",
       "",
       {}},
      {"hermes one call after text",
       F::kHermes,
       R::kAuto,
       false,
       "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>",
       "Let me look.\n",
       "",
       {{"get_weather", "{\"city\":\"Paris\"}"}}},
      {"hermes two calls",
       F::kHermes,
       R::kAuto,
       false,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
       "",
       "",
       {{"a", "{\"x\":1}"}, {"b", "{}"}}},
      {"hermes: stringified arguments kept",
       F::kHermes,
       R::kAuto,
       false,
       "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 2}\"}</tool_call>",
       "",
       "",
       {{"a", "{\"k\": 2}"}}},
      {"hermes: JSON that is not a call is content",
       F::kHermes,
       R::kAuto,
       false,
       "<tool_call>{\"x\": 1}</tool_call> done",
       "<tool_call>{\"x\": 1}</tool_call> done",
       "",
       {}},
      {"qwen3: think then call",
       F::kHermes,
       R::kDeepseek,
       false,
       "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
       "{\"c\": \"Oslo\"}}\n</tool_call>",
       "",
       "Need the weather.",
       {{"w", "{\"c\":\"Oslo\"}"}}},
      {"reasoning none keeps think in content",
       F::kNone,
       R::kNone,
       false,
       "<think>hmm</think>Answer",
       "<think>hmm</think>Answer",
       "",
       {}},
      {"deepseek-legacy copies the block",
       F::kNone,
       R::kDeepseekLegacy,
       false,
       "<think>hmm</think>Answer",
       "<think>hmm</think>Answer",
       "hmm",
       {}},
      {"forced open think (R1 prompt)",
       F::kDeepSeekR1,
       R::kAuto,
       true,
       "I should add.\n</think>\n\nThe sum is 4.",
       "The sum is 4.",
       "I should add.",
       {}},
      {"unclosed think is all reasoning",
       F::kNone,
       R::kDeepseek,
       false,
       "<think>still going",
       "",
       "still going",
       {}},
      {"llama3 call",
       F::kLlama3,
       R::kNone,
       false,
       "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}",
       "",
       "",
       {{"get_time", "{\"tz\":\"UTC\"}"}}},
      {"llama3 typed call and a second one",
       F::kLlama3,
       R::kNone,
       false,
       "{\"type\": \"function\", \"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
       "\"parameters\": {\"n\": 3}}",
       "",
       "",
       {{"a", "{}"}, {"b", "{\"n\":3}"}}},
      {"llama3 prose is content",
       F::kLlama3,
       R::kNone,
       false,
       "It is noon.",
       "It is noon.",
       "",
       {}},
      {"llama3 call followed by prose is content",
       F::kLlama3,
       R::kNone,
       false,
       "{\"name\": \"now\", \"parameters\": {}} is what I would call.",
       "{\"name\": \"now\", \"parameters\": {}} is what I would call.",
       "",
       {}},
      {"llama3 JSON without parameters is content",
       F::kLlama3,
       R::kNone,
       false,
       "{\"name\": \"x\"}",
       "{\"name\": \"x\"}",
       "",
       {}},
      {"mistral array with ids",
       F::kMistral,
       R::kNone,
       false,
       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abc123XYZ\"}, "
       "{\"name\": \"g\", \"arguments\": {}, \"id\": \"def456UVW\"}]",
       "",
       "",
       {{"f", "{\"a\":1}", "abc123XYZ"}, {"g", "{}", "def456UVW"}}},
      {"mistral name[ARGS] form",
       F::kMistral,
       R::kNone,
       false,
       "Sure. [TOOL_CALLS]search[ARGS]{\"q\": \"cats\"}",
       "Sure. ",
       "",
       {{"search", "{\"q\":\"cats\"}"}}},
      {"functionary v3.2 content then call",
       F::kFunctionaryV32,
       R::kNone,
       false,
       "all\nChecking now.>>>get_weather\n{\"location\": \"Rome\"}",
       "Checking now.",
       "",
       {{"get_weather", "{\"location\":\"Rome\"}"}}},
      {"functionary v3.2 content only",
       F::kFunctionaryV32,
       R::kNone,
       false,
       "all\nHi there",
       "Hi there",
       "",
       {}},
      {"functionary v3.1",
       F::kFunctionaryV31,
       R::kNone,
       false,
       "Ok <function=lookup>{\"id\": 7}</function>",
       "Ok ",
       "",
       {{"lookup", "{\"id\":7}"}}},
      {"deepseek r1 calls",
       F::kDeepSeekR1,
       R::kAuto,
       false,
       "<think>use tool</think>\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
       "get_weather\n```json\n{\"city\": \"Lima\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>"
       "function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "",
       "use tool",
       {{"get_weather", "{\"city\":\"Lima\"}"}, {"now", "{}"}}},
      {"deepseek r1 call that cannot be read stays in the content",
       F::kDeepSeekR1,
       R::kAuto,
       false,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n{}"
       "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n{not json} and more",
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n{not json} and more",
       "",
       {{"now", "{}"}}},
      {"deepseek r1 block without a separator stays in the content",
       F::kDeepSeekR1,
       R::kAuto,
       false,
       "Sure. <｜tool▁calls▁begin｜>garbled",
       "Sure. <｜tool▁calls▁begin｜>garbled",
       "",
       {}},
      {"unfinished call at the end is content",
       F::kHermes,
       R::kAuto,
       false,
       "x <tool_call>{\"name\": \"a\", \"argu",
       "x <tool_call>{\"name\": \"a\", \"argu",
       "",
       {}},
      {"utf-8 content",
       F::kHermes,
       R::kAuto,
       false,
       "Grüße, 日本 🦙",
       "Grüße, 日本 🦙",
       "",
       {}},
      {"gpt-oss final only",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>final<|message|>The answer is 4.<|return|>",
       "The answer is 4.",
       "",
       {}},
      {"gpt-oss analysis then final",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>The user asks 2+2. Easy.<|end|><|start|>assistant"
       "<|channel|>final<|message|>The answer is 4.<|return|>",
       "The answer is 4.",
       "The user asks 2+2. Easy.",
       {}},
      {"gpt-oss analysis with reasoning format deepseek",
       F::kGptOss,
       R::kDeepseek,
       false,
       "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
       "<|message|>Done.",
       "Done.",
       "Think.",
       {}},
      {"gpt-oss reasoning none keeps the analysis message in content",
       F::kGptOss,
       R::kNone,
       false,
       "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
       "<|message|>Done.<|return|>",
       "<|channel|>analysis<|message|>Think.<|end|>Done.",
       "",
       {}},
      {"gpt-oss deepseek-legacy copies the analysis message",
       F::kGptOss,
       R::kDeepseekLegacy,
       false,
       "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
       "<|message|>Done.",
       "<|channel|>analysis<|message|>Think.<|end|>Done.",
       "Think.",
       {}},
      {"gpt-oss call, recipient after the channel",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
       "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
       "",
       "Need weather.",
       {{"get_weather", "{\"city\": \"Paris\"}"}}},
      {"gpt-oss call, recipient after the role, no end token",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant "
       "to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\":"
       "\"Paris\"}",
       "",
       "Need weather.",
       {{"get_weather", "{\"city\":\"Paris\"}"}}},
      {"gpt-oss two calls",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>commentary to=functions.a json<|message|>{\"x\": 1}<|call|><|start|>assistant"
       "<|channel|>commentary to=functions.b <|constrain|>json<|message|>{}<|call|>",
       "",
       "",
       {{"a", "{\"x\": 1}"}, {"b", "{}"}}},
      {"gpt-oss commentary without a recipient is content",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>commentary<|message|>Checking the forecast. <|end|><|start|>assistant"
       "<|channel|>final<|message|>Sunny.<|return|>",
       "Checking the forecast. Sunny.",
       "",
       {}},
      {"gpt-oss off-format text is content",
       F::kGptOss,
       R::kAuto,
       false,
       "Plain <text> with <|no|> channels.",
       "Plain <text> with <|no|> channels.",
       "",
       {}},
      {"gpt-oss cut mid-marker keeps the text",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|chan",
       "<|start|>assistant<|chan",
       "Think.",
       {}},
      {"gpt-oss cut mid-message",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>"
       "The ans",
       "The ans",
       "Think.",
       {}},
      {"gpt-oss cut mid-analysis",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>The user wa",
       "",
       "The user wa",
       {}},
      {"gpt-oss header without a message is content",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>final<|end|>Hi",
       "<|channel|>final<|end|>Hi",
       "",
       {}},
      {"gpt-oss arguments that are not JSON stay content",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{city: Paris}<|call|>",
       "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{city: Paris}<|call|>",
       "",
       {}},
      {"gpt-oss built-in tool message is content",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>Search.<|end|><|start|>assistant<|channel|>analysis "
       "to=browser.search<|message|>{\"query\": \"x\"}<|call|>",
       "<|start|>assistant<|channel|>analysis to=browser.search<|message|>{\"query\": \"x\"}"
       "<|call|>",
       "Search.",
       {}},
      {"gpt-oss without tools: channels parsed, the call stays content",
       F::kGptOss,
       R::kAuto,
       false,
       "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>commentary "
       "to=functions.f <|constrain|>json<|message|>{}<|call|>",
       "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}"
       "<|call|>",
       "Hm.",
       {},
       false},
      {"hermes without tools is content",
       F::kHermes,
       R::kAuto,
       false,
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
       "",
       {},
       false},
  };
  return kCases;
}

ReplyParseOptions options(const Case& c) {
  ReplyParseOptions o{c.format, c.reasoning, c.forced_open};
  o.parse_tool_calls = c.parse_tool_calls;
  return o;
}

void expect_reply(const Case& c, const ParsedReply& got, const char* how) {
  EXPECT_EQ(got.content, c.content) << c.what << " (" << how << ")";
  EXPECT_EQ(got.reasoning, c.reasoning_text) << c.what << " (" << how << ")";
  ASSERT_EQ(got.tool_calls.size(), c.calls.size()) << c.what << " (" << how << ")";
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, c.calls[i].name) << c.what;
    EXPECT_EQ(got.tool_calls[i].arguments, c.calls[i].arguments) << c.what;
    if (!c.calls[i].id.empty()) {
      EXPECT_EQ(got.tool_calls[i].id, c.calls[i].id) << c.what;
    }
  }
}

TEST(ReplyParse, EveryFormat) {
  for (const Case& c : cases()) expect_reply(c, parse_reply(c.text, options(c), false), "whole");
}

// Streamed byte by byte, the deltas add up to the whole parse, a tool call is sent once and
// whole, and no delta splits a UTF-8 character.
TEST(ReplyParse, StreamingByteByByteAddsUpToTheWhole) {
  for (const Case& c : cases()) {
    ReplyStream stream(options(c), "call_");
    std::string content, reasoning;
    std::vector<ToolCall> calls;
    for (size_t n = 0; n <= c.text.size(); ++n) {
      const ReplyDelta d = stream.update(std::string_view(c.text).substr(0, n), n == c.text.size());
      for (const std::string* s : {&d.content, &d.reasoning}) {
        if (!s->empty()) {
          const auto last = static_cast<uint8_t>(s->back());
          EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80)
              << c.what << ": delta ends mid-character";
        }
      }
      content += d.content;
      reasoning += d.reasoning;
      EXPECT_EQ(d.first_tool_index, calls.size()) << c.what;
      for (const ToolCall& t : d.tool_calls) calls.push_back(t);
    }
    ParsedReply got{content, reasoning, calls};
    expect_reply(c, got, "streamed");
    if (calls.size() != c.calls.size()) continue;  // reported above
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_FALSE(calls[i].id.empty()) << c.what;
      if (c.calls[i].id.empty()) {
        EXPECT_EQ(calls[i].id, "call_" + std::to_string(i)) << c.what;
      }
    }
  }
}

// Cut anywhere, a reply parses (partially) to a prefix of its whole parse: content and
// reasoning only grow, and the calls seen so far are the first ones, complete.
TEST(ReplyParse, EveryCutParsesToAPrefixOfTheWhole) {
  for (const Case& c : cases()) {
    const ParsedReply whole = parse_reply(c.text, options(c), false);
    for (size_t n = 0; n <= c.text.size(); ++n) {
      const ParsedReply part = parse_reply(std::string_view(c.text).substr(0, n), options(c), true);
      EXPECT_TRUE(whole.content.starts_with(part.content))
          << c.what << " cut at " << n << ": '" << part.content << "'";
      EXPECT_TRUE(whole.reasoning.starts_with(part.reasoning))
          << c.what << " cut at " << n << ": '" << part.reasoning << "'";
      ASSERT_LE(part.tool_calls.size(), whole.tool_calls.size()) << c.what << " cut at " << n;
      for (size_t i = 0; i < part.tool_calls.size(); ++i) {
        EXPECT_EQ(part.tool_calls[i].name, whole.tool_calls[i].name) << c.what << " cut at " << n;
        EXPECT_EQ(part.tool_calls[i].arguments, whole.tool_calls[i].arguments)
            << c.what << " cut at " << n;
      }
    }
  }
}

// The same for harmony text a model could garble: one to three messages, each piece of them
// sometimes dropped or followed by a stray fragment, under each reasoning format, with and
// without tool calls. A fixed seed: a failure reproduces.
TEST(ReplyParse, GarbledHarmonyCutsParseToPrefixes) {
  std::mt19937 rng(7);
  auto pick = [&](std::initializer_list<const char*> options) {
    return std::string(options.begin()[rng() % options.size()]);
  };
  int n_calls = 0;
  for (int round = 0; round < 1000; ++round) {
    std::vector<std::string> pieces;
    for (size_t m = 0, n = 1 + rng() % 3; m < n; ++m) {
      const std::string to = pick({"", " to=functions.f", " to=functions.f", " to=browser.search"});
      const bool to_after_role = rng() % 2 == 0;
      if (rng() % 2 == 0) pieces.push_back("<|start|>assistant" + (to_after_role ? to : ""));
      pieces.push_back("<|channel|>");
      pieces.push_back(pick({"analysis", "final", "commentary"}) + (to_after_role ? "" : to));
      pieces.push_back(pick({"", " <|constrain|>json", " json"}));
      pieces.push_back("<|message|>");
      pieces.push_back(pick({"{\"a\": 1}", "{}", "text ", "{a", "日本", "<|"}));
      pieces.push_back(pick({"<|end|>", "<|return|>", "<|call|>", ""}));
    }
    std::string text;
    for (const std::string& piece : pieces) {
      if (rng() % 12 != 0) text += piece;
      if (rng() % 12 == 0) text += pick({"<|", "|>", " ", "<|end", "x"});
    }
    ReplyParseOptions o;
    o.tools = F::kGptOss;
    o.reasoning = std::array{R::kAuto, R::kNone, R::kDeepseekLegacy}[round % 3];
    o.parse_tool_calls = round % 2 == 0;
    const ParsedReply whole = parse_reply(text, o, false);
    n_calls += static_cast<int>(whole.tool_calls.size());
    for (size_t n = 0; n <= text.size(); ++n) {
      const ParsedReply part = parse_reply(std::string_view(text).substr(0, n), o, true);
      ASSERT_TRUE(whole.content.starts_with(part.content)) << text << " cut at " << n;
      ASSERT_TRUE(whole.reasoning.starts_with(part.reasoning)) << text << " cut at " << n;
      ASSERT_LE(part.tool_calls.size(), whole.tool_calls.size()) << text << " cut at " << n;
      for (size_t i = 0; i < part.tool_calls.size(); ++i) {
        ASSERT_EQ(part.tool_calls[i].arguments, whole.tool_calls[i].arguments) << text;
      }
    }
  }
  EXPECT_GT(n_calls, 30);  // the texts do hold calls: the test covers them
}

TEST(ReplyParse, FormatFromTheTemplate) {
  EXPECT_EQ(tool_call_format_detect("{{- '<tool_call>\\n' }}{{ tool_call | tojson }}"), F::kHermes);
  EXPECT_EQ(tool_call_format_detect("[AVAILABLE_TOOLS]...[TOOL_CALLS]"), F::kMistral);
  EXPECT_EQ(tool_call_format_detect("<|start_header_id|>ipython<|end_header_id|>"), F::kLlama3);
  EXPECT_EQ(tool_call_format_detect("<｜tool▁calls▁begin｜>"), F::kDeepSeekR1);
  EXPECT_EQ(tool_call_format_detect(">>>all"), F::kFunctionaryV32);
  EXPECT_EQ(tool_call_format_detect("{%- if tools %}...{{- \"<|start|>assistant<|channel|>\" + "
                                    "channel + \"<|message|>\" }}"),
            F::kGptOss);
  EXPECT_EQ(tool_call_format_detect("{{ '<|channel|>' }} {% if tools %}"), F::kHermes);
  EXPECT_EQ(tool_call_format_name(F::kGptOss), "gpt-oss");
  // Every format has a row of its own in the format table: a name, and distinct from the others.
  std::set<std::string_view> names;
  for (auto f = static_cast<uint8_t>(F::kNone); f <= static_cast<uint8_t>(F::kGptOss); ++f) {
    const std::string_view name = tool_call_format_name(static_cast<F>(f));
    EXPECT_NE(name, "?") << int{f};
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_EQ(tool_call_format_detect("{% for message in messages %}{{ message.content }}"),
            F::kNone);
  EXPECT_EQ(tool_call_format_detect("{% if tools %}{{ tools | tojson }}{% endif %}"), F::kHermes);
}

// parallel_tool_calls: false keeps the first call, whole and streamed.
TEST(ReplyParse, OneCallUnlessParallel) {
  const std::string text =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  ReplyParseOptions o;
  o.tools = F::kHermes;
  EXPECT_EQ(parse_reply(text, o, false).tool_calls.size(), 2u);
  o.parallel_tool_calls = false;
  const ParsedReply one = parse_reply(text, o, false);
  ASSERT_EQ(one.tool_calls.size(), 1u);
  EXPECT_EQ(one.tool_calls[0].name, "a");
  ReplyStream stream(o, "call_");
  size_t sent = 0;
  for (size_t n = 0; n <= text.size(); ++n) {
    sent += stream.update(std::string_view(text).substr(0, n), n == text.size()).tool_calls.size();
  }
  EXPECT_EQ(sent, 1u);
}

TEST(ReplyParse, ReasoningFormatNames) {
  EXPECT_EQ(*reasoning_format_from_name("deepseek"), R::kDeepseek);
  EXPECT_EQ(*reasoning_format_from_name("none"), R::kNone);
  const auto bad = reasoning_format_from_name("thinky");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'thinky'"), std::string::npos);
}

}  // namespace
}  // namespace strata::server
