#include <cstdio>

#include "commands.h"

namespace strata::tools {

int cmd_bench(const Args&) {
  std::fprintf(stderr, "strata bench: not built yet\n");
  return 1;
}

}  // namespace strata::tools
