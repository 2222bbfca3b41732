// `strata serve --backend-sampling` against the same server without it: the same bytes for
// greedy and seeded requests (with penalties, logit bias, log-probabilities, n > 1), on one
// machine and over two real workers with two pipeline groups; only token ids cross the network
// back from the last stage; a request the device cannot take is sampled on the CPU and counted.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

constexpr int kVocab = 2000;

class BackendSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_backend_sampling_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    model_ = (*dir_ / "synth.gguf").string();
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model_, "--n-layer", "4",
                           "--n-vocab", std::to_string(kVocab)}),
              0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::vector<std::string> args(std::vector<std::string> more) {
    std::vector<std::string> a = {"-m", model_, "-t", "1", "-c", "4096", "-np", "4"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  static std::string log(const std::string& name) { return (*dir_ / name).string(); }

  static fs::path* dir_;
  static std::string model_;
};

fs::path* BackendSamplingTest::dir_ = nullptr;
std::string BackendSamplingTest::model_;

// Requests that use every part of the chain: greedy, seeded with truncation, penalties, a logit
// bias, log-probabilities with alternatives, two choices of one prompt.
std::vector<Json> requests() {
  std::vector<Json> r;
  auto add = [&](const std::string& prompt, Json extra) {
    Json body = {{"prompt", prompt}, {"max_tokens", 24}, {"ignore_eos", true}};
    body.update(extra);
    r.push_back(body);
  };
  add("greedy one", {{"temperature", 0}});
  add("greedy two with more words", {{"temperature", 0}, {"logprobs", 2}});
  add("seeded", {{"temperature", 0.9}, {"seed", 42}, {"top_k", 0}, {"top_p", 0.9}});
  add("penalised", {{"temperature", 1.0},
                    {"seed", 7},
                    {"repeat_penalty", 1.3},
                    {"presence_penalty", 0.5},
                    {"frequency_penalty", 0.3},
                    {"min_p", 0.1}});
  add("biased", {{"temperature", 0.8}, {"seed", 3}, {"logit_bias", {{"5", 3.0}, {"17", -100}}}});
  add("with logprobs", {{"temperature", 1.2}, {"seed", 11}, {"logprobs", 5}});
  add("two choices", {{"temperature", 1.0}, {"seed", 99}, {"n", 2}});
  return r;
}

// The choices of each request (text, log-probabilities, finish reason) as JSON text, sent all
// at once.
std::vector<std::string> choices_of(const ServerProcess& s, const std::vector<Json>& reqs) {
  std::vector<std::string> out(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] {
      Reply r = post(s, "/v1/completions", reqs[i].dump());
      EXPECT_EQ(r.status, 200) << r.raw;
      if (r.status == 200) out[i] = r.body["choices"].dump();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

std::map<std::string, double> metrics(const ServerProcess& s) {
  std::string error;
  auto m = parse_prometheus(get(s, "/metrics").raw, &error);
  EXPECT_TRUE(error.empty()) << error;
  return m;
}

double received_from(const std::map<std::string, double>& m, const WorkerProcess& w) {
  double bytes = 0;
  for (const char* c : {"GET_TENSORS", "GET_TENSOR"}) {
    auto it = m.find("strata_rpc_bytes_total{endpoint=\"" + w.address() + "\",command=\"" + c +
                     "\",direction=\"received\"}");
    if (it != m.end()) bytes += it->second;
  }
  return bytes;
}

TEST_F(BackendSamplingTest, SameBytesWithAndWithoutLocalAndSplit) {
  const std::vector<Json> reqs = requests();
  std::vector<std::string> want;
  {
    ServerProcess s(args({}), {}, log("cpu.err"));
    ASSERT_GT(s.port(), 0);
    want = choices_of(s, reqs);
    EXPECT_EQ(metrics(s)["strata_backend_sampling_rows_total"], 0);
    EXPECT_EQ(s.stop(), 0);
  }
  // The requests differ from each other, so equality below is not that of empty answers.
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(want[i].empty()) << i;
    if (i > 0) {
      EXPECT_NE(want[i], want[i - 1]);
    }
  }
  {
    // The flag's environment variable, as llama-server reads it.
    ServerProcess s(args({}), {{"LLAMA_ARG_BACKEND_SAMPLING", "1"}}, log("local.err"));
    ASSERT_GT(s.port(), 0);
    const std::vector<std::string> got = choices_of(s, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], want[i]) << reqs[i].dump();
    auto m = metrics(s);
    // One token per choice per generated position, all on the device.
    EXPECT_EQ(m["strata_backend_sampling_rows_total"], (reqs.size() + 1) * 24);
    EXPECT_EQ(m["strata_backend_sampling_fallback_rows_total"], 0);
    EXPECT_EQ(s.stop(), 0);
  }
  WorkerProcess a, b;
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  ServerProcess s(args({"--rpc", a.address() + "," + b.address(), "--device", "RPC0,RPC1",
                        "--pipeline-groups", "2", "--backend-sampling"}),
                  {}, log("split.err"));
  ASSERT_GT(s.port(), 0);
  const auto before = metrics(s);
  const std::vector<std::string> got = choices_of(s, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], want[i]) << reqs[i].dump();
  const auto after = metrics(s);
  EXPECT_EQ(after.at("strata_backend_sampling_fallback_rows_total"), 0);
  // What the last stage sends back per step is token ids and the few log-probabilities asked
  // for, well under one row of logits (4 * kVocab bytes).
  const double steps =
      after.at("strata_decode_steps_total") - before.at("strata_decode_steps_total");
  ASSERT_GT(steps, 0);
  const double per_step = (received_from(after, b) - received_from(before, b)) / steps;
  EXPECT_LT(per_step, kVocab) << "bytes received from the last stage per step";
  EXPECT_GT(per_step, 0);
  EXPECT_EQ(s.stop(), 0);
}

// A logit bias longer than a draw carries is sampled on the CPU from that row's logits, with the
// same result, and counted in /metrics.
TEST_F(BackendSamplingTest, RowsTheDeviceCannotTakeFallBackAndAreCounted) {
  Json bias = Json::object();
  for (int t = 0; t < 300; ++t) bias[std::to_string(t * 3)] = t % 2 == 0 ? 0.5 : -0.5;
  const Json body = {{"prompt", "a long bias"}, {"max_tokens", 12}, {"ignore_eos", true},
                     {"temperature", 0.7},      {"seed", 5},        {"logit_bias", bias}};
  const Json plain = {
      {"prompt", "beside it"}, {"max_tokens", 12}, {"ignore_eos", true}, {"temperature", 0}};
  std::vector<std::string> want;
  {
    ServerProcess s(args({}), {}, log("fallback_cpu.err"));
    ASSERT_GT(s.port(), 0);
    want = choices_of(s, {body, plain});
    EXPECT_EQ(s.stop(), 0);
  }
  ServerProcess s(args({"--backend-sampling"}), {}, log("fallback.err"));
  ASSERT_GT(s.port(), 0);
  const std::vector<std::string> got = choices_of(s, {body, plain});
  EXPECT_EQ(got, want);
  auto m = metrics(s);
  EXPECT_EQ(m["strata_backend_sampling_fallback_rows_total"], 12);
  EXPECT_EQ(m["strata_backend_sampling_rows_total"], 12);
  EXPECT_EQ(s.stop(), 0);
}

// llama.cpp's other samplers run on the CPU only: with --backend-sampling their rows fall back,
// and give what the server without it gives.
TEST_F(BackendSamplingTest, ExtendedSamplersFallBackToTheCpuWithTheSameResult) {
  auto body = [](const std::string& prompt, Json extra) {
    Json b = {{"prompt", prompt}, {"max_tokens", 10}, {"ignore_eos", true}, {"seed", 21}};
    b.update(extra);
    return b;
  };
  const std::vector<Json> reqs = {
      body("dry", {{"temperature", 0}, {"dry_multiplier", 2.0}, {"dry_allowed_length", 1}}),
      body("xtc", {{"temperature", 1.0}, {"xtc_probability", 0.7}, {"xtc_threshold", 0.01}}),
      body("typical", {{"temperature", 0.9}, {"typical_p", 0.6}, {"top_k", 0}}),
      body("mirostat", {{"temperature", 0.8}, {"mirostat", 2}, {"mirostat_tau", 4.0}}),
      body("order", {{"temperature", 1.3}, {"samplers", {"temperature", "top_k", "min_p"}}}),
  };
  std::vector<std::string> want;
  {
    ServerProcess s(args({}), {}, log("extended_cpu.err"));
    ASSERT_GT(s.port(), 0);
    want = choices_of(s, reqs);
    EXPECT_EQ(s.stop(), 0);
  }
  ServerProcess s(args({"--backend-sampling"}), {}, log("extended.err"));
  ASSERT_GT(s.port(), 0);
  const std::vector<std::string> got = choices_of(s, reqs);
  EXPECT_EQ(got, want);
  auto m = metrics(s);
  EXPECT_EQ(m["strata_backend_sampling_fallback_rows_total"], 10 * reqs.size());
  EXPECT_EQ(m["strata_backend_sampling_rows_total"], 0);
  EXPECT_EQ(s.stop(), 0);
}

constexpr size_t kDryRun = 3;  // DRY's allowed_length 2, plus the new token

// DRY with a multiplier far above the logits' spread and no breakers: no generated token
// completes a run of allowed_length + 1 tokens that the prompt or the reply already holds.
// Greedy without DRY, on this random model, does repeat such runs (checked, so the property
// is not vacuous).
TEST_F(BackendSamplingTest, DryKeepsGreedyFromRepeatingRuns) {
  ServerProcess s(args({}), {}, log("dry.err"));
  ASSERT_GT(s.port(), 0);
  auto tokens = [&](Json extra) {
    Json b = {{"prompt", "one two one two one two"},
              {"n_predict", 64},
              {"ignore_eos", true},
              {"temperature", 0},
              {"return_tokens", true},
              {"cache_prompt", false}};
    b.update(extra);
    Reply r = post(s, "/completion", b.dump());
    EXPECT_EQ(r.status, 200) << r.raw;
    Reply t = post(s, "/tokenize", Json{{"content", b["prompt"]}}.dump());
    std::vector<int> seq = t.body["tokens"].get<std::vector<int>>();
    const size_t n_prompt = seq.size();
    for (const Json& id : r.body["tokens"]) seq.push_back(id.get<int>());
    return std::make_pair(seq, n_prompt);
  };
  auto repeats = [](const std::vector<int>& seq, size_t n_prompt) {
    int found = 0;
    for (size_t end = std::max(n_prompt, kDryRun); end < seq.size(); ++end) {
      for (size_t j = kDryRun - 1; j < end; ++j) {
        if (std::equal(seq.begin() + (end + 1 - kDryRun), seq.begin() + end + 1,
                       seq.begin() + (j + 1 - kDryRun))) {
          ++found;
          break;
        }
      }
    }
    return found;
  };
  auto [plain, n_prompt] = tokens(Json::object());
  EXPECT_GT(repeats(plain, n_prompt), 0) << "greedy alone never repeated: the test tests nothing";
  auto [dry, n_prompt2] = tokens({{"dry_multiplier", 1000.0},
                                  {"dry_allowed_length", 2},
                                  {"dry_penalty_last_n", -1},
                                  {"dry_sequence_breakers", Json::array()}});
  ASSERT_EQ(dry.size(), n_prompt2 + 64);
  EXPECT_EQ(repeats(dry, n_prompt2), 0);
  // What /props reports is what the flags set.
  EXPECT_EQ(s.stop(), 0);
  ServerProcess p(
      args({"--dry-multiplier", "0.5", "--samplers", "dry;top_k;temperature", "--mirostat", "2"}),
      {}, log("props.err"));
  ASSERT_GT(p.port(), 0);
  Reply props = get(p, "/props");
  const Json& g = props.body["default_generation_settings"]["params"];
  EXPECT_EQ(g["dry_multiplier"], 0.5) << props.raw;
  EXPECT_EQ(g["mirostat"], 2);
  EXPECT_EQ(g["samplers"], (Json{"dry", "top_k", "temperature"}));
  EXPECT_EQ(p.stop(), 0);
}

}  // namespace
}  // namespace strata::server::itest
