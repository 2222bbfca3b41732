#include "server/tool_grammar.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/grammar.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}},
  {"type": "function", "function": {"name": "find", "parameters": {"type": "object",
    "properties": {"q": {"type": "string", "format": "email"}}, "required": ["q"]}}},
  {"type": "function", "function": {"name": "code", "parameters": {"type": "object",
    "properties": {"c": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}}, "required": ["c"]}}}
])");

std::shared_ptr<const Grammar> grammar_of(const ToolGrammarOptions& o, const Json& tools = kTools) {
  std::optional<std::string> text = tool_call_grammar(tools, o);
  EXPECT_TRUE(text.has_value());
  if (!text) return nullptr;
  auto g = Grammar::parse(*text);
  EXPECT_TRUE(g.is_ok()) << g.status().message() << "\n" << *text;
  return g.is_ok() ? std::move(g).value() : nullptr;
}

// Whether the whole of `text` is a sentence of the grammar.
bool sentence(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text).is_ok() && m.complete();
}

struct SentenceCase {
  ToolCallFormat format;
  const char* text;
  std::vector<std::pair<const char*, const char*>> calls;  // name, arguments
};

// Each accepted text reads back, through the format's own parser, as exactly its calls.
TEST(ToolGrammar, SentencesParseBackAsTheCalls) {
  const std::vector<SentenceCase> cases = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>",
       {{"get_weather", R"({"city": "Paris"})"}}},
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\": "
       "\"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>",
       {{"now", "{}"}, {"get_weather", R"({"city": "Oslo", "days": 3})"}}},
      {ToolCallFormat::kLlama3,
       R"({"name": "find", "parameters": {"q": "ANY string: the format is not honoured"}})",
       {{"find", R"({"q": "ANY string: the format is not honoured"})"}}},
      {ToolCallFormat::kLlama3,
       R"({"name": "code", "parameters": {"c": "FR-75"}})",
       {{"code", R"({"c": "FR-75"})"}}},
      {ToolCallFormat::kLlama3,
       R"({"name": "now", "parameters": {}}; {"name": "now", "parameters": {}})",
       {{"now", "{}"}, {"now", "{}"}}},
      {ToolCallFormat::kFunctionaryV31,
       R"(<function=get_weather>{"city": "Rome"}</function>)",
       {{"get_weather", R"({"city": "Rome"})"}}},
      {ToolCallFormat::kFunctionaryV32,
       "now\n{}>>>get_weather\n{\"city\": \"Rome\", \"days\": 7}",
       {{"now", "{}"}, {"get_weather", R"({"city": "Rome", "days": 7})"}}},
  };
  for (const SentenceCase& c : cases) {
    SCOPED_TRACE(c.text);
    ToolGrammarOptions o;
    o.format = c.format;
    auto g = grammar_of(o);
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(sentence(g, c.text));
    ReplyParseOptions p;
    p.tools = c.format;
    const ParsedReply r = parse_reply(c.text, p, false);
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.tool_calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(r.tool_calls[i].name, c.calls[i].first);
      EXPECT_EQ(Json::parse(r.tool_calls[i].arguments), Json::parse(c.calls[i].second));
    }
  }
}

TEST(ToolGrammar, RefusesWhatIsNotACallOfTheTools) {
  ToolGrammarOptions o;
  o.format = ToolCallFormat::kHermes;
  auto g = grammar_of(o);
  ASSERT_NE(g, nullptr);
  const std::string open = "<tool_call>\n{\"name\": ", close = "}\n</tool_call>";
  EXPECT_TRUE(sentence(g, open + "\"get_weather\", \"arguments\": {\"city\": \"x\"}" + close));
  for (const std::string& bad :
       {open + "\"get_time\", \"arguments\": {}" + close,                // no such tool
        open + "\"get_weather\", \"arguments\": {}" + close,             // city required
        open + "\"get_weather\", \"arguments\": {\"city\": 3}" + close,  // not a string
        open + "\"get_weather\", \"arguments\": {\"city\": \"x\", \"days\": 8}" + close,
        open + "\"get_weather\", \"arguments\": {\"city\": \"x\", \"w\": 1}" + close,
        open + "\"get_weather\", \"arguments\": {\"city\": \"" + std::string(21, 'a') + "\"}" +
            close,
        open + "\"now\", \"arguments\": {\"a\": 1}" + close,           // no parameters: {}
        open + "\"code\", \"arguments\": {\"c\": \"fr-75\"}" + close,  // the pattern
        "Sure! " + open + "\"now\", \"arguments\": {}" + close,        // text before the call
        std::string("")}) {
    EXPECT_FALSE(sentence(g, bad)) << bad;
  }
  // One call only without parallel calls.
  const std::string call = open + "\"now\", \"arguments\": {}" + close;
  EXPECT_TRUE(sentence(g, call + "\n" + call));
  o.parallel = false;
  auto single = grammar_of(o);
  EXPECT_TRUE(sentence(single, call));
  EXPECT_FALSE(sentence(single, call + "\n" + call));
}

TEST(ToolGrammar, ReasoningBeforeTheCall) {
  const std::string call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  ToolGrammarOptions o;
  o.format = ToolCallFormat::kHermes;
  auto plain = grammar_of(o);
  EXPECT_FALSE(sentence(plain, "<think>hm</think>" + call));
  o.may_think = true;
  auto may = grammar_of(o);
  EXPECT_TRUE(sentence(may, call));
  EXPECT_TRUE(sentence(may, "<think>\nweather? </thin no: <think> </think>\n\n" + call));
  EXPECT_FALSE(sentence(may, "<think>a</think>b</think>" + call));
  o.thinking_forced_open = true;
  auto forced = grammar_of(o);
  EXPECT_TRUE(sentence(forced, "I should call now.</think>\n" + call));
  EXPECT_FALSE(sentence(forced, call));  // the open reasoning must close first

  ReplyParseOptions p;
  p.tools = ToolCallFormat::kHermes;
  p.reasoning = ReasoningFormat::kDeepseek;
  p.thinking_forced_open = true;
  const ParsedReply r = parse_reply("I should call now.</think>\n" + call, p, false);
  EXPECT_EQ(r.reasoning, "I should call now.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "now");
}

TEST(ToolGrammar, FormatsWithoutAGrammar) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kMistral,
                           ToolCallFormat::kDeepSeekR1, ToolCallFormat::kGptOss}) {
    ToolGrammarOptions o;
    o.format = f;
    EXPECT_FALSE(tool_call_grammar(kTools, o).has_value()) << tool_call_format_name(f);
  }
  ToolGrammarOptions o;
  o.format = ToolCallFormat::kHermes;
  EXPECT_FALSE(tool_call_grammar(Json::array(), o).has_value());
}

// Names that need escaping in JSON and in GBNF stay exact.
TEST(ToolGrammar, NamesAreQuotedExactly) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "a\"b\\c"}}])");
  ToolGrammarOptions o;
  o.format = ToolCallFormat::kLlama3;
  auto g = grammar_of(o, tools);
  EXPECT_TRUE(sentence(g, R"({"name": "a\"b\\c", "parameters": {}})"));
  EXPECT_FALSE(sentence(g, R"({"name": "a\"b\c", "parameters": {}})"));
}

// gbnf_text_until against a brute-force check over strings of the end's own characters (where
// the overlaps are) and one other.
TEST(ToolGrammar, TextUntilEndsAtTheFirstEnd) {
  for (std::string_view end : {"</think>", "aab", "abab", "x"}) {
    auto g = Grammar::parse("root ::= u\n" + gbnf_text_until("u", end));
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    const std::shared_ptr<const Grammar> grammar = std::move(g).value();
    std::string alphabet(end);
    alphabet += "z\xC3\xA9";  // and a two-byte code point
    std::mt19937 rng(7);
    for (int trial = 0; trial < 3000; ++trial) {
      std::string s;
      const int len = static_cast<int>(rng() % 14);
      for (int i = 0; i < len; ++i) {
        const size_t k = rng() % (alphabet.size() - 1);
        if (alphabet[k] == '\xC3') {
          s += "\xC3\xA9";
        } else if (alphabet[k] != '\xA9') {
          s += alphabet[k];
        }
      }
      if (trial % 3 == 0) s += end;
      const size_t first = s.find(end);
      const bool want = first != std::string::npos && first + end.size() == s.size();
      EXPECT_EQ(sentence(grammar, s), want) << end << " / " << s;
    }
  }
}

// The lazy grammar of tool_choice auto: its sentences start at the call opening, which is the
// format's trigger word; Functionary v3.2 has none.
TEST(ToolGrammar, LazyGrammarStartsAtItsTrigger) {
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kFunctionaryV31}) {
    ToolGrammarOptions o;
    o.format = f;
    o.lazy = true;
    o.may_think = true;
    std::optional<GrammarTrigger> t = tool_call_trigger(o);
    ASSERT_TRUE(t.has_value());
    EXPECT_TRUE(t->may_think);
    auto g = grammar_of(o);
    const std::string call =
        f == ToolCallFormat::kHermes
            ? "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
        : f == ToolCallFormat::kLlama3 ? R"({"name": "now", "parameters": {}})"
                                       : R"(<function=now>{}</function>)";
    EXPECT_TRUE(sentence(g, call));
    EXPECT_FALSE(sentence(g, "<think>x</think>" + call));  // the trigger skips reasoning
    ASSERT_EQ(t->words.size(), 1u);
    EXPECT_TRUE(call.starts_with(t->words[0]));
  }
  ToolGrammarOptions v32;
  v32.format = ToolCallFormat::kFunctionaryV32;
  v32.lazy = true;
  EXPECT_FALSE(tool_call_trigger(v32).has_value());
  EXPECT_FALSE(tool_call_grammar(kTools, v32).has_value());
}

TEST(ToolGrammar, TriggerFoundWhereItCounts) {
  using State = TriggerScan::State;
  struct Case {
    GrammarTrigger t;
    std::string text;
    State state;
    size_t at = 0;
  };
  GrammarTrigger any{{"<tool_call>"}};
  GrammarTrigger start{{"{"}, true};
  GrammarTrigger forced{{"<tool_call>"}, false, true};
  GrammarTrigger think{{"<tool_call>"}, false, false, true};
  GrammarTrigger think_start{{"{"}, true, false, true};
  const std::vector<Case> cases = {
      {any, "Let me look. <tool_call>\n{", State::kStart, 13},
      {any, "no call <tool_ca", State::kWait},
      {start, "  \n{\"name\"", State::kStart, 3},
      {start, " \n ", State::kWait},
      {start, "Sure: {", State::kNever},
      {forced, "<tool_call> is what I need</think>\n<tool_call>", State::kStart, 35},
      {forced, "<tool_call> is what I need", State::kWait},
      {think, "<think>use <tool_call></think>\n\n<tool_call>", State::kStart, 32},
      {think, "<think>use <tool_call>", State::kWait},
      {think, "\n<thi", State::kWait},
      {think, "<tool_call>", State::kStart, 0},
      {think_start, "<think>a { b</think> {", State::kStart, 21},
      {think_start, "<think>a</think> no", State::kNever},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    size_t scanned = 0;
    const TriggerScan r = scan_trigger(c.t, c.text, scanned);
    EXPECT_EQ(r.state, c.state);
    if (c.state == State::kStart) {
      EXPECT_EQ(r.at, c.at);
    }
  }
}

// Fed a token at a time, with the `scanned` hint, the scan finds what one scan of the whole text
// finds: a word split across tokens included.
TEST(ToolGrammar, TriggerScanInPiecesEqualsOneScan) {
  std::mt19937 rng(11);
  const std::vector<std::string> pieces = {"<",        "tool",    "_call", ">", "<tool_call>",
                                           "</think>", "<think>", "x",     " ", "\n",
                                           "{",        "</",      "think>"};
  for (const GrammarTrigger& t :
       {GrammarTrigger{{"<tool_call>"}}, GrammarTrigger{{"<tool_call>"}, false, false, true},
        GrammarTrigger{{"<tool_call>"}, false, true}, GrammarTrigger{{"{"}, true, false, true}}) {
    for (int trial = 0; trial < 2000; ++trial) {
      std::string text;
      size_t scanned = 0;
      TriggerScan step;
      while (text.size() < 60) {
        text += pieces[rng() % pieces.size()];
        step = scan_trigger(t, text, scanned);
        if (step.state != TriggerScan::State::kWait) break;
      }
      size_t fresh = 0;
      const TriggerScan whole = scan_trigger(t, text, fresh);
      ASSERT_EQ(step.state, whole.state) << text;
      if (whole.state == TriggerScan::State::kStart) {
        EXPECT_EQ(step.at, whole.at) << text;
        // The first place it could start: no earlier prefix of the text had it.
        size_t none = 0;
        const std::string shorter = text.substr(0, text.size() - 1);
        EXPECT_NE(scan_trigger(t, shorter, none).state, TriggerScan::State::kStart) << text;
      }
    }
  }
}

}  // namespace
}  // namespace strata::server
