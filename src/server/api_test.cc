#include "server/api.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

std::optional<ApiError> parse(const char* body, Endpoint ep, CompletionRequest& out) {
  return parse_completion(Json::parse(body), ep, 77, out);
}

TEST(ServerApi, ReadsOpenAiFields) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": "hi", "max_tokens": 5, "temperature": 0.5, "top_k": 3,
                        "stop": "x", "n": 2, "seed": 9, "logprobs": 2, "stream": true})",
                     Endpoint::kCompletions, r));
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.params.n_predict, 5);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.sampling.top_k, 3);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.sampling.seed, 9u);
  EXPECT_TRUE(r.params.logprobs);
  EXPECT_EQ(r.params.sampling.n_probs, 2);
  EXPECT_TRUE(r.stream);
}

TEST(ServerApi, NoSeedTakesTheGivenRandomSeed) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": [1, 2, 3]})", Endpoint::kCompletions, r));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.params.sampling.seed, 77u);
  EXPECT_FALSE(r.seeded);
}

TEST(ServerApi, ChatMessagesAndTopLogprobs) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"messages": [{"role": "system", "content": "be brief"},
                        {"role": "user", "content": [{"type": "text", "text": "a"},
                                                     {"type": "text", "text": "b"}]}],
                        "logprobs": true, "top_logprobs": 4, "max_completion_tokens": 3})",
                     Endpoint::kChat, r));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.params.sampling.n_probs, 4);
  EXPECT_EQ(r.params.n_predict, 3);
}

TEST(ServerApi, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "max_tokens": -5})", "max_tokens"},
      {R"({"prompt": "x", "top_k": 1.5})", "top_k"},
      {R"({"prompt": "x", "stop": [1]})", "stop"},
      {R"({"prompt": "x", "n": 0})", "'n'"},
      {R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {R"({"prompt": "x", "seed": 1e300})", "seed"},
      {R"({"max_tokens": 5})", "prompt"},
      {R"({"prompt": "x", "top_p": 2})", "top_p"},
  };
  for (const auto& [body, field] : cases) {
    CompletionRequest r;
    std::optional<ApiError> e = parse(body, Endpoint::kCompletions, r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find(field), std::string::npos) << e->message;
  }
}

TEST(ServerApi, ErrorBodyHasOpenAiShape) {
  const Json j = Json::parse(error_body(ApiError{404, "no such model"}));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["code"], 404);
}

TEST(ServerApi, DumpReplacesInvalidUtf8) { EXPECT_EQ(dump(Json("a\xff")), "\"a\xEF\xBF\xBD\""); }

}  // namespace
}  // namespace strata::server
