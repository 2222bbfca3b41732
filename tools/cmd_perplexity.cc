#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "flags.h"
#include "loader.h"

namespace strata::tools {

// As llama.cpp's perplexity tool: the text is cut into chunks of n_ctx tokens, each evaluated
// from an empty cache (its first token replaced by BOS where the model uses one), and only the
// second half of each chunk is scored, so every scored token has at least n_ctx/2 of context.
int cmd_perplexity(const Args& args) {
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(), {"-f|--file", "--chunks"});
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(), {"-h|--help"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("perplexity", s);
  if (flags.has("-h")) {
    std::printf(
        "usage: strata perplexity -m FILE -f TEXT [-c 512] [--chunks N] [-t THREADS]\n"
        "Perplexity over a text file: chunks of -c tokens, the second half of each scored.\n");
    return 0;
  }
  const auto path = flags.get("-f");
  if (!path) return fail("perplexity", invalid_argument("-f TEXT is required"));
  std::ifstream in(*path, std::ios::binary);
  if (!in) return fail("perplexity", io_error("cannot read " + *path));
  std::stringstream text;
  text << in.rdbuf();

  auto n_ctx = flags.get_int("-c", 512, 4, 1 << 20);
  if (!n_ctx) return fail("perplexity", n_ctx.status());
  auto max_chunks = flags.get_int("--chunks", -1, -1, 1 << 30);
  if (!max_chunks) return fail("perplexity", max_chunks.status());
  auto loaded = load_model(flags, 1, *n_ctx);
  if (!loaded) return fail("perplexity", loaded.status());
  Context& ctx = *loaded->context;
  const Tokenizer& tok = ctx.model().tokenizer();

  const std::vector<int32_t> ids = tok.encode(text.str(), tok.add_bos(), false);
  const int64_t n = *n_ctx;
  int64_t n_chunks = static_cast<int64_t>(ids.size()) / n;
  if (*max_chunks >= 0) n_chunks = std::min(n_chunks, *max_chunks);
  if (n_chunks < 1) {
    return fail("perplexity",
                invalid_argument("the text has " + std::to_string(ids.size()) +
                                 " tokens, fewer than one chunk of -c " + std::to_string(n)));
  }
  std::fprintf(stderr, "%zu tokens, %lld chunks of %lld\n", ids.size(),
               static_cast<long long>(n_chunks), static_cast<long long>(n));
  const auto t0 = std::chrono::steady_clock::now();
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  const int64_t first = n / 2;
  for (int64_t c = 0; c < n_chunks; ++c) {
    ctx.clear();
    Batch batch;
    for (int64_t j = 0; j < n; ++j) {
      int32_t id = ids[static_cast<size_t>(c * n + j)];
      if (j == 0 && tok.add_bos() && tok.bos() >= 0) id = tok.bos();
      batch.add(id, static_cast<int32_t>(j), 0, j >= first && j + 1 < n);
    }
    if (Status s = ctx.decode(batch); !s) return fail("perplexity", s);
    for (int64_t j = first; j + 1 < n; ++j) {
      const float* l = ctx.logits(j - first);
      const int32_t target = ids[static_cast<size_t>(c * n + j + 1)];
      float mx = l[0];
      for (int64_t v = 1; v < ctx.n_vocab(); ++v) mx = std::max(mx, l[v]);
      double sum = 0;
      for (int64_t v = 0; v < ctx.n_vocab(); ++v) sum += std::exp(static_cast<double>(l[v] - mx));
      const double e = std::log(sum) - static_cast<double>(l[target] - mx);
      nll += e;
      nll2 += e * e;
      ++count;
    }
    std::printf("[%lld]%.4f,", static_cast<long long>(c + 1), std::exp(nll / count));
    std::fflush(stdout);
  }
  const double mean = nll / count;
  const double var = std::max(0.0, nll2 / count - mean * mean);
  const double ppl = std::exp(mean);
  const double err = count > 1 ? ppl * std::sqrt(var / (count - 1)) : 0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
  std::fprintf(stderr, "%lld tokens evaluated in %.2f s (%.1f tok/s)\n",
               static_cast<long long>(n_chunks * n), secs, n_chunks * n / std::max(secs, 1e-9));
  return 0;
}

}  // namespace strata::tools
