#include <cstdio>

#include "commands.h"

namespace strata::tools {

int cmd_logits(const Args&) {
  std::fprintf(stderr, "strata logits: not built yet\n");
  return 1;
}

}  // namespace strata::tools
