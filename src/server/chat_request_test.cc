#include "server/chat_request.h"

#include <gtest/gtest.h>

namespace strata::server {

using Json = nlohmann::ordered_json;  // the same alias as server/api.h's

namespace {

std::optional<std::string> read_body(const char* body, ChatRequest& out) {
  return read_chat_request(Json::parse(body), out);
}

// A conversation with every role and a tool round trip keeps one spelling of each field.
TEST(ChatRequest, ToolRoundTripIsNormalised) {
  ChatRequest r;
  ASSERT_FALSE(read_body(R"({"messages": [
      {"role": "developer", "content": "use tools"},
      {"role": "user", "content": [{"type": "text", "text": "weather in "},
                                   {"type": "text", "text": "Paris?"}]},
      {"role": "assistant", "content": null, "reasoning_content": "I should call it",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "description": "Weather of a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "parallel_tool_calls": false,
    "chat_template_kwargs": {"enable_thinking": false}})",
                         r));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "weather in Paris?");
  const Json& call = r.messages[2]["tool_calls"][0];
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["reasoning_content"], "I should call it");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");  // an object becomes its text
  EXPECT_EQ(call["id"], "call_1");
  EXPECT_EQ(r.messages[3]["tool_call_id"], "call_1");
  EXPECT_TRUE(r.needs_tools_template);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  ASSERT_EQ(r.turns.size(), 4u);
  EXPECT_EQ(r.turns[3].role, "tool");
}

TEST(ChatRequest, ToolChoiceShapesTheTools) {
  const char* tools = R"("tools": [{"type": "function", "function": {"name": "a"}},
                                   {"type": "function", "function": {"name": "b"}}])";
  const std::string base =
      std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + tools;
  ChatRequest r;
  ASSERT_FALSE(read_chat_request(Json::parse(base + "}"), r));
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(r.tools.size(), 2u);
  EXPECT_FALSE(r.needs_tools_template);
  ChatRequest none;
  ASSERT_FALSE(read_chat_request(Json::parse(base + R"(, "tool_choice": "none"})"), none));
  EXPECT_TRUE(none.tools.empty());
  ChatRequest named;
  ASSERT_FALSE(read_chat_request(
      Json::parse(base + R"(, "tool_choice": {"type": "function", "function": {"name": "b"}}})"),
      named));
  ASSERT_EQ(named.tools.size(), 1u);
  EXPECT_EQ(named.tools[0]["function"]["name"], "b");
  ChatRequest required;
  ASSERT_FALSE(read_chat_request(Json::parse(base + R"(, "tool_choice": "required"})"), required));
  EXPECT_EQ(required.tool_choice, ToolChoice::kRequired);
}

TEST(ChatRequest, ReasoningEffortAndParseToolCalls) {
  ChatRequest off;
  ASSERT_FALSE(read_body(R"({"messages": [{"role": "user", "content": "x"}],
                        "reasoning_effort": "none", "parse_tool_calls": false})",
                         off));
  EXPECT_EQ(off.template_kwargs["enable_thinking"], false);
  EXPECT_FALSE(off.parse_tool_calls);
  ChatRequest high;
  ASSERT_FALSE(read_body(R"({"messages": [{"role": "user", "content": "x"}],
                        "reasoning_effort": "high", "response_format": {"type": "text"}})",
                         high));
  EXPECT_EQ(high.template_kwargs["reasoning_effort"], "high");
  EXPECT_TRUE(high.parse_tool_calls);
}

TEST(ChatRequest, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "messages: is required"},
      {R"({"messages": []})", "messages: must be a non-empty array"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role: is required"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0]: part type 'image_url' is not supported"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       "messages[0].tool_calls: only an assistant"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})",
       "messages[0].tool_calls[0].function.name: is required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
           "arguments": 3}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools: must be"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web"}]})",
       "tools[0].type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
           "function": {"name": "f", "parameters": 1}}]})",
       "tools[0].function.parameters"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"})",
       "tool_choice: 'sometimes'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "'required' needs tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
           "function": {"name": "f"}}], "tool_choice": {"type": "function",
           "function": {"name": "g"}}})",
       "names 'g'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": 1})",
       "parallel_tool_calls"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})",
       "chat_template_kwargs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "parse_tool_calls": "no"})",
       "parse_tool_calls"},
  };
  for (const auto& [body, want] : cases) {
    ChatRequest r;
    const std::optional<std::string> e = read_body(body, r);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_NE(e->find(want), std::string::npos) << *e << " for " << body;
  }
}

TEST(ChatRequest, LimitsAreErrorsNotAllocations) {
  Json body = {{"messages", Json::array()}};
  for (size_t i = 0; i <= kMaxMessages; ++i) body["messages"].push_back({{"role", "user"}});
  ChatRequest r;
  std::optional<std::string> e = read_chat_request(body, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("limit is " + std::to_string(kMaxMessages)), std::string::npos) << *e;
  body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", Json::array()}};
  for (size_t i = 0; i <= kMaxTools; ++i) {
    body["tools"].push_back({{"type", "function"}, {"function", {{"name", "f"}}}});
  }
  ChatRequest t;
  e = read_chat_request(body, t);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("limit is " + std::to_string(kMaxTools)), std::string::npos) << *e;
}

}  // namespace
}  // namespace strata::server
