#include <cstdio>

#include "commands.h"

namespace strata::tools {

int cmd_tokenize(const Args&) {
  std::fprintf(stderr, "strata tokenize: not built yet\n");
  return 1;
}

}  // namespace strata::tools
