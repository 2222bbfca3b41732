// jinja2's filters (filters.py), with transformers' tojson. Each is a function and a row of
// kFilters. What select/map/reject return is a generator, as in jinja2: it iterates and joins
// like a list but has no length.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/json.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

bool flag(const Value& v) { return !v.is_undefined() && v.truthy(); }

Status charge_items(Interpreter& in, size_t n) {
  STRATA_RETURN_IF_ERROR(in.check_items(n));
  return in.charge(1 + static_cast<int64_t>(n));
}

Result<Value> string_result(Interpreter& in, std::string s) {
  STRATA_RETURN_IF_ERROR(in.check_string(s.size()));
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(s.size() / 64)));
  return Value(std::move(s));
}

// jinja2's attribute getter: "a.b.0" looks up a, then b, then item 0, each as x[part].
Result<Value> get_attribute(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_int()) return in.getitem(item, attribute);
  const std::string path = to_str(attribute);
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    Value key(part);
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        part.size() < 18) {
      key = Value(static_cast<int64_t>(std::stoll(part)));
    }
    STRATA_ASSIGN_OR_RETURN(v, in.getitem(v, key));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value lowered(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(ascii_lower(v.as_string())) : v;
}

// ---- strings

Result<Value> f_trim(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("trim", args, {"chars"}));
  const std::string s = to_str(v);
  const std::string* chars = a[0].is_string() ? &a[0].as_string() : nullptr;
  return string_result(in, std::string(strip(s, chars, true, true)));
}

Result<Value> f_upper(Interpreter& in, const Value& v, Args&) {
  return string_result(in, ascii_upper(to_str(v)));
}
Result<Value> f_lower(Interpreter& in, const Value& v, Args&) {
  return string_result(in, ascii_lower(to_str(v)));
}
Result<Value> f_title(Interpreter& in, const Value& v, Args&) {
  return string_result(in, title(to_str(v)));
}
Result<Value> f_capitalize(Interpreter& in, const Value& v, Args&) {
  return string_result(in, capitalize(to_str(v)));
}
Result<Value> f_string(Interpreter& in, const Value& v, Args&) {
  return string_result(in, to_str(v));
}
Result<Value> f_safe(Interpreter& in, const Value& v, Args&) {
  return v.is_string() ? v : string_result(in, to_str(v));
}

Result<Value> f_escape(Interpreter& in, const Value& v, Args&) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return string_result(in, std::move(out));
}

Result<Value> f_replace(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<3>("replace", args, {"old", "new", "count"}));
  const int64_t count = a[2].is_int() ? a[2].as_int() : -1;
  return string_result(in, replace(to_str(v), to_str(a[0]), to_str(a[1]), count));
}

// "%s, %s"|format(a, b), or with keyword arguments "%(x)s"|format(x=1).
Result<Value> f_format(Interpreter& in, const Value& v, Args& args) {
  if (!args.positional.empty() && !args.named.empty()) {
    return invalid_argument("can't handle positional and keyword arguments at the same time");
  }
  if (!args.named.empty()) {
    Dict d;
    for (auto& [k, x] : args.named) d.set(Value(k), x);
    return percent_format(in, to_str(v), Value(std::move(d)));
  }
  return percent_format(in, to_str(v), Value::tuple(args.positional));
}

Result<Value> f_indent(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<3>("indent", args, {"width", "first", "blank"}));
  std::string pad;
  if (a[0].is_string()) {
    pad = a[0].as_string();
  } else {
    const int64_t width = a[0].is_undefined() ? 4 : a[0].is_number() ? a[0].as_int() : 4;
    STRATA_RETURN_IF_ERROR(in.check_string(static_cast<size_t>(std::max<int64_t>(width, 0))));
    pad.assign(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  // jinja2 appends a newline first so that splitlines() keeps a trailing empty line.
  const std::vector<std::string> lines = split_lines(to_str(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (flag(a[2]) || !lines[i].empty()) out += pad;
    }
    out += lines[i];
    STRATA_RETURN_IF_ERROR(in.check_string(out.size()));
  }
  if (flag(a[1])) out = pad + out;
  return string_result(in, std::move(out));
}

Result<Value> f_center(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("center", args, {"width"}));
  const std::string s = to_str(v);
  const auto n = static_cast<int64_t>(code_point_count(s));
  const int64_t width = a[0].is_int() ? a[0].as_int() : 80;
  if (width <= n) return Value(s);
  STRATA_RETURN_IF_ERROR(in.check_string(static_cast<size_t>(width)));
  const int64_t pad = width - n;
  const int64_t left = pad / 2 + (pad & width & 1);
  return string_result(in, std::string(static_cast<size_t>(left), ' ') + s +
                               std::string(static_cast<size_t>(pad - left), ' '));
}

Result<Value> f_wordcount(Interpreter&, const Value& v, Args&) {
  // Python's \w: letters, digits and '_' (any non-ASCII character that is not a space here).
  const std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    const bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      c == '_' || (c >= 0x80 && !is_space(c));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Result<Value> f_tojson(Interpreter& in, const Value& v, Args& args) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False), which is json.dumps with those arguments.
  STRATA_ASSIGN_OR_RETURN(
      auto a, args_of<4>("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonFormat f;
  f.ensure_ascii = flag(a[0]);
  f.sort_keys = flag(a[3]);
  if (a[1].is_string()) {
    f.indent = true;
    f.indent_text = a[1].as_string();
  } else if (a[1].is_int() || a[1].is_bool()) {
    f.indent = true;
    f.indent_text.assign(static_cast<size_t>(std::clamp<int64_t>(a[1].as_int(), 0, 64)), ' ');
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    return invalid_argument("tojson: indent must be an int or a str");
  }
  if (f.indent) f.item_separator = ",";
  if (!a[2].is_undefined() && !a[2].is_none()) {
    if (!a[2].is_list() || a[2].as_list().size() != 2 || !a[2].as_list()[0].is_string() ||
        !a[2].as_list()[1].is_string()) {
      return invalid_argument("tojson: separators must be a pair of strings");
    }
    f.item_separator = a[2].as_list()[0].as_string();
    f.key_separator = a[2].as_list()[1].as_string();
  }
  std::string out;
  STRATA_RETURN_IF_ERROR(dump_json(v, f, out));
  return string_result(in, std::move(out));
}

// ---- numbers

// Python's int(str, base) and float(str): surrounding whitespace and '_' between digits.
bool parse_py_int(std::string_view s, int64_t base, int64_t& out) {
  s = strip(s, nullptr, true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  // A 0x / 0o / 0b prefix is allowed when it names the base; base 0 takes it from the prefix.
  if (s.size() > 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed != 0 && (base == 0 || base == prefixed)) {
      base = prefixed;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) {
    if (s.size() > 1 && s[0] == '0') return false;  // Python refuses "010" with base 0
    base = 10;
  }
  if (base < 2 || base > 36) return false;
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  __int128 v = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (s[i - 1] == '_') return false;
      continue;
    }
    int d = c >= '0' && c <= '9'                     ? c - '0'
            : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                     : 99;
    if (d >= base) return false;
    v = v * base + d;
    if (v > static_cast<__int128>(INT64_MAX) + 1) return false;
  }
  if (neg) v = -v;
  if (v > INT64_MAX || v < INT64_MIN) return false;
  out = static_cast<int64_t>(v);
  return true;
}

bool parse_py_float(std::string_view s, double& out) {
  s = strip(s, nullptr, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return false;
      }
      continue;
    }
    t += s[i];
  }
  if (t.empty()) return false;
  const std::string lower = ascii_lower(t);
  const std::string_view body = lower[0] == '+' || lower[0] == '-'
                                    ? std::string_view(lower).substr(1)
                                    : std::string_view(lower);
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? NAN : HUGE_VAL;
    if (lower[0] == '-') out = -out;
    return true;
  }
  for (char c : body) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' ||
          c == '-')) {
      return false;
    }
  }
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

Result<Value> f_int(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("int", args, {"default", "base"}));
  const Value dflt = a[0].is_undefined() ? Value(int64_t{0}) : a[0];
  if (v.is_undefined()) return invalid_argument(v.undefined_hint());
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) {
      return out_of_range("cannot convert float " + to_repr(v) + " to a 64-bit integer");
    }
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t i = 0;
    if (parse_py_int(v.as_string(), a[1].is_int() ? a[1].as_int() : 10, i)) return Value(i);
    double d = 0;
    if (parse_py_float(v.as_string(), d)) {
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) {
        return out_of_range("cannot convert " + to_repr(v) + " to a 64-bit integer");
      }
      return Value(static_cast<int64_t>(d));
    }
  }
  return dflt;
}

Result<Value> f_float(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("float", args, {"default"}));
  const Value dflt = a[0].is_undefined() ? Value(0.0) : a[0];
  if (v.is_undefined()) return invalid_argument(v.undefined_hint());
  if (v.is_number()) return Value(v.as_float());
  double d = 0;
  if (v.is_string() && parse_py_float(v.as_string(), d)) return Value(d);
  return dflt;
}

Result<Value> f_abs(Interpreter&, const Value& v, Args&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) return out_of_range("integer overflow in abs()");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) return invalid_argument(v.undefined_hint());
  return invalid_argument("bad operand type for abs(): '" + std::string(v.type_name()) + "'");
}

Result<Value> f_round(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("round", args, {"precision", "method"}));
  const int64_t precision = a[0].is_int() ? a[0].as_int() : 0;
  const std::string method = a[1].is_string() ? a[1].as_string() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return invalid_argument("method must be common, ceil or floor");
  }
  if (v.is_undefined()) return invalid_argument(v.undefined_hint());
  if (!v.is_number()) {
    return invalid_argument("type " + std::string(v.type_name()) + " doesn't define __round__");
  }
  if (precision < -300 || precision > 300) return invalid_argument("round: precision out of range");
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // round(int, n >= 0) keeps the int
    // Python rounds the exact binary value half to even at `precision` decimals; printf does
    // the same for non-negative precisions.
    if (precision >= 0) {
      char buf[400];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.as_float());
      return Value(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(v.as_float() / scale) * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

// ---- sequences

Result<Value> f_length(Interpreter&, const Value& v, Args&) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value(int64_t{0});
    case Value::Kind::kString:
      return Value(static_cast<int64_t>(code_point_count(v.as_string())));
    case Value::Kind::kList:
      if (v.list_shape() == ListData::Shape::kGenerator) break;
      return Value(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::kDict:
      return Value(static_cast<int64_t>(v.as_dict().size()));
    default:
      break;
  }
  return invalid_argument("object of type '" + std::string(v.type_name()) + "' has no len()");
}

Result<Value> f_list(Interpreter& in, const Value& v, Args&) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  return Value::list(std::move(items));
}

Result<Value> f_first(Interpreter&, const Value& v, Args&) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(Interpreter&, const Value& v, Args&) {
  if (v.is_list() && v.list_shape() == ListData::Shape::kGenerator) {
    return invalid_argument("'generator' object is not reversible");
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> f_reverse(Interpreter& in, const Value& v, Args&) {
  if (v.is_string()) {
    const std::string& s = v.as_string();
    const std::vector<size_t> offsets = code_point_offsets(s);
    std::string out;
    for (size_t i = offsets.size() - 1; i-- > 0;) {
      out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return string_result(in, std::move(out));
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  std::reverse(items.begin(), items.end());
  // jinja2 gives reversed(value), an iterator, and a reversed list copy of what reversed()
  // refuses (a generator).
  if (v.is_list() && v.list_shape() == ListData::Shape::kGenerator) {
    return Value::list(std::move(items));
  }
  return Value::generator(std::move(items));
}

Result<Value> f_join(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("join", args, {"d", "attribute"}));
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  const std::string sep = a[0].is_undefined() ? "" : to_str(a[0]);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_undefined()) {
      STRATA_ASSIGN_OR_RETURN(item, get_attribute(in, item, a[1]));
    }
    if (i > 0) out += sep;
    out += to_str(item);
    STRATA_RETURN_IF_ERROR(in.check_string(out.size()));
  }
  STRATA_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(items.size())));
  return string_result(in, std::move(out));
}

Result<Value> f_default(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("default", args, {"default_value", "boolean"}));
  const bool use_default = v.is_undefined() || (flag(a[1]) && !v.truthy());
  if (!use_default) return v;
  return a[0].is_undefined() ? Value("") : a[0];
}

Result<Value> f_items(Interpreter& in, const Value& v, Args&) {
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) return invalid_argument("Can only get item pairs from a mapping.");
  STRATA_RETURN_IF_ERROR(charge_items(in, v.as_dict().size()));
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items()) out.push_back(Value::tuple({k, val}));
  return Value::generator(std::move(out));
}

Result<Value> f_attr(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("attr", args, {"name"}));
  // Python's getattr only: a dict's keys are not its attributes.
  if (v.is_dict() || v.is_string() || v.is_list()) {
    if (auto m = find_method(v, to_str(a[0]))) return Value(std::move(m));
    return Value::undefined("'" + std::string(v.type_name()) + " object' has no attribute '" +
                            to_str(a[0]) + "'");
  }
  return in.getattr(v, to_str(a[0]));
}

Result<Value> f_batch(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("batch", args, {"linecount", "fill_with"}));
  if (!a[0].is_int() || a[0].as_int() <= 0) return invalid_argument("batch: linecount must be > 0");
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  const auto n = static_cast<size_t>(a[0].as_int());
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += n) {
    std::vector<Value> row(items.begin() + static_cast<ptrdiff_t>(i),
                           items.begin() + static_cast<ptrdiff_t>(std::min(items.size(), i + n)));
    if (row.size() < n && !a[1].is_undefined()) row.resize(n, a[1]);
    out.push_back(Value::list(std::move(row)));
  }
  return Value::generator(std::move(out));
}

// A sort key with an error slot: std::stable_sort cannot fail, so the first failed
// comparison is kept and reported after the sort.
struct SortState {
  Status error;
  bool less(const Value& a, const Value& b) {
    if (!error.is_ok()) return false;
    Result<int> c = compare(a, b);
    if (!c) {
      error = c.status();
      return false;
    }
    return *c < 0;
  }
};

Result<Value> f_sort(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a,
                          args_of<3>("sort", args, {"reverse", "case_sensitive", "attribute"}));
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size() * 8));
  std::vector<std::pair<Value, Value>> keyed;  // key, item
  for (Value& item : items) {
    Value key = item;
    if (!a[2].is_undefined()) {
      STRATA_ASSIGN_OR_RETURN(key, get_attribute(in, item, a[2]));
    }
    keyed.emplace_back(lowered(key, flag(a[1])), std::move(item));
  }
  SortState st;
  const bool reverse = flag(a[0]);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? st.less(y.first, x.first) : st.less(x.first, y.first);
  });
  STRATA_RETURN_IF_ERROR(st.error);
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Result<Value> f_dictsort(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a,
                          args_of<3>("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return invalid_argument("dictsort: can only sort a mapping");
  const std::string by = a[1].is_string() ? a[1].as_string() : "key";
  if (by != "key" && by != "value")
    return invalid_argument("You can only sort by either \"key\" or \"value\"");
  STRATA_RETURN_IF_ERROR(charge_items(in, v.as_dict().size() * 8));
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_dict().items()) pairs.push_back(Value::tuple({k, val}));
  SortState st;
  const bool reverse = flag(a[2]);
  const size_t pick = by == "key" ? 0 : 1;
  const bool cs = flag(a[0]);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const Value kx = lowered(x.as_list()[pick], cs);
    const Value ky = lowered(y.as_list()[pick], cs);
    return reverse ? st.less(ky, kx) : st.less(kx, ky);
  });
  STRATA_RETURN_IF_ERROR(st.error);
  return Value::list(std::move(pairs));
}

Result<Value> f_unique(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("unique", args, {"case_sensitive", "attribute"}));
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  Dict seen;
  std::vector<Value> out;
  for (Value& item : items) {
    Value key = item;
    if (!a[1].is_undefined()) {
      STRATA_ASSIGN_OR_RETURN(key, get_attribute(in, item, a[1]));
    }
    key = lowered(key, flag(a[0]));
    if (!Dict::key_ok(key)) {
      return invalid_argument("unhashable type: '" + std::string(key.type_name()) + "'");
    }
    if (seen.contains(key)) continue;
    seen.set(key, Value());
    out.push_back(std::move(item));
  }
  return Value::generator(std::move(out));
}

Result<Value> min_max(Interpreter& in, const Value& v, Args& args, bool max) {
  STRATA_ASSIGN_OR_RETURN(auto a,
                          args_of<2>(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  SortState st;
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (!a[1].is_undefined()) {
      STRATA_ASSIGN_OR_RETURN(key, get_attribute(in, items[i], a[1]));
    }
    key = lowered(key, flag(a[0]));
    if (i == 0 || (max ? st.less(best_key, key) : st.less(key, best_key))) {
      best = i;
      best_key = key;
    }
  }
  STRATA_RETURN_IF_ERROR(st.error);
  return items[best];
}
Result<Value> f_min(Interpreter& in, const Value& v, Args& args) {
  return min_max(in, v, args, false);
}
Result<Value> f_max(Interpreter& in, const Value& v, Args& args) {
  return min_max(in, v, args, true);
}

Result<Value> f_sum(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("sum", args, {"attribute", "start"}));
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  Value total = a[1].is_undefined() ? Value(int64_t{0}) : a[1];
  for (const Value& item : items) {
    Value x = item;
    if (!a[0].is_undefined()) {
      STRATA_ASSIGN_OR_RETURN(x, get_attribute(in, item, a[0]));
    }
    if (!total.is_number() || !x.is_number()) {
      return invalid_argument("unsupported operand type(s) for +: '" +
                              std::string(total.type_name()) + "' and '" +
                              std::string(x.type_name()) + "'");
    }
    if (total.is_float() || x.is_float()) {
      total = Value(total.as_float() + x.as_float());
    } else {
      int64_t r = 0;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) {
        return out_of_range("integer overflow in sum");
      }
      total = Value(r);
    }
  }
  return total;
}

// select/reject/selectattr/rejectattr: keep items whose test (or truth) is `keep`.
Result<Value> select_impl(Interpreter& in, const Value& v, Args& args, bool by_attribute,
                          bool keep) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  std::vector<Value>& p = args.positional;
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (p.empty()) return invalid_argument("Missing parameter for attribute name");
    attribute = p[next++];
  }
  std::string test;
  if (next < p.size()) test = to_str(p[next++]);
  Args test_args;
  test_args.positional.assign(p.begin() + static_cast<ptrdiff_t>(next), p.end());
  test_args.named = args.named;
  std::vector<Value> out;
  for (Value& item : items) {
    Value x = item;
    if (by_attribute) {
      STRATA_ASSIGN_OR_RETURN(x, get_attribute(in, item, attribute));
    }
    bool yes = false;
    if (test.empty()) {
      yes = x.truthy();
    } else {
      Args copy = test_args;
      STRATA_ASSIGN_OR_RETURN(yes, in.apply_test(test, x, copy));
    }
    if (yes == keep) out.push_back(std::move(item));
  }
  return Value::generator(std::move(out));
}
Result<Value> f_select(Interpreter& in, const Value& v, Args& args) {
  return select_impl(in, v, args, false, true);
}
Result<Value> f_reject(Interpreter& in, const Value& v, Args& args) {
  return select_impl(in, v, args, false, false);
}
Result<Value> f_selectattr(Interpreter& in, const Value& v, Args& args) {
  return select_impl(in, v, args, true, true);
}
Result<Value> f_rejectattr(Interpreter& in, const Value& v, Args& args) {
  return select_impl(in, v, args, true, false);
}

Result<Value> f_map(Interpreter& in, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  STRATA_RETURN_IF_ERROR(charge_items(in, items.size()));
  std::vector<Value> out;
  if (args.positional.empty()) {
    Value attribute;
    Value dflt;
    for (const auto& [k, val] : args.named) {
      if (k == "attribute") {
        attribute = val;
      } else if (k == "default") {
        dflt = val;
      } else {
        return invalid_argument("Unexpected keyword argument '" + k + "'");
      }
    }
    if (attribute.is_undefined()) return invalid_argument("map requires a filter argument");
    for (const Value& item : items) {
      STRATA_ASSIGN_OR_RETURN(Value x, get_attribute(in, item, attribute));
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return Value::generator(std::move(out));
  }
  const std::string filter = to_str(args.positional[0]);
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.named = args.named;
  for (const Value& item : items) {
    Args copy = rest;
    STRATA_ASSIGN_OR_RETURN(Value x, in.apply_filter(filter, item, copy));
    out.push_back(std::move(x));
  }
  return Value::generator(std::move(out));
}

struct FilterRow {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterRow kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterRow& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace strata::jinja
