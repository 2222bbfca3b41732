// `strata serve` over a model split between two real `strata worker` processes on 127.0.0.1:
// the same greedy bytes as one machine under concurrent load, clean failures when a worker
// dies, and the RPC counters in /metrics. Every process is stopped by its owner's destructor.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

constexpr int kRpcTimeoutMs = 3000;

class ServerSplitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_server_split_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    model_ = (*dir_ / "synth.gguf").string();
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model_, "--n-layer", "4"}), 0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::vector<std::string> args(std::vector<std::string> more) {
    std::vector<std::string> a = {"-m", model_, "-t", "1", "-c", "4096"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  static std::vector<std::string> split_args(const WorkerProcess& a, const WorkerProcess& b,
                                             std::vector<std::string> more) {
    std::vector<std::string> all =
        args({"--rpc", a.address() + "," + b.address(), "--device", "RPC0,RPC1"});
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }
  static std::string log(const std::string& name) { return (*dir_ / name).string(); }

  static fs::path* dir_;
  static std::string model_;
};

fs::path* ServerSplitTest::dir_ = nullptr;
std::string ServerSplitTest::model_;

int busy_slots(const ServerProcess& s) {
  Reply r = get(s, "/slots");
  int n = 0;
  if (r.status != 200 || !r.body.is_array()) return -1;
  for (const Json& slot : r.body) n += slot["is_processing"].get<bool>() ? 1 : 0;
  return n;
}

// Waits (bounded) until `n` slots are busy.
bool wait_busy(const ServerProcess& s, int n) {
  for (int i = 0; i < 400; ++i) {
    if (busy_slots(s) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// The product's promise: the same greedy bytes split or not, batched or not. 16 prompts at once
// (four of them repeats, so the prompt cache is reused mid-load) on 8 slots over two workers
// give, each, the text of that prompt sent alone to a server on this machine.
TEST_F(ServerSplitTest, ConcurrentSplitEqualsLocalAlone) {
  std::vector<std::string> prompts = sixteen_prompts();
  for (int i : {3, 7, 11, 15}) prompts[i] = prompts[i - 2];
  std::vector<std::string> alone;
  {
    ServerProcess local(args({"-np", "1"}));
    ASSERT_GT(local.port(), 0);
    for (const std::string& p : prompts) alone.push_back(completion_text(local, p, 16));
  }
  WorkerProcess a, b;
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  ServerProcess s(split_args(a, b, {"-np", "8"}), {}, log("split.err"));
  ASSERT_GT(s.port(), 0);
  const std::vector<std::string> together = concurrent_texts(s, prompts, 16);
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_FALSE(alone[i].empty()) << "prompt " << i;
    EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
  }
  EXPECT_TRUE(wait_all_idle(s));
  EXPECT_EQ(s.stop(), 0);
  EXPECT_TRUE(a.running());
  EXPECT_TRUE(b.running());
}

double rpc_sample(const std::map<std::string, double>& m, const std::string& name,
                  const std::string& labels) {
  auto it = m.find(name + "{" + labels + "}");
  return it == m.end() ? -1 : it->second;
}

// Hand-off (the hidden state from worker to worker) under concurrent load with two pipeline
// groups, over two and three workers, with and without backend sampling: each prompt's text is
// that of the prompt sent alone to a server on this machine, and so it is through the server
// (STRATA_RPC_HANDOFF=0). The counters show which path the steps took.
TEST_F(ServerSplitTest, HandOffWithPipelineGroupsEqualsLocalAlone) {
  const std::vector<std::string> prompts = sixteen_prompts();
  std::vector<std::string> alone;
  {
    ServerProcess local(args({"-np", "1"}));
    ASSERT_GT(local.port(), 0);
    for (const std::string& p : prompts) alone.push_back(completion_text(local, p, 16));
  }
  WorkerProcess a, b, c;
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  ASSERT_GT(c.port(), 0);
  struct Config {
    std::vector<const WorkerProcess*> workers;
    bool backend_sampling;
    bool handoff;
  };
  const std::vector<Config> configs = {{{&a, &b}, false, true},
                                       {{&a, &b}, true, true},
                                       {{&a, &b, &c}, true, true},
                                       {{&a, &b, &c}, false, true},
                                       {{&a, &b, &c}, false, false}};
  for (const Config& cfg : configs) {
    std::string rpc, devices;
    for (size_t i = 0; i < cfg.workers.size(); ++i) {
      rpc += (i ? "," : "") + cfg.workers[i]->address();
      devices += (i ? ",RPC" : "RPC") + std::to_string(i);
    }
    std::vector<std::string> more = {"--rpc", rpc, "--device",          devices,
                                     "-np",   "8", "--pipeline-groups", "2"};
    if (cfg.backend_sampling) more.push_back("--backend-sampling");
    const std::string name = std::to_string(cfg.workers.size()) + " workers" +
                             (cfg.backend_sampling ? ", backend sampling" : "") +
                             (cfg.handoff ? ", hand-off" : ", through the server");
    SCOPED_TRACE(name);
    ServerProcess s(args(more), {{"STRATA_RPC_HANDOFF", cfg.handoff ? "1" : "0"}},
                    log("handoff.err"));
    ASSERT_GT(s.port(), 0);
    const std::vector<std::string> together = concurrent_texts(s, prompts, 16);
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_FALSE(alone[i].empty()) << "prompt " << i;
      EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
    }
    std::string error;
    auto m = parse_prometheus(get(s, "/metrics").raw, &error);
    ASSERT_TRUE(error.empty()) << error;
    for (size_t i = 0; i < cfg.workers.size(); ++i) {
      const double bytes = rpc_sample(m, "strata_rpc_handoff_bytes_total",
                                      "endpoint=\"" + cfg.workers[i]->address() + "\"");
      const bool sends = cfg.handoff && i + 1 < cfg.workers.size();
      EXPECT_EQ(bytes > 0, sends) << "stage " << i << ": " << bytes << " bytes handed off";
    }
    EXPECT_TRUE(wait_all_idle(s));
    EXPECT_EQ(s.stop(), 0);
  }
  EXPECT_TRUE(a.running() && b.running() && c.running());
}

// A worker killed while a streamed and a non-streamed request run: both end within the RPC
// timeout (a 5xx JSON error; an error event, then the end of the stream), the server stays up,
// /health says why it cannot serve, and later requests fail at once with a 503 naming the worker.
TEST_F(ServerSplitTest, WorkerDeathFailsRequestsCleanly) {
  WorkerProcess a, b;
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  ServerProcess s(split_args(a, b, {"-np", "4"}),
                  {{"STRATA_RPC_TIMEOUT_MS", std::to_string(kRpcTimeoutMs)}}, log("fault.err"));
  ASSERT_GT(s.port(), 0);
  const std::string endless =
      R"({"prompt": "go on", "max_tokens": 100000, "ignore_eos": true, "temperature": 0)";

  RawConnection stream(s.port(), 60);
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE(stream.post("/v1/completions", endless + R"(, "stream": true})"));
  ASSERT_TRUE(stream.read_until("data: "));
  auto whole = std::async(std::launch::async, [&] {
    auto c = s.client();
    c->set_read_timeout(60, 0);
    Reply r;
    auto res = c->Post("/v1/completions", endless + "}", "application/json");
    if (!res) return r;
    r.status = res->status;
    r.raw = res->body;
    r.body = Json::parse(res->body, nullptr, false);
    return r;
  });
  ASSERT_TRUE(wait_busy(s, 2));

  const auto t0 = std::chrono::steady_clock::now();
  b.kill_now();
  // Both must end by themselves; the bounds only stop a hang from stalling the suite.
  const bool stream_ended = stream.read_to_end();
  const Reply r = whole.get();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(stream_ended) << "the stream did not end after the worker died";
  EXPECT_LT(seconds, kRpcTimeoutMs / 1000.0 + 15) << "the requests did not fail in time";

  EXPECT_GE(r.status, 500) << r.raw;
  EXPECT_LT(r.status, 600) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  ASSERT_TRUE(r.body["error"]["message"].is_string()) << r.raw;
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find(b.address()), std::string::npos)
      << r.raw;

  // The stream: tokens, then one error event naming the worker, then nothing.
  const std::string& got = stream.got();
  const size_t last = got.rfind("data: ");
  ASSERT_NE(last, std::string::npos) << got;
  const std::string tail = got.substr(last + 6, got.find('\n', last) - last - 6);
  const Json event = Json::parse(tail, nullptr, false);
  ASSERT_TRUE(event.is_object()) << got;
  ASSERT_TRUE(event.contains("error")) << got;
  EXPECT_NE(event["error"]["message"].get<std::string>().find(b.address()), std::string::npos);
  EXPECT_EQ(got.find("[DONE]"), std::string::npos);

  EXPECT_TRUE(s.running());
  Reply health = get(s, "/health");
  EXPECT_EQ(health.status, 503) << health.raw;
  EXPECT_EQ(health.body["status"], "error") << health.raw;
  EXPECT_NE(health.raw.find(b.address()), std::string::npos) << health.raw;
  ASSERT_TRUE(health.body["workers"].is_array()) << health.raw;
  ASSERT_EQ(health.body["workers"].size(), 2u) << health.raw;
  EXPECT_EQ(health.body["workers"][0]["state"], "up") << health.raw;
  EXPECT_EQ(health.body["workers"][1]["endpoint"], b.address()) << health.raw;
  EXPECT_EQ(health.body["workers"][1]["state"], "down") << health.raw;
  for (bool streamed : {false, true}) {
    Json body = {{"prompt", "after"}, {"max_tokens", 4}, {"stream", streamed}};
    Reply later = post(s, "/v1/completions", body.dump());
    expect_error(later, 503);
    EXPECT_NE(later.raw.find(b.address()), std::string::npos) << later.raw;
  }
  EXPECT_TRUE(wait_all_idle(s));
  std::string error;
  auto m = parse_prometheus(get(s, "/metrics").raw, &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(m["strata_requests_failed_total"], 2);
  EXPECT_EQ(m["strata_rpc_worker_up{endpoint=\"" + b.address() + "\"}"], 0);
  EXPECT_EQ(m["strata_rpc_worker_up{endpoint=\"" + a.address() + "\"}"], 1);
  EXPECT_EQ(s.stop(), 0);
  EXPECT_TRUE(a.running());
}

// Split, /metrics has each worker's RPC counters, by endpoint and command, and they grow with
// the requests: one graph per remote stage per decode step. With hand-off (the default) the
// first stage's output goes straight to the second worker: nothing of it comes back to the
// server, and its bytes are counted as hand-off bytes; without (STRATA_RPC_HANDOFF=0) the first
// stage's output is read back by the server.
TEST_F(ServerSplitTest, MetricsExportRpcCountersPerEndpoint) {
  for (const bool handoff : {true, false}) {
    SCOPED_TRACE(handoff ? "hand-off" : "through the server");
    WorkerProcess a, b;
    ASSERT_GT(a.port(), 0);
    ASSERT_GT(b.port(), 0);
    ServerProcess s(split_args(a, b, {"-np", "2"}), {{"STRATA_RPC_HANDOFF", handoff ? "1" : "0"}},
                    log("metrics.err"));
    ASSERT_GT(s.port(), 0);
    std::string error;
    const auto before = parse_prometheus(get(s, "/metrics").raw, &error);
    ASSERT_TRUE(error.empty()) << error;
    EXPECT_FALSE(completion_text(s, "count the messages", 8).empty());
    const auto after = parse_prometheus(get(s, "/metrics").raw, &error);
    ASSERT_TRUE(error.empty()) << error;
    auto delta = [&](const std::string& name, const std::string& labels) {
      return rpc_sample(after, name, labels) - rpc_sample(before, name, labels);
    };

    const double steps =
        after.at("strata_decode_steps_total") - before.at("strata_decode_steps_total");
    EXPECT_GE(steps, 8);
    for (const WorkerProcess* w : {&a, &b}) {
      const bool first = w == &a;
      const std::string ep = "endpoint=\"" + w->address() + "\"";
      SCOPED_TRACE(ep);
      EXPECT_EQ(rpc_sample(after, "strata_rpc_worker_up", ep), 1);
      // Loading sent the weights and the handshake before any request.
      EXPECT_EQ(rpc_sample(before, "strata_rpc_messages_total", ep + ",command=\"HELLO\""), 1);
      EXPECT_GT(rpc_sample(before, "strata_rpc_bytes_total",
                           ep + ",command=\"HELLO\",direction=\"received\""),
                0);
      EXPECT_EQ(delta("strata_rpc_decode_steps_total", ep), steps);
      double graph_messages = 0, graph_bytes = 0;
      for (const char* c : {"GRAPH_COMPUTE", "GRAPH_RECOMPUTE", "HANDOFF_COMPUTE"}) {
        const std::string l = ep + ",command=\"" + c + "\"";
        graph_messages += delta("strata_rpc_messages_total", l);
        graph_bytes += delta("strata_rpc_bytes_total", l + ",direction=\"sent\"");
      }
      EXPECT_EQ(graph_messages, steps);
      EXPECT_GT(graph_bytes, 0);
      EXPECT_EQ(delta("strata_rpc_messages_total", ep + ",command=\"HANDOFF_COMPUTE\"") > 0,
                handoff);
      // What the steps read back: GET_TENSORS, or GET_TENSOR without batching.
      double received = 0;
      for (const char* c : {"GET_TENSORS", "GET_TENSOR"}) {
        received +=
            delta("strata_rpc_bytes_total", ep + ",command=\"" + c + "\",direction=\"received\"");
      }
      if (first && handoff) {
        EXPECT_EQ(received, 0);
        // At least one row of n_embd (256) floats per step.
        EXPECT_GE(delta("strata_rpc_handoff_bytes_total", ep), steps * 4 * 256);
      } else {
        EXPECT_GT(received, 0);
        EXPECT_EQ(delta("strata_rpc_handoff_bytes_total", ep), 0);
      }
    }
  }
}

}  // namespace
}  // namespace strata::server::itest
