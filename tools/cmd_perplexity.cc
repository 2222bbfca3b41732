#include <cstdio>

#include "commands.h"

namespace strata::tools {

int cmd_perplexity(const Args&) {
  std::fprintf(stderr, "strata perplexity: not built yet\n");
  return 1;
}

}  // namespace strata::tools
