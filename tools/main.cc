#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const strata::tools::Args&);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", strata::tools::cmd_run, "generate text from a prompt"},
    {"tokenize", strata::tools::cmd_tokenize, "print the token ids of a text"},
    {"logits", strata::tools::cmd_logits, "write the logits of every position of a sequence"},
    {"embed", strata::tools::cmd_embed, "embeddings of texts (pooled final hidden states)"},
    {"perplexity", strata::tools::cmd_perplexity, "perplexity of a model over a text file"},
    {"bench", strata::tools::cmd_bench, "prompt and decode speed at several batch sizes"},
    {"serve", strata::tools::cmd_serve, "OpenAI-compatible HTTP server"},
    {"worker", strata::tools::cmd_worker, "serve this machine's CPU to remote clients"},
    {"proxy", strata::tools::cmd_proxy, "relay TCP with a link's delay and rate (benchmarks)"},
    {"gguf", strata::tools::cmd_gguf, "info FILE | gen: inspect or write GGUF files"},
};

void usage() {
  std::printf("usage: strata COMMAND [options]\n\ncommands:\n");
  for (const Command& c : kCommands) std::printf("  %-11s %s\n", c.name, c.help);
  std::printf("\n`strata COMMAND --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      strata::tools::Args args(argv + 2, argv + argc);
      return c.run(args);
    }
  }
  std::fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
  usage();
  return 1;
}
