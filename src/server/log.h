// The server's log: lines to stderr or a file, with an optional level prefix and timestamp,
// filtered by verbosity (llama.cpp's levels: 1 error, 2 warning, 3 info, 4 trace, 5 debug).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "core/mutex_guarded.h"
#include "core/status.h"

namespace strata::server {

struct LogOptions {
  bool disabled = false;
  std::string file;         // "": stderr
  int verbosity = 3;        // lines above this level are dropped
  bool prefix = false;      // "W " / "I " ... before each line
  bool timestamps = false;  // seconds since start before each line
};

enum class LogLevel { kError = 1, kWarning = 2, kInfo = 3, kTrace = 4, kDebug = 5 };

class Log {
 public:
  static Result<std::unique_ptr<Log>> open(const LogOptions& options);
  ~Log();
  bool enabled(LogLevel level) const;
  // Thread-safe; one call is one line.
  void write(LogLevel level, const std::string& line);

 private:
  Log(const LogOptions& options, std::FILE* out, bool owned);
  LogOptions options_;
  bool owned_;
  double start_;
  // Held while a line is written, so that lines of several threads never interleave.
  MutexGuarded<std::FILE*> out_;
};

}  // namespace strata::server
