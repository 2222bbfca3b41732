// `strata serve` as a router (--models-dir, --models-preset) over two synthetic models, as real
// processes on 127.0.0.1: routing by name, least-recently-used unloading past --models-max,
// every setting a child needs arriving in the child, keys, crashes, streams and cancels, and no
// child outliving its router. Every process is stopped by its owner's destructor.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

class RouterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_router_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_ / "models");
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", path("models/alpha.gguf")}), 0);
    ASSERT_EQ(
        run_command({STRATA_BINARY, "gguf", "gen", "-o", path("models/beta.gguf"), "--seed", "9"}),
        0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& p) { return (*dir_ / p).string(); }
  // A router over the two models; ServerProcess adds --port 0 and --metrics.
  static std::vector<std::string> args(std::vector<std::string> more) {
    std::vector<std::string> a = {"--models-dir", path("models"), "-t", "1", "-c", "256"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  static fs::path* dir_;
};

fs::path* RouterTest::dir_ = nullptr;

Json generate(const ServerProcess& s, const std::string& model, int n = 6,
              const httplib::Headers& headers = {}) {
  const Json body = {
      {"model", model}, {"prompt", "Hello world"}, {"max_tokens", n}, {"temperature", 0}};
  const Reply r = post(s, "/v1/completions", body.dump(), headers);
  EXPECT_EQ(r.status, 200) << r.raw;
  return r.body;
}

std::string text_of(const Json& completion) {
  if (!completion.is_object() || !completion.contains("choices")) return "";
  return completion["choices"][0]["text"].get<std::string>();
}

// The status object of `model` in GET /models.
Json model_status(const ServerProcess& s, const std::string& model,
                  const httplib::Headers& headers = {}) {
  const Reply r = get(s, "/models", headers);
  if (r.status != 200 || !r.body.contains("data")) return Json();
  for (const Json& m : r.body["data"]) {
    if (m["id"] == model) return m["status"];
  }
  return Json();
}

std::string state_of(const ServerProcess& s, const std::string& model) {
  const Json st = model_status(s, model);
  return st.is_object() ? st["value"].get<std::string>() : "";
}

// The command line of a running process, one element per argument.
std::vector<std::string> cmdline(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::vector<std::string> out;
  std::string arg;
  while (std::getline(f, arg, '\0')) out.push_back(arg);
  return out;
}

bool has_pair(const std::vector<std::string>& argv, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == a && argv[i + 1] == b) return true;
  }
  return false;
}

// Gone, or a zombie nobody has reaped yet: either way it runs no more.
bool process_gone(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

bool wait_gone(int pid) {
  for (int i = 0; i < 200; ++i) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Two models in a folder, requests to each by name, and a third request past --models-max 1
// unloads the idle one. The model's own greedy text comes back after a reload.
TEST_F(RouterTest, RoutesByNameAndUnloadsLeastRecentlyUsed) {
  ServerProcess s(args({"--models-max", "1"}));
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(state_of(s, "alpha"), "unloaded");
  EXPECT_EQ(state_of(s, "beta"), "unloaded");
  EXPECT_EQ(get(s, "/health").status, 200);

  const Json a = generate(s, "alpha");
  EXPECT_EQ(a["model"], "alpha");
  EXPECT_EQ(state_of(s, "alpha"), "loaded");
  EXPECT_EQ(state_of(s, "beta"), "unloaded");
  const Reply props_a = get(s, "/props?model=alpha");
  ASSERT_EQ(props_a.status, 200) << props_a.raw;
  EXPECT_EQ(props_a.body["model_path"], path("models/alpha.gguf"));

  const Json b = generate(s, "beta");
  EXPECT_EQ(b["model"], "beta");
  EXPECT_NE(text_of(a), text_of(b)) << "two different models gave the same text";
  EXPECT_EQ(state_of(s, "alpha"), "unloaded") << "--models-max 1: alpha, idle, must go";
  EXPECT_EQ(state_of(s, "beta"), "loaded");

  const Json again = generate(s, "alpha");
  EXPECT_EQ(text_of(again), text_of(a));
  EXPECT_EQ(state_of(s, "alpha"), "loaded");
  EXPECT_EQ(state_of(s, "beta"), "unloaded");
  const Json st = model_status(s, "alpha");
  EXPECT_EQ(st["args"][0], "strata");
  // A loaded model's entry carries what its child says of it; an unloaded one's does not.
  const Json listed = get(s, "/v1/models").body["data"];
  EXPECT_GT(listed[0]["meta"]["n_vocab"].get<int>(), 0) << listed;
  EXPECT_FALSE(listed[1].contains("meta")) << listed;
  EXPECT_TRUE(has_pair(st["args"].get<std::vector<std::string>>(), "--alias", "alpha"));

  // Errors as llama-server words them.
  Reply r = post(s, "/v1/completions", R"({"model": "gamma", "prompt": "x"})");
  expect_error(r, 400);
  EXPECT_NE(r.raw.find("model 'gamma' not found"), std::string::npos) << r.raw;
  r = post(s, "/v1/completions", R"({"prompt": "x"})");
  expect_error(r, 400);
  EXPECT_NE(r.raw.find("model name is missing"), std::string::npos) << r.raw;
  expect_error(post(s, "/v1/completions", R"({"model": "../models/alpha.gguf"})"), 400);
  expect_error(post(s, "/v1/completions", "not json"), 400);
  r = post(s, "/v1/completions", Json{{"model", std::string(100000, 'x')}}.dump());
  expect_error(r, 400);
  EXPECT_LT(r.raw.size(), 1000u) << "an error echoes a bounded part of the name";
  expect_error(get(s, "/slots"), 400);
  EXPECT_EQ(get(s, "/slots?model=alpha").status, 200);
  const Reply router_props = get(s, "/props");
  EXPECT_EQ(router_props.body["role"], "router");
  EXPECT_EQ(router_props.body["max_instances"], 1);

  // Load and unload by hand.
  expect_error(post(s, "/models/load", R"({"model": "gamma"})"), 404);
  expect_error(post(s, "/models/load", R"({"model": "alpha"})"), 400);  // already running
  r = post(s, "/models/unload", R"({"model": "alpha"})");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["success"], true);
  EXPECT_EQ(state_of(s, "alpha"), "unloaded");
  expect_error(post(s, "/models/unload", R"({"model": "alpha"})"), 400);  // not running
  r = post(s, "/models/load", R"({"model": "beta"})");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(state_of(s, "beta"), "loaded");
  EXPECT_EQ(get(s, "/v1/models").body["data"].size(), 2u);
}

// First requests that arrive together start one child per model, not one per request.
TEST_F(RouterTest, ConcurrentFirstRequestsStartOneChildPerModel) {
  ServerProcess s(args({"-np", "2"}));
  std::vector<std::thread> threads;
  std::vector<std::string> texts(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { texts[i] = text_of(generate(s, i % 2 ? "beta" : "alpha")); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 2; i < 8; ++i) EXPECT_EQ(texts[i], texts[i % 2]) << i;
  // All four requests for each model went to its one child.
  for (const char* model : {"alpha", "beta"}) {
    const Reply metrics = get(s, std::string("/metrics?model=") + model);
    std::string error;
    const auto samples = parse_prometheus(metrics.raw, &error);
    ASSERT_TRUE(error.empty()) << error;
    EXPECT_EQ(samples.at("strata_requests_total"), 4) << model;
  }
  EXPECT_EQ(model_status(s, "alpha")["requests_in_flight"], 0);
  EXPECT_EQ(model_status(s, "beta")["requests_in_flight"], 0);
}

TEST_F(RouterTest, NoAutoloadRefusesUnloadedModels) {
  ServerProcess s(args({"--no-models-autoload"}));
  Reply r = post(s, "/v1/completions", R"({"model": "alpha", "prompt": "x"})");
  expect_error(r, 400);
  EXPECT_NE(r.raw.find("model is not loaded"), std::string::npos) << r.raw;
  EXPECT_EQ(state_of(s, "alpha"), "unloaded");
  // ?autoload=true overrides it for one request.
  r = post(s, "/v1/completions?autoload=true", R"({"model": "alpha", "prompt": "x",
                                                   "max_tokens": 2})");
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(state_of(s, "alpha"), "loaded");
}

// Every setting a child needs, from the router's command line, its environment or the preset,
// is seen in the child: its /props (through the router) or its command line.
TEST_F(RouterTest, SettingsReachChildren) {
  std::ofstream(path("p.ini")) << "[*]\nmin-p = 0.2\n[alpha]\nrepeat-penalty = 1.3\n"
                               << "c = 128\n";  // the router's -c wins over this
  ServerProcess s(
      args({"--models-preset", path("p.ini"), "-t", "2", "-c", "512", "--pipeline-groups", "2",
            "--temp", "0.25", "--top-k", "7", "--top-p", "0.5", "-n", "9", "--slots"}),
      {{"LLAMA_ARG_N_PARALLEL", "4"}});
  ASSERT_GT(s.port(), 0);
  const Reply p = get(s, "/props?model=alpha");
  ASSERT_EQ(p.status, 200) << p.raw;
  EXPECT_EQ(p.body["total_slots"], 4);        // -np, from the environment
  EXPECT_EQ(p.body["pipeline_groups"], 2);    // --pipeline-groups
  EXPECT_EQ(p.body["n_ctx"], 512);            // -c, over the preset's
  EXPECT_EQ(p.body["model_alias"], "alpha");  // the router's name for it
  const Json params = p.body["default_generation_settings"]["params"];
  EXPECT_FLOAT_EQ(params["temperature"].get<float>(), 0.25f);  // sampling defaults
  EXPECT_EQ(params["top_k"], 7);
  EXPECT_EQ(params["n_predict"], 9);
  EXPECT_FLOAT_EQ(params["top_p"].get<float>(), 0.5f);
  EXPECT_FLOAT_EQ(params["min_p"].get<float>(), 0.2f);           // the preset's [*]
  EXPECT_FLOAT_EQ(params["repeat_penalty"].get<float>(), 1.3f);  // the preset's [alpha]
  const Reply pb = get(s, "/props?model=beta");
  ASSERT_EQ(pb.status, 200) << pb.raw;
  EXPECT_FLOAT_EQ(pb.body["default_generation_settings"]["params"]["repeat_penalty"].get<float>(),
                  1.0f);
  // /slots is served (--slots) and shows the pipeline groups' slots.
  const Reply slots = get(s, "/slots?model=alpha");
  ASSERT_EQ(slots.status, 200) << slots.raw;
  EXPECT_EQ(slots.body.size(), 4u);
  EXPECT_EQ(slots.body[3]["group"], 1);
  // Threads: no endpoint shows them, the child's command line does.
  const Json st = model_status(s, "alpha");
  ASSERT_TRUE(st.contains("pid")) << st;
  const std::vector<std::string> argv = cmdline(st["pid"].get<int>());
  EXPECT_TRUE(has_pair(argv, "-t", "2"));
  EXPECT_TRUE(has_pair(argv, "--host", "127.0.0.1"));
  EXPECT_EQ(argv.at(1), "serve");
  for (const std::string& a : argv) EXPECT_EQ(a.find("models-"), std::string::npos) << a;
}

// The router checks the clients' key; a child takes only its private key, which is in no
// command line, so that nothing but the router can drive it.
TEST_F(RouterTest, ApiKeyStaysWithTheRouter) {
  ServerProcess s(args({"--api-key", "router-secret"}));
  const httplib::Headers key = {{"Authorization", "Bearer router-secret"}};
  EXPECT_EQ(get(s, "/health").status, 200);
  expect_error(get(s, "/models"), 401);
  expect_error(post(s, "/v1/completions", R"({"model": "alpha", "prompt": "x"})"), 401);
  EXPECT_EQ(state_of(s, "alpha"), "") << "listed without the key";
  EXPECT_FALSE(text_of(generate(s, "alpha", 4, key)).empty());
  const Json st = model_status(s, "alpha", key);
  ASSERT_TRUE(st.contains("port")) << st;
  for (const std::string& a : cmdline(st["pid"].get<int>())) {
    EXPECT_EQ(a.find("router-secret"), std::string::npos) << a;
  }
  httplib::Client child("127.0.0.1", st["port"].get<int>());
  auto health = child.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (const httplib::Headers& h : {httplib::Headers{}, key}) {
    auto res = child.Get("/props", h);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << "the child answered without its private key";
  }
}

// --rpc and the RPC token reach the child, by flag or by environment: a worker that requires
// the token serves the child's layers. Without the token the child cannot start, and the error
// names the model and ends with the child's own words.
TEST_F(RouterTest, RpcEndpointsAndTokenReachChildren) {
  std::ofstream(path("token")) << "open-sesame\n";
  ChildProcess worker({"worker", "-t", "1", "--port", "0", "--auth-token-file", path("token")});
  ASSERT_GT(worker.port(), 0);
  const std::vector<std::string> split = {"--rpc", worker.address(), "--device", "RPC0,CPU", "-ts",
                                          "3,1"};
  std::string reference;
  {
    ServerProcess local(args({}));
    reference = text_of(generate(local, "alpha"));
  }
  {
    std::vector<std::string> a = args(split);
    a.insert(a.end(), {"--rpc-token-file", path("token")});
    ServerProcess s(a);
    EXPECT_EQ(text_of(generate(s, "alpha")), reference);
    const Reply p = get(s, "/props?model=alpha");
    ASSERT_TRUE(p.body.contains("workers")) << p.raw;
    EXPECT_EQ(p.body["workers"][0]["endpoint"], worker.address());
    // The layer split shows in no endpoint: the child's command line has it.
    const std::vector<std::string> argv = cmdline(model_status(s, "alpha")["pid"].get<int>());
    EXPECT_TRUE(has_pair(argv, "-ts", "3,1"));
    EXPECT_TRUE(has_pair(argv, "--device", "RPC0,CPU"));
  }
  {
    ServerProcess s(args(split), {{"STRATA_RPC_TOKEN", "open-sesame"}});
    EXPECT_EQ(text_of(generate(s, "alpha")), reference);
  }
  ServerProcess s(args(split));
  const Reply r = post(s, "/v1/completions", R"({"model": "alpha", "prompt": "x"})");
  expect_error(r, 500);
  const std::string message = r.body["error"]["message"].get<std::string>();
  EXPECT_NE(message.find("model 'alpha' failed to start"), std::string::npos) << message;
  EXPECT_NE(message.find("its last output"), std::string::npos) << message;
  EXPECT_NE(message.find("strata serve"), std::string::npos) << message;
  const Json st = model_status(s, "alpha");
  EXPECT_EQ(st["value"], "unloaded");
  EXPECT_EQ(st["failed"], true);
}

// A child that dies is reported (state, exit code, a log line) and started again on the next
// request. The children's output is in the router's log, each line under its model's name.
TEST_F(RouterTest, CrashedChildIsReportedAndRestarted) {
  const std::string log = path("crash.log");
  ServerProcess s(args({}), {}, log);
  const std::string before = text_of(generate(s, "alpha"));
  const int pid = model_status(s, "alpha")["pid"].get<int>();
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  Json st;
  for (int i = 0; i < 200; ++i) {
    st = model_status(s, "alpha");
    if (st["value"] == "unloaded") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(st["value"], "unloaded") << st;
  EXPECT_EQ(st["failed"], true);
  EXPECT_EQ(st["exit_code"], 128 + SIGKILL);
  EXPECT_NE(st["error"].get<std::string>().find("signal 9"), std::string::npos) << st;
  EXPECT_EQ(text_of(generate(s, "alpha")), before);
  const Json again = model_status(s, "alpha");
  EXPECT_EQ(again["value"], "loaded");
  EXPECT_NE(again["pid"].get<int>(), pid);
  EXPECT_FALSE(again.contains("failed"));
  std::ifstream f(log);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("[alpha] strata serve: listening on http://127.0.0.1:"), std::string::npos)
      << text;
  EXPECT_NE(text.find("model 'alpha' (pid " + std::to_string(pid) + ") stopped unexpectedly"),
            std::string::npos)
      << text;
}

double tokens_predicted(const ServerProcess& s, const std::string& model) {
  const Reply r = get(s, "/metrics?model=" + model);
  std::string error;
  const auto samples = parse_prometheus(r.raw, &error);
  auto it = samples.find("llamacpp:tokens_predicted_total");
  return it == samples.end() ? -1 : it->second;
}

// A stream is relayed as the child writes it: its first event arrives while the child is still
// generating. A client that hangs up cancels the child's request.
TEST_F(RouterTest, StreamsAreRelayedAndDisconnectsCancel) {
  ServerProcess s(args({"-c", "4096"}));
  generate(s, "alpha", 1);
  const double before = tokens_predicted(s, "alpha");
  ASSERT_GE(before, 0);
  constexpr int kLong = 4000;
  {
    RawConnection c(s.port(), 60);
    const Json body = {{"model", "alpha"}, {"prompt", "Hello"},  {"max_tokens", kLong},
                       {"stream", true},   {"ignore_eos", true}, {"temperature", 0}};
    ASSERT_TRUE(c.post("/v1/completions", body.dump()));
    ASSERT_TRUE(c.read_until("data: ")) << "no event came";
    const Reply slots = get(s, "/slots?model=alpha");
    ASSERT_EQ(slots.status, 200) << slots.raw;
    EXPECT_TRUE(slots.body[0]["is_processing"].get<bool>())
        << "the first event came only after the child had finished: the stream was buffered";
    c.close_now();
  }
  bool idle = false;
  for (int i = 0; i < 400 && !idle; ++i) {
    const Reply slots = get(s, "/slots?model=alpha");
    idle = slots.status == 200 && !slots.body[0]["is_processing"].get<bool>();
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(idle);
  EXPECT_LT(tokens_predicted(s, "alpha") - before, kLong) << "the request ran to its end";
  EXPECT_EQ(model_status(s, "alpha")["requests_in_flight"], 0);
}

bool wait_slot(const ServerProcess& s, const std::string& model, bool busy) {
  for (int i = 0; i < 400; ++i) {
    const Reply slots = get(s, "/slots?model=" + model);
    if (slots.status == 200 && slots.body[0]["is_processing"].get<bool>() == busy) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// A whole (not streamed) answer writes nothing until the end: the router watches the client's
// connection meanwhile, and a client that hangs up cancels the child's request too.
TEST_F(RouterTest, DisconnectCancelsWholeAnswers) {
  ServerProcess s(args({"-c", "4096"}));
  generate(s, "alpha", 1);
  const double before = tokens_predicted(s, "alpha");
  constexpr int kLong = 4000;
  {
    RawConnection c(s.port(), 60);
    const Json body = {{"model", "alpha"},
                       {"prompt", "Hello"},
                       {"max_tokens", kLong},
                       {"ignore_eos", true},
                       {"temperature", 0}};
    ASSERT_TRUE(c.post("/v1/completions", body.dump()));
    ASSERT_TRUE(wait_slot(s, "alpha", true));
  }
  EXPECT_TRUE(wait_slot(s, "alpha", false));
  EXPECT_LT(tokens_predicted(s, "alpha") - before, kLong) << "the request ran to its end";
}

// Past --models-max, a model with a request in flight is never the one unloaded: the new model
// waits for its turn (an error that says so), and gets it once the request is over.
TEST_F(RouterTest, ModelsWithRequestsInFlightAreNotUnloaded) {
  ServerProcess s(args({"-c", "4096", "--models-max", "1"}));
  {
    RawConnection c(s.port(), 60);
    const Json body = {{"model", "alpha"}, {"prompt", "Hello"},  {"max_tokens", 4000},
                       {"stream", true},   {"ignore_eos", true}, {"temperature", 0}};
    ASSERT_TRUE(c.post("/v1/completions", body.dump()));
    ASSERT_TRUE(c.read_until("data: "));
    EXPECT_EQ(model_status(s, "alpha")["requests_in_flight"], 1);
    const Reply r = post(s, "/v1/completions", R"({"model": "beta", "prompt": "x"})");
    expect_error(r, 503);
    EXPECT_NE(r.raw.find("model limit reached"), std::string::npos) << r.raw;
    EXPECT_EQ(state_of(s, "alpha"), "loaded");
    EXPECT_EQ(state_of(s, "beta"), "unloaded");
  }
  bool done = false;
  for (int i = 0; i < 400 && !done; ++i) {
    done = model_status(s, "alpha")["requests_in_flight"] == 0;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(done);
  EXPECT_FALSE(text_of(generate(s, "beta", 2)).empty());
  EXPECT_EQ(state_of(s, "alpha"), "unloaded");
}

// What the router cannot start with is an error at start naming its cause; a preset's
// load-on-startup model is loaded before the router listens.
TEST_F(RouterTest, StartupErrorsAndLoadOnStartup) {
  const auto run = [](const std::vector<std::string>& argv, std::string* out) {
    std::string cmd = std::string("'") + STRATA_BINARY + "' serve --port 0";
    for (const std::string& a : argv) cmd += " '" + a + "'";
    const std::string log = path("startup.log");
    const int rc = std::system((cmd + " >'" + log + "' 2>&1 </dev/null").c_str());
    std::ifstream f(log);
    *out = std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    return rc;
  };
  std::ofstream(path("bad.ini")) << "[alpha]\n; fine\nctx-size = lots\n";
  std::string out;
  EXPECT_NE(run({"--models-preset", path("bad.ini")}, &out), 0);
  EXPECT_NE(out.find("bad.ini:3:"), std::string::npos) << out;
  EXPECT_NE(run({"--models-dir", path("models"), "-m", path("models/alpha.gguf")}, &out), 0);
  EXPECT_NE(out.find("without -m"), std::string::npos) << out;
  EXPECT_NE(run({"--models-dir", path("nowhere")}, &out), 0);
  EXPECT_NE(out.find("nowhere"), std::string::npos) << out;

  std::ofstream(path("startup.ini")) << "[beta]\nload-on-startup = true\n";
  ServerProcess s(args({"--models-preset", path("startup.ini")}));
  EXPECT_EQ(state_of(s, "beta"), "loaded");
  EXPECT_EQ(state_of(s, "alpha"), "unloaded");
}

// No child outlives its router: stopped with it, or killed by the kernel when the router is.
TEST_F(RouterTest, ChildrenStopWithTheRouter) {
  int pid_a = 0, pid_b = 0;
  {
    ServerProcess s(args({}));
    generate(s, "alpha", 1);
    generate(s, "beta", 1);
    pid_a = model_status(s, "alpha")["pid"].get<int>();
    pid_b = model_status(s, "beta")["pid"].get<int>();
    EXPECT_EQ(s.stop(), 0);
  }
  EXPECT_TRUE(process_gone(pid_a));
  EXPECT_TRUE(process_gone(pid_b));

  ServerProcess s(args({}));
  generate(s, "alpha", 1);
  const int pid = model_status(s, "alpha")["pid"].get<int>();
  ASSERT_FALSE(process_gone(pid));
  s.kill_now();  // no chance to clean up: PR_SET_PDEATHSIG does it
  EXPECT_TRUE(wait_gone(pid));
}

}  // namespace
}  // namespace strata::server::itest
