// STRATA_CHECK guards invariants of our own code (always on); STRATA_DCHECK only in debug.
// Never use them on data that came from a file, a socket or a request: return a Status.
#pragma once

namespace strata::detail {
// Out of line (core/check.cc, compiled for the baseline ISA): an inline copy emitted by a
// file compiled with -mavx2 could be the one the linker keeps for every caller.
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const char* msg);
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
