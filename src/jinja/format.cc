// printf-style formatting: '%s: %d' % (name, n), as Python's str.__mod__.
#include <cmath>
#include <cstdio>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char type = 's';
};

std::string pad(std::string s, const Spec& spec) {
  const auto n = static_cast<int>(code_point_count(s));
  if (spec.width <= n) return s;
  const std::string fill(static_cast<size_t>(spec.width - n), ' ');
  return spec.flags.find('-') != std::string::npos ? s + fill : fill + s;
}

Result<std::string> format_one(const Spec& spec, const Value& v) {
  char cfmt[32];
  char buf[512];
  const std::string& flags = spec.flags;
  auto printf_format = [&](const char* length, char type) {
    std::string f(1, '%');
    f += flags;
    if (spec.width >= 0) f += std::to_string(spec.width);
    if (spec.precision >= 0) {
      f += '.';
      f += std::to_string(spec.precision);
    }
    f += length;
    f += type;
    std::snprintf(cfmt, sizeof cfmt, "%s", f.c_str());
  };
  switch (spec.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string s = spec.type == 's' ? to_str(v) : to_repr(v);
      if (spec.precision >= 0) {
        const std::vector<size_t> offsets = code_point_offsets(s);
        if (static_cast<size_t>(spec.precision) + 1 < offsets.size()) {
          s.resize(offsets[static_cast<size_t>(spec.precision)]);
        }
      }
      return pad(std::move(s), spec);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
    case 'c': {
      if (!v.is_number()) {
        return invalid_argument(std::string("%") + spec.type +
                                " format: a real number is required, not " +
                                std::string(v.type_name()));
      }
      if (v.is_float() && !std::isfinite(v.as_float())) {
        return invalid_argument("cannot convert float infinity or NaN to integer");
      }
      const int64_t i = v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int();
      if (spec.type == 'c') {
        if (i < 0 || i > 0x10FFFF) return invalid_argument("%c arg not in range(0x110000)");
        std::string s;
        utf8_append(s, static_cast<char32_t>(i));
        return pad(std::move(s), spec);
      }
      const char type = spec.type == 'i' || spec.type == 'u' ? 'd' : spec.type;
      printf_format("ll", type);
      std::snprintf(buf, sizeof buf, cfmt, static_cast<long long>(i));
      std::string out(buf);
      if (flags.find('#') != std::string::npos && type == 'o') {
        // Python writes 0o17 where C writes 017.
        const size_t z = out.find('0');
        if (z != std::string::npos) out = out.substr(0, z + 1) + 'o' + out.substr(z + 1);
      }
      return out;
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': {
      if (!v.is_number()) {
        return invalid_argument(std::string("%") + spec.type +
                                " format: a real number is required, not " +
                                std::string(v.type_name()));
      }
      printf_format("", spec.type);
      std::snprintf(buf, sizeof buf, cfmt, v.as_float());
      return std::string(buf);
    }
    default:
      return unsupported(std::string("unsupported format character '") + spec.type + "'");
  }
}

}  // namespace

Result<Value> percent_format(Interpreter& in, const std::string& format, const Value& values) {
  const bool tuple = values.is_list() && values.list_shape() == ListData::Shape::kTuple;
  const std::vector<Value> single = {values};
  const std::vector<Value>& args = tuple ? values.as_list() : single;
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return invalid_argument("incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) return invalid_argument("incomplete format key");
      if (!values.is_dict()) return invalid_argument("format requires a mapping");
      arg = values.as_dict().find(std::string_view(format).substr(i + 1, close - i - 1));
      if (arg == nullptr) {
        return invalid_argument("format key '" + format.substr(i + 1, close - i - 1) +
                                "' not found");
      }
      i = close + 1;
    }
    Spec spec;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string::npos) {
      spec.flags += format[i++];
    }
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
      spec.width = std::max(spec.width, 0) * 10 + (format[i++] - '0');
      if (spec.width > 4096) return invalid_argument("format width too large (the limit is 4096)");
    }
    if (i < format.size() && format[i] == '.') {
      spec.precision = 0;
      while (++i < format.size() && format[i] >= '0' && format[i] <= '9') {
        spec.precision = spec.precision * 10 + (format[i] - '0');
        if (spec.precision > 400) {
          return invalid_argument("format precision too large (the limit is 400)");
        }
      }
    }
    if (i >= format.size()) return invalid_argument("incomplete format");
    spec.type = format[i];
    if (arg == nullptr) {
      if (next >= args.size()) return invalid_argument("not enough arguments for format string");
      arg = &args[next++];
    }
    STRATA_ASSIGN_OR_RETURN(std::string piece, format_one(spec, *arg));
    out += piece;
    STRATA_RETURN_IF_ERROR(in.check_string(out.size()));
  }
  if (!values.is_dict() && next < args.size()) {
    return invalid_argument("not all arguments converted during string formatting");
  }
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(out.size() / 64)));
  return Value(std::move(out));
}

}  // namespace strata::jinja
