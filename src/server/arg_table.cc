#include "server/arg_table.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace strata::server {

Result<bool> parse_arg_bool(const std::string& text) {
  for (const char* t : {"true", "1", "on", "enabled"}) {
    if (text == t) return true;
  }
  for (const char* f : {"false", "0", "off", "disabled"}) {
    if (text == f) return false;
  }
  return invalid_argument("'" + text +
                          "' is not a boolean (true/1/on/enabled or false/0/off/disabled)");
}

Result<int64_t> parse_arg_int(const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return invalid_argument("'" + text + "' is not an integer");
  }
  if (x < min || x > max) {
    return out_of_range(text + " is outside [" + std::to_string(min) + ", " + std::to_string(max) +
                        "]");
  }
  return static_cast<int64_t>(x);
}

Result<double> parse_arg_double(const std::string& text, double min, double max) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(x)) {
    return invalid_argument("'" + text + "' is not a number");
  }
  if (x < min || x > max) {
    return out_of_range(text + " is outside [" + std::to_string(min) + ", " + std::to_string(max) +
                        "]");
  }
  return x;
}

namespace arg_detail {

std::string join_names(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::string out;
  for (const auto* list : {&a, &b}) {
    for (const std::string& n : *list) out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

// "  HEAD  BODY" with BODY wrapped at 100 columns under a 30-column indent.
std::string wrap_help(const std::string& head, const std::string& body) {
  constexpr size_t kIndent = 30, kWidth = 100;
  std::string out = "  " + head;
  if (out.size() + 2 > kIndent) {
    out += "\n" + std::string(kIndent, ' ');
  } else {
    out += std::string(kIndent - out.size(), ' ');
  }
  size_t col = kIndent;
  size_t i = 0;
  while (i < body.size()) {
    size_t sp = body.find(' ', i);
    if (sp == std::string::npos) sp = body.size();
    const std::string word = body.substr(i, sp - i);
    if (col > kIndent && col + 1 + word.size() > kWidth) {
      out += "\n" + std::string(kIndent, ' ');
      col = kIndent;
    } else if (col > kIndent) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    i = sp + 1;
  }
  return out + "\n";
}

const char* section_title(ArgSection s) {
  switch (s) {
    case ArgSection::kCommon:
      return "Common";
    case ArgSection::kSampling:
      return "Sampling defaults (a request's own fields win)";
    case ArgSection::kServer:
      return "Server";
    case ArgSection::kStrata:
      return "strata (splits over workers, pipeline groups)";
  }
  return "";
}

}  // namespace arg_detail
}  // namespace strata::server
