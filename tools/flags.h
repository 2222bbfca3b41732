// A small flag parser for the subcommands: `--name value`, `-n value`, `--switch`.
// Unknown flags and bad numbers are errors that name the flag.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/status.h"

namespace strata::tools {

class Flags {
 public:
  // `with_value` lists the flags that take a value, `switches` those that do not; each entry
  // may hold aliases separated by '|' ("-m|--model").
  Flags(std::vector<std::string> with_value, std::vector<std::string> switches)
      : with_value_(std::move(with_value)), switches_(std::move(switches)) {}

  Status parse(const Args& args);

  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  Result<int64_t> get_int(const std::string& name, int64_t fallback, int64_t min,
                          int64_t max) const;
  Result<double> get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  const std::string* canonical(const std::vector<std::string>& table, const std::string& arg) const;

  std::vector<std::string> with_value_;
  std::vector<std::string> switches_;
  std::vector<std::pair<std::string, std::string>> values_;  // canonical name -> value
  std::vector<std::string> positional_;
};

// Prints "strata NAME: message" to stderr and returns 1.
int fail(const char* command, const Status& status);

}  // namespace strata::tools
