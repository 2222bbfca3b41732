// Starts the real `strata serve` on 127.0.0.1 (a free port) over a synthetic model and drives
// it over HTTP. Every server process is stopped by its owner's destructor, on every path.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_server_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    model_ = (*dir_ / "synth.gguf").string();
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model_}), 0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::vector<std::string> args(std::vector<std::string> more) {
    std::vector<std::string> a = {"-m", model_, "-t", "1", "-c", "2048"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }

  static fs::path* dir_;
  static std::string model_;
};

fs::path* ServerTest::dir_ = nullptr;
std::string ServerTest::model_;

TEST_F(ServerTest, EndpointsAnswer) {
  ServerProcess s(args({"-np", "2", "--alias", "tiny"}));
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(get(s, "/health").body["status"], "ok");
  Reply models = get(s, "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.body["data"][0]["id"], "tiny");
  Reply props = get(s, "/props");
  EXPECT_EQ(props.body["total_slots"], 2);
  EXPECT_EQ(props.body["default_generation_settings"]["n_ctx"], 1024);
  Reply slots = get(s, "/slots");
  ASSERT_TRUE(slots.body.is_array());
  EXPECT_EQ(slots.body.size(), 2u);

  Reply c =
      post(s, "/v1/completions",
           R"({"model": "tiny", "prompt": "hello world", "max_tokens": 6, "temperature": 0})");
  ASSERT_EQ(c.status, 200) << c.raw;
  EXPECT_EQ(c.body["object"], "text_completion");
  EXPECT_EQ(c.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c.body["usage"]["completion_tokens"], 6);
  EXPECT_GT(c.body["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(c.body["usage"]["total_tokens"].get<int>(),
            c.body["usage"]["prompt_tokens"].get<int>() + 6);

  Reply chat = post(s, "/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                        "temperature": 0})");
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["object"], "chat.completion");
  EXPECT_EQ(chat.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat.body["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(chat.body["usage"]["completion_tokens"], 4);

  Reply native = post(s, "/completion", R"({"prompt": "hello world", "n_predict": 6,
                                            "temperature": 0})");
  ASSERT_EQ(native.status, 200) << native.raw;
  // The native endpoint and the OpenAI one decode the same prompt greedily: same text.
  EXPECT_EQ(native.body["content"], c.body["choices"][0]["text"]);
  EXPECT_EQ(native.body["tokens_predicted"], 6);
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServerTest, StreamingMatchesNonStreaming) {
  ServerProcess s(args({"-np", "2"}));
  const std::string whole = completion_text(s, "the quick brown fox", 24);
  Reply r = post(s, "/v1/completions",
                 R"({"prompt": "the quick brown fox", "max_tokens": 24, "temperature": 0,
                     "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200);
  bool done = false;
  std::vector<Json> events = sse_events(r.raw, &done);
  EXPECT_TRUE(done);
  std::string text;
  std::string finish;
  int completion_tokens = -1;
  for (const Json& e : events) {
    if (e.contains("usage") && e["choices"].empty()) {
      completion_tokens = e["usage"]["completion_tokens"];
      continue;
    }
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, whole);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(completion_tokens, 24);

  Reply chat = post(s, "/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 8,
                        "temperature": 0, "stream": true})");
  ASSERT_EQ(chat.status, 200);
  events = sse_events(chat.raw, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  Reply chat_whole = post(s, "/v1/chat/completions",
                          R"({"messages": [{"role": "user", "content": "tell me"}],
                              "max_tokens": 8, "temperature": 0})");
  std::string streamed;
  for (const Json& e : events) streamed += e["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(streamed, chat_whole.body["choices"][0]["message"]["content"]);
}

TEST_F(ServerTest, StopStrings) {
  ServerProcess s(args({"-np", "2"}));
  const std::string whole = completion_text(s, "once upon", 32);
  ASSERT_GE(whole.size(), 12u);
  // A stop string taken from the middle of the greedy text: the output must end right before
  // its first occurrence, streamed or not.
  const std::string stop = whole.substr(whole.size() / 2, 3);
  const std::string expected = whole.substr(0, whole.find(stop));
  Json body = {{"prompt", "once upon"},
               {"max_tokens", 32},
               {"temperature", 0},
               {"stop", {"\x01never", stop}}};
  Reply r = post(s, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["choices"][0]["text"], expected);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  // llama-server's native form names the stop string.
  const Reply native =
      post(s, "/completion",
           Json{{"prompt", "once upon"}, {"n_predict", 32}, {"temperature", 0}, {"stop", {stop}}}
               .dump());
  EXPECT_EQ(native.body["content"], expected);
  EXPECT_EQ(native.body["stop_type"], "word");
  EXPECT_EQ(native.body["stopping_word"], stop);

  body["stream"] = true;
  body["stop"] = stop;
  r = post(s, "/v1/completions", body.dump());
  bool done = false;
  std::string text, finish;
  for (const Json& e : sse_events(r.raw, &done)) {
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, expected);
  EXPECT_EQ(finish, "stop");
}

TEST_F(ServerTest, SeededSamplingAndNChoices) {
  ServerProcess s(args({"-np", "4"}));
  const Json base = {{"prompt", "a b c"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 42}};
  Json n3 = base;
  n3["n"] = 3;
  Reply a = post(s, "/v1/completions", n3.dump());
  Reply b = post(s, "/v1/completions", n3.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(a.body["choices"].size(), 3u);
  EXPECT_EQ(a.body["choices"], b.body["choices"]);
  EXPECT_EQ(a.body["usage"]["completion_tokens"].get<int>(), 36);
  // Choice i samples with seed + i: it equals a lone request with that seed.
  for (int i = 0; i < 3; ++i) {
    Json one = base;
    one["seed"] = 42 + i;
    Reply r = post(s, "/v1/completions", one.dump());
    EXPECT_EQ(r.body["choices"][0]["text"], a.body["choices"][i]["text"]) << "choice " << i;
  }
  EXPECT_TRUE(a.body["choices"][0]["text"] != a.body["choices"][1]["text"] ||
              a.body["choices"][1]["text"] != a.body["choices"][2]["text"]);

  // Logprobs: as many entries as tokens, each with the requested alternatives, best first.
  Reply lp = post(s, "/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
                      "temperature": 0, "logprobs": true, "top_logprobs": 3})");
  ASSERT_EQ(lp.status, 200) << lp.raw;
  const Json& content = lp.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  for (const Json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(t["logprob"], t["top_logprobs"][0]["logprob"]);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(),
              t["top_logprobs"][1]["logprob"].get<double>());
  }
  Reply clp = post(s, "/v1/completions",
                   R"({"prompt": "x", "max_tokens": 3, "temperature": 0, "logprobs": 2})");
  ASSERT_EQ(clp.status, 200) << clp.raw;
  EXPECT_EQ(clp.body["choices"][0]["logprobs"]["token_logprobs"].size(), 3u);
}

TEST_F(ServerTest, TokenizeDetokenizeRoundTrip) {
  ServerProcess s(args({}));
  const std::string text = "Hello world, 123 round trip!";
  Reply t = post(s, "/tokenize", Json{{"content", text}}.dump());
  ASSERT_EQ(t.status, 200) << t.raw;
  ASSERT_FALSE(t.body["tokens"].empty());
  Reply d = post(s, "/detokenize", Json{{"tokens", t.body["tokens"]}}.dump());
  ASSERT_EQ(d.status, 200) << d.raw;
  EXPECT_EQ(d.body["content"], text);
  expect_error(post(s, "/detokenize", R"({"tokens": [1, 999999]})"), 400);
  expect_error(post(s, "/tokenize", R"({"content": 5})"), 400);
}

TEST_F(ServerTest, Errors) {
  ServerProcess s(args({"-np", "2", "-c", "256"}));
  expect_error(post(s, "/v1/completions", "{\"prompt\": "), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "temperature": "hot"})"), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": "5"})"), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "stop": [1]})"), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": 7})"), 400);
  expect_error(post(s, "/v1/chat/completions", R"({"messages": "hi"})"), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "top_p": 2})"), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "temperature": -1})"), 400);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "n": 3})"), 400);
  // One model is served: any `model` name is answered (OpenAI SDKs send their own).
  const Reply any_model =
      post(s, "/v1/completions", R"({"prompt": "x", "model": "gpt-4o", "max_tokens": 2})");
  EXPECT_EQ(any_model.status, 200) << any_model.raw;
  EXPECT_EQ(any_model.body.value("model", ""), "gpt-4o");
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "word ";
  expect_error(post(s, "/v1/completions", Json{{"prompt", long_prompt}}.dump()), 400);
  expect_error(post(s, "/v1/completions", std::string(10 << 20, 'a')), 413);
  expect_error(get(s, "/no/such/endpoint"), 404);
  // The server still serves after all of that.
  EXPECT_FALSE(completion_text(s, "still here", 3).empty());
}

TEST_F(ServerTest, ApiKey) {
  ServerProcess s(args({"--api-key", "sesame"}));
  EXPECT_EQ(get(s, "/health").status, 200);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})"), 401);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})",
                    {{"Authorization", "Bearer wrong"}}),
               401);
  expect_error(get(s, "/metrics"), 401);
  Reply ok = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})",
                  {{"Authorization", "Bearer sesame"}});
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

TEST_F(ServerTest, MetricsAreValidPrometheusText) {
  ServerProcess s(args({"-np", "2"}));
  for (int i = 0; i < 3; ++i) completion_text(s, "count me " + std::to_string(i), 5);
  auto res = s.client()->Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  std::string error;
  std::map<std::string, double> m = parse_prometheus(res->body, &error);
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(m["strata_requests_total"], 3);
  EXPECT_EQ(m["strata_generated_tokens_total"], 15);
  EXPECT_GT(m["strata_prompt_tokens_total"], 0);
  EXPECT_EQ(m["strata_time_to_first_token_seconds_count"], 3);
  EXPECT_EQ(m["strata_time_to_first_token_seconds_bucket{le=\"+Inf\"}"], 3);
  EXPECT_EQ(m["strata_time_per_output_token_seconds_count"], 3);
  EXPECT_EQ(m["strata_slots_total"], 2);
  EXPECT_EQ(m["strata_slots_busy"], 0);
  EXPECT_GT(m["strata_kv_cache_used_cells"], 0);  // the prompt cache keeps the last prompts
  EXPECT_EQ(m["strata_kv_cache_cells"], 2048);
  EXPECT_GE(m["strata_decode_batch_tokens_count"], 15);
  EXPECT_EQ(m["strata_decode_batch_tokens_count"], m["strata_decode_steps_total"]);
}

TEST_F(ServerTest, ConcurrentGreedyEqualsAlone) {
  const std::vector<std::string> prompts = sixteen_prompts();
  std::vector<std::string> alone;
  {
    ServerProcess s(args({"-np", "1"}));
    for (const std::string& p : prompts) alone.push_back(completion_text(s, p, 16));
  }
  ServerProcess s(args({"-np", "8"}));
  const std::vector<std::string> together = concurrent_texts(s, prompts, 16);
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
  EXPECT_TRUE(wait_all_idle(s));
}

TEST_F(ServerTest, TwoPipelineGroupsMatchOne) {
  const std::vector<std::string> prompts = sixteen_prompts();
  std::vector<std::string> one, two;
  {
    ServerProcess s(args({"-np", "4"}));
    one = concurrent_texts(s, prompts, 12);
  }
  ServerProcess s(args({"-np", "4", "--pipeline-groups", "2"}));
  Reply props = get(s, "/props");
  EXPECT_EQ(props.body["pipeline_groups"], 2);
  two = concurrent_texts(s, prompts, 12);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "prompt " << i;
  Reply slots = get(s, "/slots");
  ASSERT_EQ(slots.body.size(), 4u);
  EXPECT_EQ(slots.body[3]["group"], 1);
}

TEST_F(ServerTest, ClientDisconnectMidStreamFreesTheSlot) {
  ServerProcess s(args({"-np", "2"}));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body =
      R"({"prompt": "go on and on", "max_tokens": 100000, "ignore_eos": true, "stream": true})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  // Read until some tokens have arrived, then go away.
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_FALSE(all_slots_idle(s));
  close(fd);
  EXPECT_TRUE(wait_all_idle(s));
  EXPECT_FALSE(completion_text(s, "after the disconnect", 4).empty());
}

// A non-streamed request writes nothing until its end, so no failed write reveals that its
// client left; the server watches the connection instead and cancels the request.
TEST_F(ServerTest, ClientDisconnectNonStreamingCancelsTheRequest) {
  ServerProcess s(args({"-np", "1", "-c", "4096"}));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body =
      R"({"prompt": "go on and on", "max_tokens": 100000, "ignore_eos": true})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  bool busy = false;
  for (int i = 0; i < 400 && !busy; ++i) {
    busy = !all_slots_idle(s);
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(busy);
  close(fd);
  EXPECT_TRUE(wait_all_idle(s));
  // Cancelled, not finished: a request that ran to its length would count no cancellation.
  std::string error;
  auto m = parse_prometheus(get(s, "/metrics").raw, &error);
  EXPECT_EQ(m["strata_requests_cancelled_total"], 1);
  EXPECT_LT(m["strata_generated_tokens_total"], 4096);
  EXPECT_FALSE(completion_text(s, "after the disconnect", 4).empty());
}

// A repeated prompt reuses the slot's KV unless the request says cache_prompt: false.
TEST_F(ServerTest, CachePromptFalseEvaluatesTheWholePrompt) {
  ServerProcess s(args({"-np", "1"}));
  const Json body = {
      {"prompt", "the same words every time"}, {"max_tokens", 2}, {"temperature", 0}};
  auto cached_tokens = [&](const Json& b) {
    Reply r = post(s, "/v1/completions", b.dump());
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached_tokens(body), 0);
  EXPECT_GT(cached_tokens(body), 0);
  Json uncached = body;
  uncached["cache_prompt"] = false;
  EXPECT_EQ(cached_tokens(uncached), 0);
  expect_error(post(s, "/v1/completions", R"({"prompt": "x", "cache_prompt": 1})"), 400);
}

TEST_F(ServerTest, ThousandRequestsSixteenAtATime) {
  ServerProcess s(args({"-np", "8", "-c", "1024"}));
  std::atomic<int> next{0}, ok{0};
  std::mutex mu;
  std::string failure;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      auto client = s.client();
      for (int i = next++; i < 1000; i = next++) {
        const Json body = {{"prompt", "request " + std::to_string(i % 50)},
                           {"max_tokens", 2},
                           {"temperature", 0.5},
                           {"seed", i},
                           {"stream", i % 4 == 0}};
        auto res = client->Post("/v1/completions", body.dump(), "application/json");
        if (res && res->status == 200) {
          ++ok;
        } else {
          std::lock_guard<std::mutex> lock(mu);
          failure = res ? std::to_string(res->status) + " " + res->body
                        : "error " + httplib::to_string(res.error());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1000) << failure;
  EXPECT_TRUE(wait_all_idle(s));
  std::string error;
  auto m = parse_prometheus(s.client()->Get("/metrics")->body, &error);
  EXPECT_EQ(m["strata_requests_total"], 1000);
  EXPECT_EQ(m["strata_requests_queued"], 0);
  EXPECT_LE(m["strata_kv_cache_used_cells"], 1024);
}

// With -np 16, sixteen requests run at once: each connection has a thread of its own, so no
// request waits for an HTTP thread (a fixed pool of 8 would queue half of them).
TEST_F(ServerTest, HttpThreadsFollowTheSlots) {
  ServerProcess s(args({"-np", "16", "-c", "65536"}));
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
  // Long enough that all 16 are in progress at once; a sanitized server takes 5-10x as long
  // for each token, so a quarter as many leaves it a longer window.
  const std::string body = std::string(R"({"prompt": "a", "n_predict": )") +
                           (STRATA_TEST_SANITIZED ? "200" : "800") + R"(, "ignore_eos": true})";
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      post(s, "/completion", body);
      ++finished;
    });
  }
  int most_busy = 0;
  while (finished.load() == 0 && most_busy < 16) {
    int busy = 0;
    for (const Json& slot : get(s, "/slots").body) busy += slot["is_processing"].get<bool>();
    most_busy = std::max(most_busy, busy);
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(most_busy, 16);
}

TEST_F(ServerTest, StoriesGreedyStory) {
  const std::string model = std::string(STRATA_SHARED_DIR) + "/models/stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  ServerProcess s({"-m", model, "-t", "1", "-np", "2"});
  // The story the independent reference gives for this prompt (tests/integration/stories.sh).
  const std::string text = completion_text(s, "Once upon a time", 16);
  EXPECT_EQ(text.rfind(", there was a little girl named Lily", 0), 0u) << text;
}

}  // namespace
}  // namespace strata::server::itest

namespace strata::server::itest {
namespace {

// The paths llama-server serves without /v1 answer like their /v1 twins.
TEST_F(ServerTest, RoutesWithAndWithoutV1) {
  ServerProcess s(args({}));
  const std::string body = R"({"prompt": "Once", "max_tokens": 4, "temperature": 0})";
  const Reply a = post(s, "/v1/completions", body);
  const Reply b = post(s, "/completions", body);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(a.body["choices"][0]["text"], b.body["choices"][0]["text"]);
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                              "temperature": 0})";
  const Reply c = post(s, "/v1/chat/completions", chat);
  const Reply d = post(s, "/chat/completions", chat);
  ASSERT_EQ(c.status, 200) << c.raw;
  ASSERT_EQ(d.status, 200) << d.raw;
  EXPECT_EQ(c.body["choices"][0]["message"]["content"], d.body["choices"][0]["message"]["content"]);
  EXPECT_EQ(get(s, "/v1/health").status, 200);
  EXPECT_EQ(get(s, "/models").status, 200);
}

TEST_F(ServerTest, ResponseFieldsAsLlamaServerReturnsThem) {
  ServerProcess s(args({}));
  const Reply n = post(s, "/completion", R"({"prompt": "Once upon", "n_predict": 4,
                          "temperature": 0, "n_probs": 2, "return_tokens": true})");
  ASSERT_EQ(n.status, 200) << n.raw;
  const Json& j = n.body;
  ASSERT_TRUE(j["tokens"].is_array());
  EXPECT_EQ(j["tokens"].size(), 4u);
  EXPECT_EQ(j["tokens_predicted"], 4);
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_TRUE(j["stopped_limit"].get<bool>());
  EXPECT_EQ(j["generation_settings"]["n_predict"], 4);
  EXPECT_EQ(j["generation_settings"]["n_probs"], 2);
  EXPECT_EQ(j["timings"]["predicted_n"], 4);
  EXPECT_GT(j["timings"]["predicted_ms"].get<double>(), 0.0);
  ASSERT_EQ(j["completion_probabilities"].size(), 4u);
  const Json& p0 = j["completion_probabilities"][0];
  EXPECT_EQ(p0["id"], j["tokens"][0]);
  EXPECT_TRUE(p0["bytes"].is_array());
  EXPECT_EQ(p0["top_logprobs"].size(), 2u);
  EXPECT_TRUE(p0["top_logprobs"][0].contains("bytes"));
  // The pieces' bytes spell the content.
  std::string spelled;
  for (const Json& p : j["completion_probabilities"]) {
    for (const Json& byte : p["bytes"]) spelled += static_cast<char>(byte.get<int>());
  }
  EXPECT_EQ(spelled, j["content"].get<std::string>());

  // response_fields: only those, nested ones lifted to the top under their path.
  const Reply f = post(s, "/completion", R"({"prompt": "Once upon", "n_predict": 4,
      "temperature": 0, "response_fields": ["content", "generation_settings/n_predict",
      "absent", "timings/absent"]})");
  ASSERT_EQ(f.status, 200) << f.raw;
  EXPECT_EQ(f.body, (Json{{"content", j["content"]}, {"generation_settings/n_predict", 4}}));

  const Reply o = post(s, "/v1/chat/completions", R"({"messages": [{"role": "user",
                          "content": "hi"}], "max_tokens": 3, "model": "gpt-4o"})");
  ASSERT_EQ(o.status, 200) << o.raw;
  EXPECT_TRUE(o.body.contains("system_fingerprint"));
  EXPECT_EQ(o.body["timings"]["predicted_n"], 3);
  EXPECT_EQ(o.body["model"], "gpt-4o");
}

TEST_F(ServerTest, LogitBiasSteersGreedyOutput) {
  ServerProcess s(args({}));
  const std::string base = R"({"prompt": "Once upon", "n_predict": 6, "temperature": 0,
                              "return_tokens": true)";
  const Reply plain = post(s, "/completion", base + "}");
  ASSERT_EQ(plain.status, 200) << plain.raw;
  const int first = plain.body["tokens"][0].get<int>();
  // Banned ([[id, false]]): the greedy choice can no longer be that token.
  const Reply banned =
      post(s, "/completion", base + R"(, "logit_bias": [[)" + std::to_string(first) + ", false]]}");
  ASSERT_EQ(banned.status, 200) << banned.raw;
  for (const Json& t : banned.body["tokens"]) EXPECT_NE(t.get<int>(), first);
  // A huge bias ({"id": bias}, OpenAI's form with a string key) makes it every token.
  const Reply forced = post(s, "/v1/completions",
                            R"({"prompt": "Once upon", "max_tokens": 3, "temperature": 0,
                                "logit_bias": {"300": 1000}})");
  ASSERT_EQ(forced.status, 200) << forced.raw;
  const Reply tok = post(s, "/detokenize", R"({"tokens": [300, 300, 300]})");
  EXPECT_EQ(forced.body["choices"][0]["text"], tok.body["content"]);
  // A string token: its pieces' ids get the bias.
  const Reply by_text = post(s, "/completion", base + R"(, "logit_bias": [["the", false]]})");
  EXPECT_EQ(by_text.status, 200) << by_text.raw;
  expect_error(post(s, "/completion", base + R"(, "logit_bias": [[999999, 1]]})"), 400);
}

TEST_F(ServerTest, ApplyTemplatePropsSlotsAndMetricsNames) {
  ServerProcess s(args({"-np", "2", "--props"}));
  const Reply t =
      post(s, "/apply-template", R"({"messages": [{"role": "user", "content": "hello there"}]})");
  ASSERT_EQ(t.status, 200) << t.raw;
  EXPECT_NE(t.body["prompt"].get<std::string>().find("hello there"), std::string::npos);
  const Reply props = get(s, "/props");
  ASSERT_EQ(props.status, 200);
  EXPECT_EQ(props.body["total_slots"], 2);
  EXPECT_TRUE(props.body["default_generation_settings"]["params"].contains("temperature"));
  EXPECT_EQ(post(s, "/props", "{}").status, 200);
  EXPECT_EQ(get(s, "/slots").body.size(), 2u);
  // Slot files need --slot-save-path; erasing does not.
  expect_error(post(s, "/slots/0?action=save", R"({"filename": "a.bin"})"), 501);
  expect_error(post(s, "/slots/0?action=explode", "{}"), 400);
  expect_error(post(s, "/slots/9?action=erase", "{}"), 400);
  const Reply erased = post(s, "/slots/0?action=erase", "{}");
  EXPECT_EQ(erased.status, 200) << erased.raw;
  EXPECT_EQ(erased.body["id_slot"], 0);
  completion_text(s, "warm", 2);
  const std::string m = get(s, "/metrics").raw;
  for (const char* name : {"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total",
                           "llamacpp:n_decode_total", "strata_requests_total"}) {
    EXPECT_NE(m.find(name), std::string::npos) << name;
  }
}

// A final assistant message is continued (llama-server's --prefill-assistant, on by default),
// or closed as a whole turn with --no-prefill-assistant.
TEST_F(ServerTest, AssistantPrefill) {
  const std::string body = R"({"messages": [{"role": "user", "content": "2+2?"},
                                            {"role": "assistant", "content": "The answer is"}]})";
  ServerProcess s(args({}));
  const Reply on = post(s, "/apply-template", body);
  ASSERT_EQ(on.status, 200) << on.raw;
  const std::string prefilled = on.body["prompt"];
  EXPECT_TRUE(prefilled.ends_with("assistant\nThe answer is")) << prefilled;
  const Reply chat =
      post(s, "/v1/chat/completions", body.substr(0, body.size() - 1) + R"(, "max_tokens": 3})");
  EXPECT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(
      chat.body["usage"]["prompt_tokens"],
      post(s, "/tokenize",
           Json{{"content", prefilled}, {"add_special", true}, {"parse_special", true}}.dump())
          .body["tokens"]
          .size());
  ServerProcess off(args({"--no-prefill-assistant"}));
  const std::string closed = post(off, "/apply-template", body).body["prompt"];
  EXPECT_NE(closed, prefilled);
  EXPECT_NE(closed.find("The answer is"), std::string::npos);
  EXPECT_TRUE(closed.ends_with("assistant\n")) << closed;
}

// -sp: control tokens appear in the text (here BOS, id 1, forced by a logit bias).
TEST_F(ServerTest, SpecialTokensRenderWithSp) {
  const std::string body = R"({"prompt": "x", "n_predict": 3, "temperature": 0,
                               "logit_bias": [[1, 100]], "return_tokens": true})";
  ServerProcess plain(args({}));
  const Reply r = post(plain, "/completion", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["tokens"], Json({1, 1, 1}));
  EXPECT_EQ(r.body["content"], "");
  ServerProcess sp(args({"-sp"}));
  EXPECT_EQ(post(sp, "/completion", body).body["content"], "<s><s><s>");
}

TEST_F(ServerTest, NoLoraAdapters) {
  ServerProcess s(args({}));
  EXPECT_EQ(get(s, "/lora-adapters").body, Json::array());
  EXPECT_EQ(post(s, "/lora-adapters", "[]").status, 200);
  expect_error(post(s, "/lora-adapters", R"([{"id": 0, "scale": 0.5}])"), 400);
}

TEST_F(ServerTest, EndpointsOffUnlessAsked) {
  ServerProcess s(args({"--no-slots"}), {{"LLAMA_ARG_ENDPOINT_METRICS", "0"}});
  // --metrics is on the helper's command line, and the command line wins.
  EXPECT_EQ(get(s, "/metrics").status, 200);
  expect_error(get(s, "/slots"), 501);
  expect_error(post(s, "/props", "{}"), 501);
}

TEST_F(ServerTest, InfillNeedsFimTokens) {
  ServerProcess s(args({}));
  // The synthetic vocabulary has no FIM tokens: a clear 501, not a made-up prompt.
  expect_error(post(s, "/infill", R"J({"input_prefix": "def f(", "input_suffix": ")"})J"), 501);
}

TEST_F(ServerTest, VertexAiPredictionRoutes) {
  ServerProcess s(args({}), {{"AIP_MODE", "PREDICTION"},
                             {"AIP_PREDICT_ROUTE", "/v1/endpoints/e:predict"},
                             {"AIP_HEALTH_ROUTE", "/ping"}});
  EXPECT_EQ(get(s, "/ping").status, 200);
  const Reply r = post(s, "/v1/endpoints/e:predict",
                       R"({"instances": [{"prompt": "Once"}, {"messages": [{"role": "user",
                          "content": "hi"}]}], "parameters": {"max_tokens": 2,
                          "temperature": 0}})");
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["predictions"].size(), 2u);
  EXPECT_EQ(r.body["predictions"][0]["object"], "text_completion");
  EXPECT_EQ(r.body["predictions"][1]["object"], "chat.completion");
  EXPECT_EQ(r.body["predictions"][0]["usage"]["completion_tokens"], 2);
}

TEST_F(ServerTest, ApiKeyAsBearerOrXApiKey) {
  ServerProcess s(args({"--api-key", "k1,k2"}));
  httplib::Client c("127.0.0.1", s.port());
  auto r1 = c.Post("/tokenize", {{"X-Api-Key", "k2"}}, R"({"content": "a"})", "application/json");
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->status, 200);
  auto r2 = c.Post("/tokenize", {{"Authorization", "Bearer k1"}}, R"({"content": "a"})",
                   "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 200);
  auto r3 = c.Post("/tokenize", {{"X-Api-Key", "k3"}}, R"({"content": "a"})", "application/json");
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->status, 401);
}

}  // namespace
}  // namespace strata::server::itest

namespace strata::server::itest {
namespace {

// The continuation of a prompt with cache_prompt on: its text and how many prompt tokens came
// from the slot's cache.
std::pair<std::string, int> cached_completion(const ServerProcess& s, const std::string& prompt) {
  const Json body = {{"prompt", prompt},
                     {"n_predict", 12},
                     {"temperature", 0},
                     {"cache_prompt", true},
                     {"id_slot", 0}};
  Reply r = post(s, "/completion", body.dump());
  EXPECT_EQ(r.status, 200) << r.raw;
  if (r.status != 200) return {"", -1};
  return {r.body["content"].get<std::string>(), r.body.value("tokens_cached", -1)};
}

// A template that opens <think> for the model (DeepSeek R1's): the reply is reasoning until
// </think>, split out as reasoning_content unless the request or --reasoning-format says none.
TEST_F(ServerTest, ChatReasoningIsSplitFromContent) {
  ServerProcess s(args({"--chat-template", "deepseek-r1"}));
  const std::string body =
      R"({"messages": [{"role": "user", "content": "think"}], "max_tokens": 12, "temperature": 0)";
  const Reply split = post(s, "/v1/chat/completions", body + "}");
  ASSERT_EQ(split.status, 200) << split.raw;
  const Json& m = split.body["choices"][0]["message"];
  const std::string reasoning = m.value("reasoning_content", "");
  EXPECT_FALSE(reasoning.empty()) << split.raw;
  EXPECT_EQ(m["content"], "");
  const Reply raw = post(s, "/v1/chat/completions", body + R"(, "reasoning_format": "none"})");
  ASSERT_EQ(raw.status, 200) << raw.raw;
  // The raw text, less the whitespace a split trims off the reasoning.
  const std::string raw_text = raw.body["choices"][0]["message"]["content"];
  EXPECT_EQ(raw_text.substr(raw_text.find_first_not_of(" \n")), reasoning);
  EXPECT_FALSE(raw.body["choices"][0]["message"].contains("reasoning_content"));
  expect_error(post(s, "/v1/chat/completions", body + R"(, "reasoning_format": "yes"})"), 400);

  // Streamed: the reasoning deltas add up to the collected reasoning.
  const Reply streamed = post(s, "/v1/chat/completions", body + R"(, "stream": true})");
  bool done = false;
  std::string sum;
  std::string content;
  for (const Json& e : sse_events(streamed.raw, &done)) {
    sum += e["choices"][0]["delta"].value("reasoning_content", "");
    content += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(sum, reasoning);
  EXPECT_EQ(content, "");

  ServerProcess none(args({"--chat-template", "deepseek-r1", "--reasoning-format", "none"}));
  EXPECT_EQ(post(none, "/v1/chat/completions", body + "}").body["choices"][0]["message"]["content"],
            raw_text);
}

// Anthropic's Messages API answers what the chat path answers, collected and streamed, and
// counts the same prompt tokens.
TEST_F(ServerTest, AnthropicMessagesOverTheChatPath) {
  ServerProcess s(args({"-np", "2"}));
  const std::string chat_body =
      R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "hello"}], "max_tokens": 10,
          "temperature": 0})";
  const Reply chat = post(s, "/v1/chat/completions", chat_body);
  ASSERT_EQ(chat.status, 200) << chat.raw;
  const std::string text = chat.body["choices"][0]["message"]["content"];
  const std::string body =
      R"({"model": "claude-sonnet-4-5", "system": "be brief", "max_tokens": 10,
          "temperature": 0, "messages": [{"role": "user", "content": [{"type": "text",
          "text": "hello"}]}])";
  const Reply msg = post(s, "/v1/messages", body + "}");
  ASSERT_EQ(msg.status, 200) << msg.raw;
  EXPECT_EQ(msg.body["type"], "message");
  EXPECT_EQ(msg.body["role"], "assistant");
  EXPECT_EQ(msg.body["content"][0]["type"], "text");
  EXPECT_EQ(msg.body["content"][0]["text"], text);
  EXPECT_EQ(msg.body["stop_reason"], "max_tokens");
  EXPECT_EQ(msg.body["usage"]["output_tokens"], 10);
  EXPECT_EQ(msg.body["usage"]["input_tokens"], chat.body["usage"]["prompt_tokens"]);

  const Reply streamed = post(s, "/v1/messages", body + R"(, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.raw;
  bool done = false;
  std::vector<std::string> types;
  std::string sum;
  for (const Json& e : sse_events(streamed.raw, &done)) {
    types.push_back(e["type"]);
    if (e["type"] == "content_block_delta") sum += e["delta"]["text"].get<std::string>();
  }
  EXPECT_FALSE(done);  // Anthropic's stream has no [DONE]
  ASSERT_GE(types.size(), 5u);
  EXPECT_EQ(types.front(), "message_start");
  EXPECT_EQ(types[1], "content_block_start");
  EXPECT_EQ(types[types.size() - 3], "content_block_stop");
  EXPECT_EQ(types[types.size() - 2], "message_delta");
  EXPECT_EQ(types.back(), "message_stop");
  EXPECT_EQ(sum, text);

  const Reply count = post(s, "/v1/messages/count_tokens", body + "}");
  ASSERT_EQ(count.status, 200) << count.raw;
  EXPECT_EQ(count.body["input_tokens"], chat.body["usage"]["prompt_tokens"]);
  const Reply chat_count = post(s, "/v1/chat/completions/input_tokens", chat_body);
  EXPECT_EQ(chat_count.body["input_tokens"], chat.body["usage"]["prompt_tokens"]);

  // Errors come in Anthropic's shape.
  const Reply bad = post(s, "/v1/messages", R"({"max_tokens": 5, "messages": "hello"})");
  EXPECT_EQ(bad.status, 400) << bad.raw;
  EXPECT_EQ(bad.body["type"], "error");
  EXPECT_EQ(bad.body["error"]["type"], "invalid_request_error");
}

// OpenAI's Responses API likewise.
TEST_F(ServerTest, OpenAiResponsesOverTheChatPath) {
  ServerProcess s(args({}));
  const Reply chat = post(s, "/v1/chat/completions",
                          R"({"messages": [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": "hello"}],
                              "max_tokens": 10, "temperature": 0})");
  ASSERT_EQ(chat.status, 200) << chat.raw;
  const std::string text = chat.body["choices"][0]["message"]["content"];
  const std::string body = R"({"model": "gpt-5", "instructions": "be brief", "input": "hello",
                               "max_output_tokens": 10, "temperature": 0)";
  const Reply r = post(s, "/v1/responses", body + "}");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "response");
  EXPECT_EQ(r.body["status"], "incomplete");
  EXPECT_EQ(r.body["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(r.body["output"].size(), 1u) << r.raw;
  EXPECT_EQ(r.body["output"][0]["type"], "message");
  EXPECT_EQ(r.body["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(r.body["usage"]["input_tokens"], chat.body["usage"]["prompt_tokens"]);

  const Reply streamed = post(s, "/v1/responses", body + R"(, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.raw;
  bool done = false;
  std::string sum;
  std::vector<Json> events = sse_events(streamed.raw, &done);
  ASSERT_GE(events.size(), 3u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], i);
    if (events[i]["type"] == "response.output_text.delta") sum += events[i]["delta"];
  }
  EXPECT_EQ(events.front()["type"], "response.created");
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  EXPECT_EQ(events.back()["response"]["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(sum, text);

  const Reply count = post(s, "/v1/responses/input_tokens", body + "}");
  ASSERT_EQ(count.status, 200) << count.raw;
  EXPECT_EQ(count.body["input_tokens"], chat.body["usage"]["prompt_tokens"]);
  expect_error(post(s, "/v1/responses", R"({"input": 5})"), 400);
}

class ServerSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_slots_test_" + std::to_string(getpid()));
    fs::create_directories(dir_ / "slots");
    model_ = (dir_ / "synth.gguf").string();
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model_}), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> args(std::vector<std::string> more) const {
    std::vector<std::string> a = {"-m", model_, "-t", "1", "-c", "1024", "-np", "1"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  fs::path dir_;
  std::string model_;
};

// Save, erase, restore: the next turn's greedy text is byte for byte that of a server that
// never lost the slot, and its prompt comes from the restored cache. A truncated file and
// another model's file are refused and the slot stays usable.
TEST_F(ServerSlotsTest, SaveEraseRestoreContinuesIdentically) {
  const std::string turn1 = "Once upon a time the little girl";
  std::string reply1, reference;
  {
    ServerProcess fresh(args({}));
    reply1 = cached_completion(fresh, turn1).first;
    reference = cached_completion(fresh, turn1 + reply1 + " and then").first;
  }
  ServerProcess s(args({"--slot-save-path", (dir_ / "slots").string()}));
  EXPECT_EQ(cached_completion(s, turn1).first, reply1);
  const Reply saved = post(s, "/slots/0?action=save", R"({"filename": "turn1.bin"})");
  ASSERT_EQ(saved.status, 200) << saved.raw;
  EXPECT_GT(saved.body["n_saved"].get<int>(), 0);
  ASSERT_EQ(post(s, "/slots/0?action=erase", "{}").status, 200);
  const Reply restored = post(s, "/slots/0?action=restore", R"({"filename": "turn1.bin"})");
  ASSERT_EQ(restored.status, 200) << restored.raw;
  EXPECT_EQ(restored.body["n_restored"], saved.body["n_saved"]);
  const auto [text, cached] = cached_completion(s, turn1 + reply1 + " and then");
  EXPECT_EQ(text, reference);
  EXPECT_GT(cached, 0) << "the restored prompt was not reused";

  // A truncated copy and a file of another model: clear errors, the slot goes on.
  const fs::path file = dir_ / "slots" / "turn1.bin";
  fs::copy_file(file, dir_ / "slots" / "cut.bin");
  fs::resize_file(dir_ / "slots" / "cut.bin", fs::file_size(file) / 2);
  const Reply cut = post(s, "/slots/0?action=restore", R"({"filename": "cut.bin"})");
  EXPECT_EQ(cut.status, 400) << cut.raw;
  const std::string other = (dir_ / "other.gguf").string();
  ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", other, "--seed", "9"}), 0);
  {
    std::vector<std::string> a = args({"--slot-save-path", (dir_ / "slots").string()});
    a[1] = other;
    ServerProcess o(a);
    cached_completion(o, turn1);
    ASSERT_EQ(post(o, "/slots/0?action=save", R"({"filename": "other.bin"})").status, 200);
  }
  const Reply foreign = post(s, "/slots/0?action=restore", R"({"filename": "other.bin"})");
  EXPECT_EQ(foreign.status, 400) << foreign.raw;
  EXPECT_NE(foreign.raw.find("model"), std::string::npos) << foreign.raw;
  EXPECT_EQ(cached_completion(s, turn1).first, reply1) << "the slot must stay usable";
  EXPECT_EQ(post(s, "/slots/0?action=restore", R"({"filename": "../x.bin"})").status, 400);
}

// --sleep-idle-seconds frees the model when idle and the next request wakes it with the same
// output; --context-shift lets a request run past its slot's context.
TEST_F(ServerSlotsTest, SleepWakeAndContextShift) {
  ServerProcess s(args({"--sleep-idle-seconds", "1"}));
  const std::string before = completion_text(s, "Hello world", 8);
  EXPECT_EQ(get(s, "/props").body["is_sleeping"], false);
  bool slept = false;
  for (int i = 0; i < 100 && !slept; ++i) {  // 1 s idle, then the sleeper's next check
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    slept = get(s, "/props").body["is_sleeping"] == true;
  }
  EXPECT_TRUE(slept) << "idle for 10 s and still awake";
  EXPECT_EQ(completion_text(s, "Hello world", 8), before) << "after waking";
  EXPECT_EQ(get(s, "/props").body["is_sleeping"], false);

  ServerProcess shift(args({"-c", "64", "--context-shift", "--keep", "4"}));
  const Json body = {
      {"prompt", "Hello"}, {"n_predict", 120}, {"temperature", 0}, {"ignore_eos", true}};
  const Reply r = post(shift, "/completion", body.dump());
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["tokens_predicted"], 120) << "the slot holds 64: the context was shifted";
  EXPECT_EQ(r.body["truncated"], true);
  ServerProcess no_shift(args({"-c", "64"}));
  EXPECT_EQ(
      post(no_shift, "/completion", R"({"prompt": "Hello", "n_predict": 4})").body["truncated"],
      false);
  const Reply stopped = post(no_shift, "/completion", body.dump());
  ASSERT_EQ(stopped.status, 200) << stopped.raw;
  EXPECT_LT(stopped.body["tokens_predicted"].get<int>(), 120);
}

}  // namespace
}  // namespace strata::server::itest
