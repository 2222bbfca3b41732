// Constrained output's cost per token: the mask of a JSON grammar over a real vocabulary, made
// on the decode thread before each constrained token is sampled.
//
//   BM_GrammarMask/<state>/<cached>  state 0: between JSON tokens (after `{"a": 1, `), 1: inside
//                                    a string (`{"a": "xy`); cached 0: a matcher that has not
//                                    seen the state (every call walks the vocabulary), 1: one
//                                    that has (inside a string, every token but the first)
//
// The vocabulary is DeepSeek LLM's (102,400 tokens) from $STRATA_SHARED_DIR/tokenizer (default:
// ../shared, run from the source tree or build/); absent, the benchmarks skip. Nothing here is
// asserted.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

// The vocabulary as a pipeline group gives it to its matchers, or null when the file is absent.
const GrammarVocab* bench_grammar_vocab() {
  static const std::unique_ptr<GrammarVocab> vocab = []() -> std::unique_ptr<GrammarVocab> {
    const char* env = std::getenv("STRATA_SHARED_DIR");
    for (std::string dir :
         {std::string(env ? env : ""), std::string("../shared"), std::string("../../shared")}) {
      if (dir.empty()) continue;
      Result<GgufFile> f = GgufFile::open(dir + "/tokenizer/ggml-vocab-deepseek-llm.gguf");
      if (!f.is_ok()) continue;
      Result<Tokenizer> tok = Tokenizer::from_gguf(*f);
      if (!tok.is_ok()) continue;
      const int32_t n = tok->n_vocab();
      std::vector<std::string> pieces(static_cast<size_t>(n));
      std::vector<bool> never(static_cast<size_t>(n));
      for (int32_t t = 0; t < n; ++t) {
        pieces[static_cast<size_t>(t)] = tok->token_to_piece(t);
        never[static_cast<size_t>(t)] = tok->is_eog(t) || pieces[static_cast<size_t>(t)].empty();
      }
      return std::make_unique<GrammarVocab>(std::move(pieces), std::move(never));
    }
    return nullptr;
  }();
  return vocab.get();
}

void BM_GrammarMask(benchmark::State& state) {
  const GrammarVocab* vocab = bench_grammar_vocab();
  if (vocab == nullptr) {
    state.SkipWithError("ggml-vocab-deepseek-llm.gguf is absent from STRATA_SHARED_DIR/tokenizer");
    return;
  }
  const bool in_string = state.range(0) != 0;
  const bool cached = state.range(1) != 0;
  auto g = Grammar::parse(json_object_grammar());
  if (!g.is_ok()) {
    state.SkipWithError("the JSON grammar does not parse");
    return;
  }
  GrammarMatcher ready(*g);
  if (!ready.accept(in_string ? "{\"a\": \"xy" : "{\"a\": 1, ").is_ok()) {
    state.SkipWithError("the JSON grammar refuses the text");
    return;
  }
  std::vector<uint8_t> allowed;
  GrammarMatcher warm = ready;
  (void)warm.allowed(*vocab, allowed);
  int64_t n_allowed = 0;
  for (auto _ : state) {
    if (cached) {
      benchmark::DoNotOptimize(warm.allowed(*vocab, allowed).is_ok());
    } else {
      GrammarMatcher m = ready;  // has never made a mask: nothing cached
      benchmark::DoNotOptimize(m.allowed(*vocab, allowed).is_ok());
    }
  }
  for (uint8_t a : allowed) n_allowed += a;
  state.counters["vocab"] = vocab->size();
  state.counters["allowed"] = static_cast<double>(n_allowed);
}
BENCHMARK(BM_GrammarMask)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata
