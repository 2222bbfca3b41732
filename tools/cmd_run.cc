#include <cstdio>

#include "commands.h"

namespace strata::tools {

int cmd_run(const Args&) {
  std::fprintf(stderr, "strata run: not built yet\n");
  return 1;
}

}  // namespace strata::tools
