// STRATA_CHECK guards invariants of our own code (always on); STRATA_DCHECK only in debug.
// Never use them on data that came from a file, a socket or a request: return a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace strata::detail {
[[noreturn]] inline void check_failed(const char* expr, const char* file, int line,
                                      const char* msg) {
  std::fprintf(stderr, "strata: check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg[0] ? " — " : "", msg);
  std::abort();
}
}  // namespace strata::detail

#define STRATA_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) ::strata::detail::check_failed(#cond, __FILE__, __LINE__, "" __VA_ARGS__); \
  } while (0)

#ifdef NDEBUG
#define STRATA_DCHECK(cond, ...) \
  do {                           \
  } while (0)
#else
#define STRATA_DCHECK(cond, ...) STRATA_CHECK(cond, __VA_ARGS__)
#endif
