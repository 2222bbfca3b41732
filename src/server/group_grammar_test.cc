// Constrained output through a pipeline group, as the server runs it: only sentences of the
// request's grammar come out, whatever the model would rather say, with or without sampling on
// the device, and the other requests of the batch are not touched.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/grammar.h"
#include "server/group.h"
#include "server/group_test_util.h"
#include "unit/synth_file.h"

namespace strata::server {
namespace {

using group_testing::collect;
using group_testing::greedy_task;
using group_testing::GroupOutput;
using Group = group_testing::TestGroup;

std::string grammar_model_path() { return testing::small_llama_file("group_grammar", 2, 23); }

GroupParams grammar_group_params(bool backend_sampling) {
  GroupParams p;
  p.n_slots = 3;
  p.n_ctx_slot = 256;
  p.backend_sampling = backend_sampling;
  return p;
}

// A request under `gbnf`; temperature 0 is greedy, otherwise sampled with `seed`.
Task grammar_task(const std::string& gbnf, float temperature, uint64_t seed, int32_t n_predict) {
  Task t = greedy_task({1, 40, 41, 42, 43}, n_predict);
  t.params.ignore_eos = false;
  t.params.sampling.temperature = temperature;
  t.params.sampling.seed = seed;
  auto g = Grammar::parse(gbnf);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  t.params.grammar = std::move(g).value();
  return t;
}

std::string text_of(const Engine& e, const GroupOutput& out) {
  return e.model().tokenizer().decode(out.tokens);
}

TEST(GroupGrammar, OnlyTheGrammarsSentencesComeOut) {
  std::unique_ptr<Engine> engine = group_testing::cpu_engine(grammar_model_path());
  for (bool device : {false, true}) {
    SCOPED_TRACE(device ? "backend sampling" : "sampling on the CPU");
    Group g(*engine, grammar_group_params(device));
    // A finite language: the answer must be one of its sentences, ended by the grammar.
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const float temperature = seed == 0 ? 0.0f : 1.5f;
      Task t = grammar_task(R"(root ::= ("yes" | "no" | "maybe so") "." )", temperature, seed, 40);
      std::shared_ptr<ResultChannel> ch = t.channel;
      g.group->post(std::move(t));
      const GroupOutput out = collect(*ch);
      ASSERT_EQ(out.error, "");
      const std::string text = text_of(*engine, out);
      EXPECT_TRUE(text == "yes." || text == "no." || text == "maybe so.") << text;
      EXPECT_EQ(out.finish_reason, "stop") << text;
    }
    // Repetition: five letters of three, then the end.
    Task t = grammar_task("root ::= [a-c]{5}", 1.0f, 9, 40);
    std::shared_ptr<ResultChannel> ch = t.channel;
    g.group->post(std::move(t));
    const std::string text = text_of(*engine, collect(*ch));
    EXPECT_EQ(text.size(), 5u) << text;
    EXPECT_EQ(text.find_first_not_of("abc"), std::string::npos) << text;
  }
}

// A JSON grammar: what comes out parses as JSON (nlohmann's parser, not ours) with the shape the
// grammar asked for.
TEST(GroupGrammar, JsonOfTheAskedShape) {
  std::unique_ptr<Engine> engine = group_testing::cpu_engine(grammar_model_path());
  Group g(*engine, grammar_group_params(false));
  const std::string gbnf =
      R"(root ::= "{" ws "\"ok\"" ws ":" ws ("true" | "false") ws "," ws "\"n\"" ws ":" ws [1-9] [0-9]? ws "}"
ws ::= [ ]?)";
  for (uint64_t seed = 0; seed < 3; ++seed) {
    Task t = grammar_task(gbnf, seed == 0 ? 0.0f : 1.0f, seed, 64);
    std::shared_ptr<ResultChannel> ch = t.channel;
    g.group->post(std::move(t));
    const GroupOutput out = collect(*ch);
    ASSERT_EQ(out.error, "");
    EXPECT_EQ(out.finish_reason, "stop");
    const std::string text = text_of(*engine, out);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
    EXPECT_TRUE(j["n"].is_number_integer()) << text;
  }
}

// A free request decoded beside constrained ones gives the tokens it gives alone.
TEST(GroupGrammar, OtherRequestsOfTheBatchAreUntouched) {
  std::unique_ptr<Engine> engine = group_testing::cpu_engine(grammar_model_path());
  Group g(*engine, grammar_group_params(false));
  const GroupOutput alone = group_testing::generate(*g.group, {1, 50, 60, 70}, 24);
  ASSERT_EQ(alone.error, "");
  Task a = grammar_task("root ::= [a-z ]{30}", 1.0f, 3, 30);
  Task b = grammar_task(R"(root ::= "x"+)", 0.0f, 0, 30);
  std::shared_ptr<ResultChannel> ca = a.channel, cb = b.channel;
  g.group->post(std::move(a));
  g.group->post(std::move(b));
  const GroupOutput beside = group_testing::generate(*g.group, {1, 50, 60, 70}, 24);
  EXPECT_EQ(beside.tokens, alone.tokens);
  EXPECT_EQ(collect(*ca).error, "");
  const std::string xs = text_of(*engine, collect(*cb));
  EXPECT_FALSE(xs.empty());
  EXPECT_EQ(xs.find_first_not_of('x'), std::string::npos) << xs;
}

}  // namespace
}  // namespace strata::server
