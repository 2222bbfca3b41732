#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace strata::detail {

void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "strata: check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg[0] ? " — " : "", msg);
  std::abort();
}

}  // namespace strata::detail
