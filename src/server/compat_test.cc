#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/compat_anthropic.h"
#include "server/compat_responses.h"

namespace strata::server {

using Json = nlohmann::ordered_json;  // the same alias as server/api.h's

namespace {

std::vector<std::string> types(const std::vector<SseEvent>& events) {
  std::vector<std::string> t;
  for (const SseEvent& e : events) t.push_back(e.event);
  return t;
}

Json chunk(Json delta, Json finish = nullptr) {
  return {{"object", "chat.completion.chunk"},
          {"choices",
           Json::array({{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish}}})}};
}

TEST(CompatAnthropic, RequestBecomesAChatRequest) {
  const Json body = Json::parse(R"({
    "model": "claude-3-5-sonnet", "max_tokens": 100, "temperature": 0.5,
    "stop_sequences": ["END"], "system": [{"type": "text", "text": "Be brief."}],
    "tools": [{"name": "get_weather", "description": "Weather",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "any"},
    "messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "use the tool", "signature": "x"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_1", "content": [{"type": "text", "text": "-3C"}]},
        {"type": "text", "text": "Thanks"}]}]})");
  Json chat;
  ASSERT_FALSE(anthropic_to_chat(body, true, chat).has_value());
  EXPECT_EQ(chat["max_tokens"], 100);
  EXPECT_EQ(chat["stop"], Json::array({"END"}));
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_FALSE(chat.contains("parallel_tool_calls"));
  Json single;
  Json one_call = body;
  one_call["tool_choice"]["disable_parallel_tool_use"] = true;
  ASSERT_FALSE(anthropic_to_chat(one_call, true, single).has_value());
  EXPECT_EQ(single["parallel_tool_calls"], false);
  one_call["tool_choice"]["disable_parallel_tool_use"] = "yes";
  EXPECT_NE(anthropic_to_chat(one_call, true, single).value_or("").find("disable_parallel"),
            std::string::npos);
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  const Json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], Json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[2]["reasoning_content"], "use the tool");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "tu_1");
  EXPECT_EQ(Json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json({{"city", "Oslo"}}));
  EXPECT_EQ(m[3], Json({{"role", "tool"}, {"tool_call_id", "tu_1"}, {"content", "-3C"}}));
  EXPECT_EQ(m[4], Json({{"role", "user"}, {"content", "Thanks"}}));
}

TEST(CompatAnthropic, BadRequestsNameTheField) {
  Json chat;
  auto err = [&](const char* body, bool require_max = true) {
    return anthropic_to_chat(Json::parse(body), require_max, chat).value_or("");
  };
  EXPECT_NE(err(R"({"messages": []})").find("max_tokens"), std::string::npos);
  EXPECT_EQ(err(R"({"messages": []})", false), "");
  EXPECT_NE(err(R"({"max_tokens": 5})").find("messages"), std::string::npos);
  EXPECT_NE(err(R"({"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]})")
                .find("messages[0].role"),
            std::string::npos);
  EXPECT_NE(err(R"({"max_tokens": 5, "messages": [{"role": "user", "content":
                [{"type": "image", "source": {}}]}]})")
                .find("'image'"),
            std::string::npos);
  EXPECT_NE(
      err(R"({"max_tokens": 5, "messages": [], "tool_choice": {"type": "x"}})").find("tool_choice"),
      std::string::npos);
}

TEST(CompatAnthropic, CompletionBecomesAMessage) {
  const Json completion = Json::parse(R"({"id": "chatcmpl-1", "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
      "content": "Let me check.", "reasoning_content": "think",
      "tool_calls": [{"id": "call_0", "type": "function",
                      "function": {"name": "w", "arguments": "{\"c\":1}"}}]}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 7}})");
  const Json m = chat_to_anthropic(completion);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 3u);
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][1], Json({{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(m["content"][2]["input"], Json({{"c", 1}}));
  EXPECT_EQ(m["usage"], Json({{"input_tokens", 12}, {"output_tokens", 7}}));
  EXPECT_EQ(anthropic_stop_reason("length"), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason("stop"), "end_turn");
}

TEST(CompatAnthropic, StreamEventsInOrder) {
  AnthropicStream s("msg_1", "m", 9);
  std::vector<SseEvent> all;
  for (const Json& c :
       {chunk({{"role", "assistant"}, {"content", ""}}), chunk({{"reasoning_content", "hm"}}),
        chunk({{"content", "Hi"}}), chunk({{"content", " there"}}),
        chunk(
            {{"tool_calls", Json::array({{{"index", 0},
                                          {"id", "call_0"},
                                          {"function", {{"name", "f"}, {"arguments", "{}"}}}}})}}),
        chunk(Json::object(), "tool_calls")}) {
    for (SseEvent& e : s.on_chunk(c)) all.push_back(std::move(e));
  }
  for (SseEvent& e : s.finish()) all.push_back(std::move(e));
  EXPECT_EQ(types(all),
            (std::vector<std::string>{
                "message_start", "content_block_start", "content_block_delta", "content_block_stop",
                "content_block_start", "content_block_delta", "content_block_delta",
                "content_block_stop", "content_block_start", "content_block_delta",
                "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(all[0].data["message"]["usage"]["input_tokens"], 9);
  EXPECT_EQ(all[1].data["content_block"]["type"], "thinking");
  EXPECT_EQ(all[5].data["delta"], Json({{"type", "text_delta"}, {"text", "Hi"}}));
  EXPECT_EQ(all[8].data["index"], 2);
  EXPECT_EQ(all[8].data["content_block"]["name"], "f");
  EXPECT_EQ(all[9].data["delta"]["type"], "input_json_delta");
  EXPECT_EQ(all[11].data["delta"]["stop_reason"], "tool_use");
}

TEST(CompatResponses, RequestBecomesAChatRequest) {
  const Json body = Json::parse(R"({"model": "gpt-4.1", "instructions": "Be brief.",
    "max_output_tokens": 50, "stream": true,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
      {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})");
  Json chat;
  ASSERT_FALSE(responses_to_chat(body, chat).has_value());
  EXPECT_EQ(chat["max_tokens"], 50);
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  const Json& m = chat["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1], Json({{"role", "user"}, {"content", "Hi"}}));
  EXPECT_EQ(m[2]["tool_calls"].size(), 2u) << "consecutive calls are one assistant turn";
  EXPECT_EQ(m[3], Json({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}));
  Json plain;
  ASSERT_FALSE(responses_to_chat(Json::parse(R"({"input": "Hello"})"), plain).has_value());
  EXPECT_EQ(plain["messages"], Json::parse(R"([{"role": "user", "content": "Hello"}])"));
  EXPECT_NE(responses_to_chat(Json::parse(R"({"input": [{"type": "input_image"}]})"), plain)
                .value_or("")
                .find("input_image"),
            std::string::npos);
}

// A field of the wrong JSON type is a 400 that names it, never an exception (found by the
// request fuzz target: json::value() throws on a type mismatch).
TEST(CompatResponses, WrongTypesNameTheField) {
  Json chat;
  auto err = [&](const char* body) {
    return responses_to_chat(Json::parse(body), chat).value_or("");
  };
  EXPECT_EQ(err(R"({"input": [{"role": ["user"], "content": "x"}]})"),
            "input[0].role: not a string");
  EXPECT_EQ(err(R"({"input": [{"type": 7}]})"), "input[0].type: not a string");
  EXPECT_EQ(err(R"({"input": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]})"),
            "input[0].content[0].type: not a string");
  EXPECT_EQ(err(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f",
                               "arguments": {"a": 1}}]})"),
            "input[0].arguments: not a string");
  EXPECT_NE(err(R"({"input": "x", "tools": [{"type": 3, "name": "f"}]})").find("tools[0]"),
            std::string::npos);
  EXPECT_NE(err(R"({"input": "x", "tool_choice": {"type": [], "name": "f"}})").find("tool_choice"),
            std::string::npos);
}

TEST(CompatAnthropic, WrongTypesNameTheField) {
  Json chat;
  auto err = [&](const char* body) {
    return anthropic_to_chat(Json::parse(body), true, chat).value_or("");
  };
  EXPECT_EQ(err(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
                "tool_result", "tool_use_id": "t", "content": "1", "is_error": "yes"}]}]})"),
            "messages[0].content[0].is_error: not a boolean");
  EXPECT_EQ(err(R"({"max_tokens": 5, "messages": [], "thinking": {"type": 1}})"),
            "thinking.type: not a string");
  EXPECT_NE(
      err(R"({"max_tokens": 5, "messages": [], "tool_choice": {"type": 2}})").find("tool_choice"),
      std::string::npos);
}

// The streamed events add up to the response the non-streamed path gives.
TEST(CompatResponses, StreamEndsWithTheResponseOfTheWholeCompletion) {
  ResponsesStream s("7", "m", 1000);
  std::vector<SseEvent> all;
  for (const Json& c :
       {chunk({{"role", "assistant"}, {"content", "Hel"}}), chunk({{"content", "lo"}}),
        chunk({{"tool_calls",
                Json::array({{{"index", 0},
                              {"id", "call_0"},
                              {"function", {{"name", "f"}, {"arguments", "{\"x\":2}"}}}}})}}),
        chunk(Json::object(), "tool_calls")}) {
    for (SseEvent& e : s.on_chunk(c)) all.push_back(std::move(e));
  }
  for (SseEvent& e : s.finish()) all.push_back(std::move(e));
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].data["sequence_number"], static_cast<int64_t>(i));
    EXPECT_EQ(all[i].data["type"], all[i].event);
  }
  EXPECT_EQ(all.front().event, "response.created");
  EXPECT_EQ(all.back().event, "response.completed");
  const Json whole = chat_to_response(
      Json::parse(R"({"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "Hello", "tool_calls": [{"id": "call_0",
        "type": "function", "function": {"name": "f", "arguments": "{\"x\":2}"}}]}}]})"),
      "7", 1000);
  EXPECT_EQ(all.back().data["response"]["output"], whole["output"]);
  EXPECT_EQ(whole["status"], "completed");
  const Json cut = chat_to_response(
      Json::parse(R"({"choices": [{"finish_reason": "length", "message": {"content": "a"}}]})"),
      "8", 0);
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
}

}  // namespace
}  // namespace strata::server
