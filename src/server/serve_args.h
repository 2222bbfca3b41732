// The flags of `strata serve`: llama-server's, with their LLAMA_ARG_* environment variables,
// and strata's own. One table (serve_args.cc) gives parsing, the environment, the report of
// flags that are accepted but do nothing here, and --help.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/arg_table.h"
#include "server/server.h"

namespace strata::server {

struct ServeArgs {
  ServerOptions options;
  LogOptions log;
  bool help = false;
  bool version = false;
  bool list_devices = false;
  // Set by -ctk / -ctv / --kv-type; checked to agree after parsing.
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  // The batch variants of the thread flags, which default to their plain flag's value (as in
  // llama.cpp); resolved into options.threads_batch after parsing.
  std::optional<int> threads_batch;
  std::optional<std::vector<int>> cpus_batch;
  std::optional<bool> strict_batch;
  std::optional<int> poll_batch;
  int prio_batch = 0;
  // The first --dry-sequence-breaker replaces the default breakers; later ones add to it.
  bool dry_breakers_given = false;
};

const std::vector<ArgRow<ServeArgs>>& serve_arg_table();

// Parses the command line over the environment into `out`; the report names the accepted
// flags that do nothing here (print each once at start).
Result<ArgReport> parse_serve_args(const std::vector<std::string>& args, const EnvLookup& env,
                                   ServeArgs& out);

std::string serve_help();

}  // namespace strata::server
