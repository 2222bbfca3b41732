// The subcommands of the `strata` binary. Each takes the arguments after its name and returns
// the process exit code.
#pragma once

#include <string>
#include <vector>

namespace strata::tools {

using Args = std::vector<std::string>;

int cmd_gguf(const Args& args);
int cmd_run(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_logits(const Args& args);
int cmd_embed(const Args& args);
int cmd_perplexity(const Args& args);
int cmd_bench(const Args& args);
int cmd_serve(const Args& args);
int cmd_worker(const Args& args);
int cmd_proxy(const Args& args);

}  // namespace strata::tools
