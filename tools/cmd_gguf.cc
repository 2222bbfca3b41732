#include <cstdio>

#include "commands.h"

namespace strata::tools {

int cmd_gguf(const Args&) {
  std::fprintf(stderr, "strata gguf: not built yet\n");
  return 1;
}

}  // namespace strata::tools
