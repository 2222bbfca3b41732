#include "flags.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace strata::tools {

const std::string* Flags::canonical(const std::vector<std::string>& table,
                                    const std::string& arg) const {
  for (const std::string& entry : table) {
    size_t start = 0;
    while (start <= entry.size()) {
      size_t bar = entry.find('|', start);
      if (bar == std::string::npos) bar = entry.size();
      if (entry.compare(start, bar - start, arg) == 0 && bar - start == arg.size()) return &entry;
      start = bar + 1;
    }
  }
  return nullptr;
}

Status Flags::parse(const Args& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(a[1]) || a[1] == '.'))) {
      std::string name = a, inline_value;
      bool has_inline = false;
      if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
      if (const std::string* key = canonical(with_value_, name)) {
        if (has_inline) {
          values_.emplace_back(*key, inline_value);
        } else {
          if (i + 1 >= args.size()) return invalid_argument("flag " + name + " needs a value");
          values_.emplace_back(*key, args[++i]);
        }
        continue;
      }
      if (const std::string* key = canonical(switches_, name)) {
        if (has_inline) return invalid_argument("flag " + name + " takes no value");
        values_.emplace_back(*key, "");
        continue;
      }
      return invalid_argument("unknown flag " + a + " (see --help)");
    }
    positional_.push_back(a);
  }
  return Status::ok();
}

bool Flags::has(const std::string& name) const { return get(name).has_value(); }

std::optional<std::string> Flags::get(const std::string& name) const {
  std::optional<std::string> found;
  for (const auto& [key, value] : values_) {
    if (canonical({key}, name) != nullptr || key == name) found = value;
  }
  return found;
}

std::string Flags::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

Result<int64_t> Flags::get_int(const std::string& name, int64_t fallback, int64_t min,
                               int64_t max) const {
  std::optional<std::string> v = get(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 0);
  if (v->empty() || *end != '\0' || errno == ERANGE) {
    return invalid_argument("flag " + name + ": '" + *v + "' is not an integer");
  }
  if (x < min || x > max) {
    return out_of_range("flag " + name + ": " + *v + " is outside [" + std::to_string(min) + ", " +
                        std::to_string(max) + "]");
  }
  return static_cast<int64_t>(x);
}

Result<double> Flags::get_double(const std::string& name, double fallback) const {
  std::optional<std::string> v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') {
    return invalid_argument("flag " + name + ": '" + *v + "' is not a number");
  }
  return x;
}

int fail(const char* command, const Status& status) {
  std::fprintf(stderr, "strata %s: %s\n", command, status.message().c_str());
  return 1;
}

}  // namespace strata::tools
