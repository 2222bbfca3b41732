#include "server/log.h"

#include <chrono>

namespace strata::server {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<std::unique_ptr<Log>> Log::open(const LogOptions& options) {
  std::FILE* out = stderr;
  bool owned = false;
  if (!options.disabled && !options.file.empty()) {
    out = std::fopen(options.file.c_str(), "a");
    if (out == nullptr) return invalid_argument("--log-file: cannot open '" + options.file + "'");
    owned = true;
  }
  return std::unique_ptr<Log>(new Log(options, out, owned));
}

Log::Log(const LogOptions& options, std::FILE* out, bool owned)
    : options_(options), owned_(owned), start_(now_seconds()), out_(out) {}

Log::~Log() {
  if (owned_) std::fclose(*out_.lock());
}

bool Log::enabled(LogLevel level) const {
  return !options_.disabled && static_cast<int>(level) <= options_.verbosity;
}

void Log::write(LogLevel level, const std::string& line) {
  if (!enabled(level)) return;
  std::string s;
  if (options_.timestamps) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ", now_seconds() - start_);
    s += buf;
  }
  if (options_.prefix) s += std::string(1, " EWITD"[static_cast<int>(level)]) + " ";
  s += line + "\n";
  auto out = out_.lock();
  std::fwrite(s.data(), 1, s.size(), *out);
  std::fflush(*out);
}

}  // namespace strata::server
