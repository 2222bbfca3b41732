#include "server/api.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/grammar.h"

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

// llama-server's other samplers' fields reach the sampler; bad values are refused by name.
TEST(ServerApi, ReadsLlamaCppSamplerFields) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": "hi", "typical_p": 0.7, "top_n_sigma": 1.5,
                        "xtc_probability": 0.4, "xtc_threshold": 0.2, "min_keep": 2,
                        "mirostat": 1, "mirostat_tau": 4.5, "mirostat_eta": 0.3,
                        "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3,
                        "dry_penalty_last_n": 100, "dry_sequence_breakers": ["a", "b"],
                        "samplers": ["dry", "temperature", "top_k"]})",
                     Endpoint::kNative, r));
  const SamplerParams& s = r.params.sampling;
  EXPECT_FLOAT_EQ(s.chain.typical_p, 0.7f);
  EXPECT_FLOAT_EQ(s.chain.top_n_sigma, 1.5f);
  EXPECT_FLOAT_EQ(s.chain.xtc_probability, 0.4f);
  EXPECT_FLOAT_EQ(s.chain.xtc_threshold, 0.2f);
  EXPECT_EQ(s.chain.min_keep, 2);
  EXPECT_EQ(s.chain.mirostat, 1);
  EXPECT_FLOAT_EQ(s.chain.mirostat_tau, 4.5f);
  EXPECT_FLOAT_EQ(s.chain.mirostat_eta, 0.3f);
  EXPECT_FLOAT_EQ(s.dry_multiplier, 0.8f);
  EXPECT_FLOAT_EQ(s.dry_base, 2.0f);
  EXPECT_EQ(s.dry_allowed_length, 3);
  EXPECT_EQ(s.dry_penalty_last_n, 100);
  EXPECT_EQ(s.dry_sequence_breakers, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.chain.order, (std::vector<ChainStage>{ChainStage::kTemperature, ChainStage::kTopK}));
  EXPECT_FALSE(s.use_penalties);
  EXPECT_TRUE(s.use_dry);
  CompletionRequest letters;
  ASSERT_FALSE(parse(R"({"prompt": "hi", "samplers": "ekypmxt"})", Endpoint::kNative, letters));
  EXPECT_EQ(letters.params.sampling.chain.order.size(), 6u);
  EXPECT_TRUE(letters.params.sampling.use_penalties);
  EXPECT_FALSE(letters.params.sampling.use_dry);
  CompletionRequest adaptive;
  ASSERT_FALSE(parse(R"({"prompt": "hi", "adaptive_target": 0.25, "adaptive_decay": 0.6,
                        "samplers": ["top_k", "temperature", "adaptive_p"]})",
                     Endpoint::kNative, adaptive));
  EXPECT_FLOAT_EQ(adaptive.params.sampling.chain.adaptive_target, 0.25f);
  EXPECT_FLOAT_EQ(adaptive.params.sampling.chain.adaptive_decay, 0.6f);
  EXPECT_TRUE(adaptive.params.sampling.chain.adaptive_active());

  struct Bad {
    const char* body;
    const char* names;
  };
  for (const Bad& b :
       {Bad{R"({"prompt": "x", "typical_p": 1.5})", "typical_p"},
        Bad{R"({"prompt": "x", "mirostat": 3})", "mirostat"},
        Bad{R"({"prompt": "x", "adaptive_decay": 1})", "adaptive_decay"},
        Bad{R"({"prompt": "x", "adaptive_target": 2})", "adaptive_target"},
        Bad{R"({"prompt": "x", "xtc_threshold": -1})", "xtc_threshold"},
        Bad{R"({"prompt": "x", "dry_multiplier": -1})", "dry_multiplier"},
        Bad{R"({"prompt": "x", "dry_penalty_last_n": -2})", "dry_penalty_last_n"},
        Bad{R"({"prompt": "x", "dry_sequence_breakers": "\n"})", "dry_sequence_breakers"},
        Bad{R"({"prompt": "x", "samplers": ["top_k", "nope"]})", "nope"},
        Bad{R"({"prompt": "x", "samplers": 5})", "samplers"}}) {
    CompletionRequest out;
    std::optional<ApiError> e = parse(b.body, Endpoint::kNative, out);
    ASSERT_TRUE(e.has_value()) << b.body;
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find(b.names), std::string::npos) << e->message;
  }
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
  ASSERT_EQ(r.chat.turns.size(), 2u);
  EXPECT_EQ(r.chat.turns[1].content, "ab");
  EXPECT_EQ(r.chat.messages[1]["content"], "ab");
  EXPECT_EQ(r.params.sampling.n_probs, 4);
  EXPECT_EQ(r.params.n_predict, 3);
}

TEST(ServerApi, NativeLimitsAndFields) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": "x", "t_max_predict_ms": 250, "response_fields": ["content"]})",
                     Endpoint::kNative, r));
  EXPECT_EQ(r.params.t_max_predict_ms, 250);
  EXPECT_EQ(r.response_fields, (std::vector<std::string>{"content"}));
  CompletionRequest bad;
  EXPECT_TRUE(parse(R"({"prompt": "x", "t_max_predict_ms": -1})", Endpoint::kNative, bad));
  EXPECT_TRUE(parse(R"({"prompt": "x", "response_fields": "content"})", Endpoint::kNative, bad));
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

// Constrained output: a GBNF grammar, llama-server's json_schema and OpenAI's response_format
// become the request's grammar; a bad one is a 400 naming where it came from.
TEST(ServerApi, GrammarsFromEveryField) {
  const std::pair<const char*, Endpoint> given[] = {
      {R"({"prompt": "x", "grammar": "root ::= \"yes\" | \"no\""})", Endpoint::kNative},
      {R"({"prompt": "x", "json_schema": {"type": "object"}})", Endpoint::kNative},
      {R"({"prompt": "x", "response_format": {"type": "json_object"}})", Endpoint::kCompletions},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
           "json_schema", "json_schema": {"name": "a", "schema": {"type": "object",
           "properties": {"a": {"type": "boolean"}}, "required": ["a"]}}}})",
       Endpoint::kChat},
      {R"({"prompt": "x", "response_format": {"type": "json_object", "schema": {"type":
           "array", "items": {"type": "integer"}}}})",
       Endpoint::kNative},
  };
  for (const auto& [body, endpoint] : given) {
    CompletionRequest r;
    std::optional<ApiError> e = parse(body, endpoint, r);
    ASSERT_FALSE(e) << body << ": " << e->message;
    EXPECT_NE(r.params.grammar, nullptr) << body;
  }
  for (const char* body : {R"({"prompt": "x"})", R"({"prompt": "x", "grammar": ""})",
                           R"({"prompt": "x", "response_format": {"type": "text"}})"}) {
    CompletionRequest r;
    ASSERT_FALSE(parse(body, Endpoint::kNative, r)) << body;
    EXPECT_EQ(r.params.grammar, nullptr) << body;
  }
  const std::pair<const char*, const char*> refused[] = {
      {R"({"prompt": "x", "grammar": "root ::= undefined-rule"})", "'grammar': "},
      {R"({"prompt": "x", "grammar": 5})", "'grammar' must be a string"},
      {R"({"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}})",
       "'grammar' and 'json_schema' both constrain the output"},
      {R"({"prompt": "x", "response_format": {"type": "xml"}})", "type 'xml' is not text"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "needs a 'schema'"},
      {R"j({"prompt": "x", "json_schema": {"type": "string", "pattern": "(?!a)"}})j",
       "'json_schema': schema/pattern: lookaround"},
  };
  for (const auto& [body, words] : refused) {
    CompletionRequest r;
    std::optional<ApiError> e = parse(body, Endpoint::kNative, r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find(words), std::string::npos) << e->message;
  }
  // The chat endpoint, where OpenAI's clients send it, refuses the same way.
  CompletionRequest chat;
  std::optional<ApiError> e = parse(
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
      Endpoint::kChat, chat);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("type 'xml' is not text, json_object or json_schema"),
            std::string::npos)
      << e->message;
}

// The server's --grammar is every request's unless the request brings its own, or lifts it with
// an empty grammar.
TEST(ServerApi, TheDefaultGrammarAndWhatReplacesIt) {
  RequestDefaults d;
  d.params.grammar = Grammar::parse("root ::= \"a\"").value();
  const auto grammar_of = [&](const char* body) {
    CompletionRequest r;
    std::optional<ApiError> e =
        parse_completion(Json::parse(body), Endpoint::kNative, d, 1, nullptr, r);
    EXPECT_FALSE(e) << body;
    return r.params.grammar;
  };
  EXPECT_EQ(grammar_of(R"({"prompt": "x"})"), d.params.grammar);
  const auto own = grammar_of(R"({"prompt": "x", "grammar": "root ::= \"b\""})");
  EXPECT_NE(own, nullptr);
  EXPECT_NE(own, d.params.grammar);
  EXPECT_NE(grammar_of(R"({"prompt": "x", "json_schema": {}})"), d.params.grammar);
  EXPECT_EQ(grammar_of(R"({"prompt": "x", "grammar": ""})"), nullptr);
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

namespace strata::server {
namespace {

std::vector<TokenBias> biases(const char* json, std::optional<ApiError>* error = nullptr) {
  std::vector<TokenBias> out;
  auto e = parse_logit_bias(Json::parse(json), nullptr, out);
  if (error) *error = e;
  return e ? std::vector<TokenBias>{} : out;
}

TEST(ServerLogitBias, EveryFormClientsSend) {
  // OpenAI: an object of string ids.
  auto a = biases(R"({"15": -100, "7": 2.5})");
  ASSERT_EQ(a.size(), 2u);
  // In the order the client wrote them.
  EXPECT_EQ(a[0].token, 15);
  EXPECT_FLOAT_EQ(a[0].bias, -100.0f);
  EXPECT_EQ(a[1].token, 7);
  EXPECT_FLOAT_EQ(a[1].bias, 2.5f);
  // llama-server: [[id, bias]] and [[id, false]] (false bans the token).
  auto b = biases(R"([[3, 1.5], [4, false]])");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].token, 3);
  EXPECT_FLOAT_EQ(b[0].bias, 1.5f);
  EXPECT_EQ(b[1].token, 4);
  EXPECT_TRUE(std::isinf(b[1].bias) && b[1].bias < 0);
  // An object whose value is false, and a string id inside the array form.
  auto c = biases(R"({"9": false})");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(std::isinf(c[0].bias));
  auto d = biases(R"([["12", -1]])");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].token, 12);
}

TEST(ServerLogitBias, BadFormsNameTheProblem) {
  for (const char* bad : {R"([[1]])", R"([[1, "x"]])", R"([[1, true]])", R"({"1": null})",
                          R"([[-1, 1]])", R"(5)", R"("x")", R"([[1.5, 1]])"}) {
    std::optional<ApiError> e;
    biases(bad, &e);
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find("logit_bias"), std::string::npos) << e->message;
  }
  // A text key needs the tokenizer; the dispatcher always passes it.
  std::optional<ApiError> e;
  biases(R"({"Hello": 1})", &e);
  EXPECT_TRUE(e.has_value());
}

TEST(ServerLogitBias, ReadFromRequestsOnEveryEndpoint) {
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kNative}) {
    CompletionRequest r;
    const char* body = ep == Endpoint::kNative ? R"({"prompt": "x", "logit_bias": [[5, false]]})"
                                               : R"({"prompt": "x", "logit_bias": {"5": -100}})";
    ASSERT_FALSE(parse_completion(Json::parse(body), ep, 1, r));
    ASSERT_EQ(r.params.logit_bias.size(), 1u);
    EXPECT_EQ(r.params.logit_bias[0].token, 5);
  }
}

TEST(ServerApi, DefaultsFillWhatARequestLeavesOut) {
  RequestDefaults d;
  d.params.sampling.temperature = 0.0f;
  d.params.sampling.seed = 42;
  d.params.n_predict = 7;
  d.seeded = true;
  CompletionRequest r;
  ASSERT_FALSE(parse_completion(Json::parse(R"({"prompt": "x"})"), Endpoint::kCompletions, d, 99,
                                nullptr, r));
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.0f);
  EXPECT_EQ(r.params.sampling.seed, 42u);
  EXPECT_EQ(r.params.n_predict, 7);
  CompletionRequest own;
  ASSERT_FALSE(parse_completion(Json::parse(R"({"prompt": "x", "seed": 5, "max_tokens": 2})"),
                                Endpoint::kCompletions, d, 99, nullptr, own));
  EXPECT_EQ(own.params.sampling.seed, 5u);
  EXPECT_EQ(own.params.n_predict, 2);
}

TEST(ServerApi, TimingsAreConsistent) {
  Json t = timings_json(10, 20.0, 5, 50.0);
  EXPECT_EQ(t["prompt_n"], 10);
  EXPECT_DOUBLE_EQ(t["prompt_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 100.0);
  Json z = timings_json(0, 0.0, 0, 0.0);
  EXPECT_DOUBLE_EQ(z["predicted_per_second"].get<double>(), 0.0);
}

}  // namespace
}  // namespace strata::server
