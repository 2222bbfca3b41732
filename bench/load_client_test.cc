#include "load_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

namespace strata::bench {
namespace {

using Json = nlohmann::json;

// A stand-in for an OpenAI-compatible server on 127.0.0.1: one token per space-separated
// word, and completions that stream max_tokens chunks of "x" (or fail with 500).
class FakeServer {
 public:
  enum class Mode { kStream, kFail };

  explicit FakeServer(Mode mode) : mode_(mode) {
    svr_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body);
      std::istringstream words(body["content"].get<std::string>());
      std::vector<int> ids;
      std::lock_guard<std::mutex> lock(mu_);
      for (std::string w; words >> w;) {
        auto it = std::find(vocab_.begin(), vocab_.end(), w);
        if (it == vocab_.end()) it = vocab_.insert(vocab_.end(), w);
        ids.push_back(static_cast<int>(it - vocab_.begin()));
      }
      res.set_content(Json{{"tokens", ids}}.dump(), "application/json");
    });
    svr_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body);
      std::string text;
      std::lock_guard<std::mutex> lock(mu_);
      for (const Json& id : body["tokens"]) {
        if (!text.empty()) text += ' ';
        text += vocab_.at(id.get<size_t>());
      }
      res.set_content(Json{{"content", text}}.dump(), "application/json");
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body);
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(body);
      }
      if (mode_ == Mode::kFail) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"boom"}})", "application/json");
        return;
      }
      const int n = body["max_tokens"].get<int>();
      if (!body.value("stream", false)) {
        res.set_content(Json{{"choices", {{{"text", std::string(n, 'x')}}}},
                             {"usage", {{"completion_tokens", n}, {"prompt_tokens", 1}}}}
                            .dump(),
                        "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [n](size_t, httplib::DataSink& sink) {
        for (int i = 0; i < n; ++i) {
          const std::string ev =
              "data: " + Json{{"choices", {{{"text", "x"}, {"index", 0}}}}}.dump() + "\n\n";
          sink.write(ev.data(), ev.size());
        }
        const std::string usage =
            "data: " +
            Json{{"choices", Json::array()}, {"usage", {{"completion_tokens", n}}}}.dump() +
            "\n\ndata: [DONE]\n\n";
        sink.write(usage.data(), usage.size());
        sink.done();
        return true;
      });
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    for (int i = 0; i < 500 && !svr_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~FakeServer() {
    svr_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Json> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  size_t word_count(const std::string& text) {
    std::istringstream words(text);
    size_t n = 0;
    for (std::string w; words >> w;) ++n;
    return n;
  }

 private:
  Mode mode_;
  httplib::Server svr_;
  int port_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> vocab_;  // guarded by mu_
  std::vector<Json> requests_;      // guarded by mu_
};

TEST(LoadClient, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  std::shuffle(v.begin(), v.end(), std::mt19937(7));
  const Distribution d = distribution(v);
  EXPECT_EQ(d.n, 100);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.p50, 50);  // 50 of 100 samples are <= 50
  EXPECT_DOUBLE_EQ(d.p99, 99);
  const Distribution one = distribution({3.5});
  EXPECT_DOUBLE_EQ(one.p50, 3.5);
  EXPECT_DOUBLE_EQ(one.p99, 3.5);
  EXPECT_EQ(distribution({}).n, 0);
}

TEST(LoadClient, SseParserAcrossArbitraryCuts) {
  const std::string stream =
      "data: {\"a\":1}\n\n: a comment\n\ndata:{\"b\":2}\r\n\r\nevent: x\ndata: [DONE]\n\n";
  SseParser parser;
  std::vector<std::string> got;
  for (char c : stream) {
    for (std::string& p : parser.feed(std::string_view(&c, 1))) got.push_back(std::move(p));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"}));
}

TEST(LoadClient, SummarizeCountsAndRates) {
  auto ok = [](double latency, double ttft, double tpot, int64_t tokens) {
    RequestSample s;
    s.ok = true;
    s.latency_s = latency;
    s.ttft_s = ttft;
    s.tpot_s = tpot;
    s.output_tokens = tokens;
    return s;
  };
  RequestSample failed;
  failed.error = "HTTP 500: x";
  const std::vector<RequestSample> samples = {ok(2, 0.5, 0.1, 16), ok(4, 1.5, 0.3, 24), failed,
                                              failed};
  const LoadReport r = summarize(samples, 8.0);
  EXPECT_EQ(r.requests_ok, 2);
  EXPECT_EQ(r.errors, 2);
  EXPECT_EQ(r.output_tokens, 40);
  EXPECT_DOUBLE_EQ(r.output_tok_s, 5.0);
  EXPECT_DOUBLE_EQ(r.requests_s, 0.25);
  EXPECT_DOUBLE_EQ(r.ttft_s.mean, 1.0);
  EXPECT_DOUBLE_EQ(r.tpot_s.p99, 0.3);
  EXPECT_DOUBLE_EQ(r.latency_s.p50, 2);
  EXPECT_EQ(r.error_samples, (std::vector<std::string>{"HTTP 500: x"}));  // distinct only
}

// Plans are a function of (seed, index): the same whatever the threads' timing, and the shares
// of streamed requests and of clients that leave come out near the configured ones.
TEST(LoadClient, PlansFollowTheSeedAndTheShares) {
  LoadConfig config;
  config.stream_fraction = 0.5;
  config.disconnect_fraction = 0.2;
  config.seed = 3;
  int streamed = 0, leaving = 0, while_sending = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    const RequestPlan p = plan_request(config, i);
    const RequestPlan again = plan_request(config, i);
    ASSERT_EQ(p.stream, again.stream);
    ASSERT_EQ(p.leave, again.leave);
    streamed += p.stream;
    leaving += p.leave != RequestPlan::Leave::kNever;
    while_sending += p.leave == RequestPlan::Leave::kWhileSending;
    if (p.leave == RequestPlan::Leave::kAfterFirstEvent) {
      EXPECT_TRUE(p.stream);
    }
    if (p.leave == RequestPlan::Leave::kWhileWaiting) {
      EXPECT_FALSE(p.stream);
      EXPECT_GE(p.wait_ms, 1);
    }
  }
  EXPECT_NEAR(streamed, 2000, 200);
  EXPECT_NEAR(leaving, 800, 120);
  EXPECT_NEAR(while_sending, 800 / 3, 80);
  config.seed = 4;
  int same = 0;
  for (int64_t i = 0; i < 100; ++i) same += plan_request(config, i).stream == (i % 2 == 0);
  EXPECT_LT(same, 100);  // another seed, other plans
  // Without a stream share every request follows `stream`; without a leave share none leaves.
  LoadConfig plain;
  plain.stream = false;
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_FALSE(plan_request(plain, i).stream);
    EXPECT_EQ(plan_request(plain, i).leave, RequestPlan::Leave::kNever);
  }
}

// Clients that leave as planned are counted apart: neither ok nor errors.
TEST(LoadClient, LeavingClientsAreNotErrors) {
  FakeServer server(FakeServer::Mode::kStream);
  LoadConfig config;
  config.url = server.url();
  config.concurrency = 2;
  config.n_requests = 30;
  config.prompt_tokens = 4;
  config.max_tokens = 3;
  config.timeout_s = 30;
  config.stream_fraction = 0.5;
  config.disconnect_fraction = 0.5;
  auto report = run_load(config);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->errors, 0) << report_text(config, *report);
  EXPECT_GT(report->left, 0);
  EXPECT_EQ(report->requests_ok + report->left, 30);
  EXPECT_NE(report_text(config, *report).find("left mid-way"), std::string::npos);
}

TEST(LoadClient, StreamsAgainstAFakeServer) {
  FakeServer server(FakeServer::Mode::kStream);
  LoadConfig config;
  config.url = server.url();
  config.concurrency = 3;
  config.n_requests = 7;
  config.prompt_tokens = 20;
  config.max_tokens = 5;
  config.timeout_s = 30;
  auto report = run_load(config);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->requests_ok, 7);
  EXPECT_EQ(report->errors, 0);
  EXPECT_EQ(report->output_tokens, 35);
  EXPECT_EQ(report->ttft_s.n, 7);
  EXPECT_EQ(report->tpot_s.n, 7);
  EXPECT_EQ(report->latency_s.n, 7);
  EXPECT_GE(report->ttft_s.p50, 0);
  EXPECT_GE(report->tpot_s.p50, 0);
  EXPECT_GE(report->latency_s.p50, 0);
  EXPECT_LE(report->ttft_s.mean, report->latency_s.mean);
  EXPECT_GT(report->wall_s, 0);
  EXPECT_GT(report->output_tok_s, 0);

  const std::vector<Json> sent = server.requests();
  ASSERT_EQ(sent.size(), 7u);
  for (const Json& body : sent) {
    EXPECT_EQ(server.word_count(body["prompt"].get<std::string>()), 20u);
    EXPECT_EQ(body["max_tokens"], 5);
    EXPECT_EQ(body["temperature"], 0);
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["ignore_eos"], true);
  }
  const Json json = Json::parse(report_json(config, *report));
  EXPECT_EQ(json["requests_ok"], 7);
  EXPECT_EQ(json["ttft_ms"]["n"], 7);
  EXPECT_NE(report_text(config, *report).find("7 requests ok"), std::string::npos);
}

TEST(LoadClient, WithoutStreamingOnlyLatency) {
  FakeServer server(FakeServer::Mode::kStream);
  LoadConfig config;
  config.url = server.url();
  config.n_requests = 2;
  config.prompt_tokens = 3;
  config.max_tokens = 4;
  config.stream = false;
  config.timeout_s = 30;
  auto report = run_load(config);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->requests_ok, 2);
  EXPECT_EQ(report->output_tokens, 8);  // from usage
  EXPECT_EQ(report->ttft_s.n, 0);
  EXPECT_EQ(report->latency_s.n, 2);
}

TEST(LoadClient, CountsServerErrors) {
  FakeServer server(FakeServer::Mode::kFail);
  LoadConfig config;
  config.url = server.url();
  config.concurrency = 2;
  config.n_requests = 5;
  config.prompt_tokens = 8;
  config.max_tokens = 3;
  config.timeout_s = 30;
  auto report = run_load(config);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->requests_ok, 0);
  EXPECT_EQ(report->errors, 5);
  EXPECT_EQ(report->output_tokens, 0);
  EXPECT_EQ(report->ttft_s.n, 0);
  ASSERT_EQ(report->error_samples.size(), 1u);
  EXPECT_NE(report->error_samples[0].find("HTTP 500"), std::string::npos);
  EXPECT_NE(report->error_samples[0].find("boom"), std::string::npos);
}

TEST(LoadClient, RejectsBadConfig) {
  LoadConfig config;
  config.url = "127.0.0.1:8080";
  config.n_requests = 1;
  EXPECT_FALSE(run_load(config).is_ok());
  config.url = "http://127.0.0.1:1";
  config.duration_s = 1;  // and n_requests: one or the other
  EXPECT_FALSE(run_load(config).is_ok());
  config.duration_s = 0;
  auto down = run_load(config);  // nothing listens on port 1: /tokenize fails
  ASSERT_FALSE(down.is_ok());
  EXPECT_NE(down.status().message().find("/tokenize"), std::string::npos);
}

}  // namespace
}  // namespace strata::bench
