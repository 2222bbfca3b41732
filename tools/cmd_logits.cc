#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "loader.h"

namespace strata::tools {

int cmd_logits(const Args& args) {
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(), {"--ids", "-o|--output"});
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(), {"-h|--help"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("logits", s);
  if (flags.has("-h")) {
    std::printf(
        "usage: strata logits -m FILE --ids \"1 403 407\" -o OUT [-t THREADS]\n"
        "Evaluates one sequence from an empty cache and writes the logits of every position:\n"
        "uint32 n_tokens, uint32 n_vocab, then n_tokens x n_vocab float32 (little-endian).\n");
    return 0;
  }
  const auto ids_text = flags.get("--ids");
  const auto out_path = flags.get("-o");
  if (!ids_text || !out_path) return fail("logits", invalid_argument("--ids and -o are required"));
  Result<std::vector<int32_t>> parsed = parse_token_ids(*ids_text);
  if (!parsed) return fail("logits", parsed.status());
  const std::vector<int32_t> ids = std::move(parsed).value();

  auto loaded = load_model(flags, 1, static_cast<int64_t>(ids.size()));
  if (!loaded) return fail("logits", loaded.status());
  Context& ctx = *loaded->context;
  Batch batch;
  for (size_t i = 0; i < ids.size(); ++i) batch.add(ids[i], static_cast<int32_t>(i), 0, true);
  if (Status s = ctx.decode(batch); !s) return fail("logits", s);

  FILE* f = std::fopen(out_path->c_str(), "wb");
  if (f == nullptr) return fail("logits", io_error("cannot write " + *out_path));
  const uint32_t header[2] = {static_cast<uint32_t>(ids.size()),
                              static_cast<uint32_t>(ctx.n_vocab())};
  bool ok = std::fwrite(header, sizeof(header), 1, f) == 1;
  for (int64_t i = 0; ok && i < ctx.n_outputs(); ++i) {
    ok = std::fwrite(ctx.logits(i), sizeof(float), static_cast<size_t>(ctx.n_vocab()), f) ==
         static_cast<size_t>(ctx.n_vocab());
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return fail("logits", io_error("write to " + *out_path + " failed"));
  std::fprintf(stderr, "wrote %zu x %lld logits to %s\n", ids.size(),
               static_cast<long long>(ctx.n_vocab()), out_path->c_str());
  return 0;
}

}  // namespace strata::tools
