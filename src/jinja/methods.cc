// Methods of Python's str, dict and list that chat templates call: message.content.strip(),
// tool.items(), name.startswith('x')... Positions (find, index) count code points, as Python.
#include <array>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

using MethodFn = Result<Value> (*)(Interpreter& in, const Value& self, Args& args);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string_view name, MethodFn fn)
      : self_(std::move(self)), name_(name), fn_(fn) {}
  std::string_view name() const override { return name_; }
  Result<Value> call(Interpreter& in, Args& args) const override {
    if (fn_ == nullptr) {
      return invalid_argument("access to attribute '" + std::string(name_) + "' of '" +
                              std::string(self_.type_name()) + "' object is unsafe");
    }
    return fn_(in, self_, args);
  }

 private:
  Value self_;
  std::string_view name_;
  MethodFn fn_;  // null: a method that would change the object
};

Status want_str(std::string_view method, const Value& v, std::string_view arg) {
  if (v.is_string()) return Status::ok();
  return invalid_argument(std::string(method) + "() argument '" + std::string(arg) +
                          "' must be str, not " + std::string(v.type_name()));
}

int64_t int_or(const Value& v, int64_t dflt) {
  return v.is_int() || v.is_bool() ? v.as_int() : dflt;
}

const std::string* chars_of(const Value& v) { return v.is_string() ? &v.as_string() : nullptr; }

Result<Value> str_strip_impl(const Value& self, Args& args, bool left, bool right,
                             std::string_view fn) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>(fn, args, {"chars"}));
  if (!a[0].is_undefined() && !a[0].is_none()) STRATA_RETURN_IF_ERROR(want_str(fn, a[0], "chars"));
  return Value(strip(self.as_string(), chars_of(a[0]), left, right));
}

Result<Value> str_strip(Interpreter&, const Value& self, Args& args) {
  return str_strip_impl(self, args, true, true, "strip");
}
Result<Value> str_lstrip(Interpreter&, const Value& self, Args& args) {
  return str_strip_impl(self, args, true, false, "lstrip");
}
Result<Value> str_rstrip(Interpreter&, const Value& self, Args& args) {
  return str_strip_impl(self, args, false, true, "rstrip");
}

Value list_of_strings(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

Result<Value> split_impl(Interpreter& in, const Value& self, Args& args, bool from_right) {
  const std::string_view fn = from_right ? "rsplit" : "split";
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>(fn, args, {"sep", "maxsplit"}));
  const int64_t max = int_or(a[1], -1);
  const std::string& s = self.as_string();
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(s.size() / 16)));
  if (a[0].is_undefined() || a[0].is_none()) {
    if (!from_right || max < 0) return list_of_strings(split_whitespace(s, max));
    return unsupported("rsplit() with maxsplit and no separator is not supported");
  }
  STRATA_RETURN_IF_ERROR(want_str(fn, a[0], "sep"));
  if (a[0].as_string().empty()) return invalid_argument("empty separator");
  return list_of_strings(from_right ? rsplit_on(s, a[0].as_string(), max)
                                    : split_on(s, a[0].as_string(), max));
}

Result<Value> str_split(Interpreter& in, const Value& self, Args& args) {
  return split_impl(in, self, args, false);
}
Result<Value> str_rsplit(Interpreter& in, const Value& self, Args& args) {
  return split_impl(in, self, args, true);
}

Result<Value> str_splitlines(Interpreter& in, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("splitlines", args, {"keepends"}));
  if (a[0].truthy()) return unsupported("splitlines(keepends=True) is not supported");
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(self.as_string().size() / 16)));
  return list_of_strings(split_lines(self.as_string()));
}

// The code-point range [start, end) of a str method's optional start/end arguments.
std::string_view sub_range(const std::string& s, const Value& start, const Value& end,
                           size_t& offset) {
  const std::vector<size_t> offsets = code_point_offsets(s);
  const auto n = static_cast<int64_t>(offsets.size() - 1);
  auto clamp = [&](const Value& v, int64_t dflt) {
    int64_t i = int_or(v, dflt);
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  const int64_t b = clamp(start, 0);
  const int64_t e = std::max(b, clamp(end, n));
  offset = offsets[static_cast<size_t>(b)];
  return std::string_view(s).substr(offset, offsets[static_cast<size_t>(e)] - offset);
}

Result<Value> affix_impl(const Value& self, Args& args, bool prefix) {
  const std::string_view fn = prefix ? "startswith" : "endswith";
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<3>(fn, args, {"prefix", "start", "end"}));
  size_t offset = 0;
  const std::string_view s = sub_range(self.as_string(), a[1], a[2], offset);
  std::vector<Value> options;
  if (a[0].is_list() && a[0].list_shape() == ListData::Shape::kTuple) {
    options = a[0].as_list();
  } else {
    options.push_back(a[0]);
  }
  for (const Value& o : options) {
    if (!o.is_string()) {
      return invalid_argument(std::string(fn) + " first arg must be str or a tuple of str, not " +
                              std::string(o.type_name()));
    }
    if (prefix ? s.starts_with(o.as_string()) : s.ends_with(o.as_string())) return Value(true);
  }
  return Value(false);
}

Result<Value> str_startswith(Interpreter&, const Value& self, Args& args) {
  return affix_impl(self, args, true);
}
Result<Value> str_endswith(Interpreter&, const Value& self, Args& args) {
  return affix_impl(self, args, false);
}

Result<Value> find_impl(const Value& self, Args& args, bool reverse, bool raise) {
  const std::string_view fn = reverse ? (raise ? "rindex" : "rfind") : (raise ? "index" : "find");
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<3>(fn, args, {"sub", "start", "end"}));
  STRATA_RETURN_IF_ERROR(want_str(fn, a[0], "sub"));
  size_t offset = 0;
  const std::string_view s = sub_range(self.as_string(), a[1], a[2], offset);
  const size_t at = reverse ? s.rfind(a[0].as_string()) : s.find(a[0].as_string());
  if (at == std::string_view::npos) {
    if (raise) return invalid_argument("substring not found");
    return Value(int64_t{-1});
  }
  return Value(static_cast<int64_t>(
      code_point_count(std::string_view(self.as_string()).substr(0, offset + at))));
}

Result<Value> str_find(Interpreter&, const Value& self, Args& args) {
  return find_impl(self, args, false, false);
}
Result<Value> str_rfind(Interpreter&, const Value& self, Args& args) {
  return find_impl(self, args, true, false);
}
Result<Value> str_index(Interpreter&, const Value& self, Args& args) {
  return find_impl(self, args, false, true);
}
Result<Value> str_rindex(Interpreter&, const Value& self, Args& args) {
  return find_impl(self, args, true, true);
}

Result<Value> str_count(Interpreter&, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<3>("count", args, {"sub", "start", "end"}));
  STRATA_RETURN_IF_ERROR(want_str("count", a[0], "sub"));
  size_t offset = 0;
  const std::string_view s = sub_range(self.as_string(), a[1], a[2], offset);
  const std::string& sub = a[0].as_string();
  if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(s) + 1));
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) {
    ++n;
  }
  return Value(n);
}

Result<Value> str_replace(Interpreter& in, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<3>("replace", args, {"old", "new", "count"}));
  STRATA_RETURN_IF_ERROR(want_str("replace", a[0], "old"));
  STRATA_RETURN_IF_ERROR(want_str("replace", a[1], "new"));
  std::string out = replace(self.as_string(), a[0].as_string(), a[1].as_string(), int_or(a[2], -1));
  STRATA_RETURN_IF_ERROR(in.check_string(out.size()));
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(out.size() / 64)));
  return Value(std::move(out));
}

Result<Value> str_join(Interpreter& in, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("join", args, {"iterable"}));
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return invalid_argument("sequence item " + std::to_string(i) + ": expected str instance, " +
                              std::string(items[i].type_name()) + " found");
    }
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
    STRATA_RETURN_IF_ERROR(in.check_string(out.size()));
  }
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(items.size() + out.size() / 64)));
  return Value(std::move(out));
}

Result<Value> no_args(std::string_view fn, const Args& args) {
  if (!args.positional.empty() || !args.named.empty()) {
    return invalid_argument(std::string(fn) + "() takes no arguments");
  }
  return Value();
}

Result<Value> str_upper(Interpreter&, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("upper", args).status());
  return Value(ascii_upper(self.as_string()));
}

Result<Value> str_lower(Interpreter&, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("lower", args).status());
  return Value(ascii_lower(self.as_string()));
}

Result<Value> str_title(Interpreter&, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("title", args).status());
  // Python's str.title() starts a word after any non-letter.
  std::string out;
  bool after_letter = false;
  for (char c : self.as_string()) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter) {
      out += after_letter ? ascii_lower(std::string_view(&c, 1))
                          : ascii_upper(std::string_view(&c, 1));
    } else {
      out += c;
    }
    after_letter = letter || static_cast<uint8_t>(c) >= 0x80;
  }
  return Value(std::move(out));
}

Result<Value> str_capitalize(Interpreter&, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("capitalize", args).status());
  return Value(capitalize(self.as_string()));
}

// isdigit, isalpha... on ASCII; a non-ASCII character makes them false.
template <bool (*Pred)(char)>
Result<Value> str_is(Interpreter&, const Value& self, Args&) {
  const std::string& s = self.as_string();
  if (s.empty()) return Value(false);
  for (char c : s) {
    if (!Pred(c)) return Value(false);
  }
  return Value(true);
}
bool digit(char c) { return c >= '0' && c <= '9'; }
bool alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool alnum(char c) { return digit(c) || alpha(c); }

Result<Value> str_isspace(Interpreter&, const Value& self, Args&) {
  const std::string& s = self.as_string();
  return Value(!s.empty() && strip(s, nullptr, true, false).empty());
}

Result<Value> case_test(const Value& self, bool upper) {
  bool cased = false;
  for (char c : self.as_string()) {
    if (c >= 'a' && c <= 'z') {
      if (upper) return Value(false);
      cased = true;
    } else if (c >= 'A' && c <= 'Z') {
      if (!upper) return Value(false);
      cased = true;
    }
  }
  return Value(cased);
}
Result<Value> str_islower(Interpreter&, const Value& self, Args&) { return case_test(self, false); }
Result<Value> str_isupper(Interpreter&, const Value& self, Args&) { return case_test(self, true); }

Result<Value> affix_remove(const Value& self, Args& args, bool prefix) {
  const std::string_view fn = prefix ? "removeprefix" : "removesuffix";
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>(fn, args, {"affix"}));
  STRATA_RETURN_IF_ERROR(want_str(fn, a[0], "affix"));
  std::string_view s = self.as_string();
  const std::string& x = a[0].as_string();
  if (prefix && s.starts_with(x)) s.remove_prefix(x.size());
  if (!prefix && s.ends_with(x)) s.remove_suffix(x.size());
  return Value(s);
}
Result<Value> str_removeprefix(Interpreter&, const Value& self, Args& args) {
  return affix_remove(self, args, true);
}
Result<Value> str_removesuffix(Interpreter&, const Value& self, Args& args) {
  return affix_remove(self, args, false);
}

Result<Value> pad_impl(Interpreter& in, const Value& self, Args& args, int where,
                       std::string_view fn) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>(fn, args, {"width", "fillchar"}));
  if (!a[0].is_int() && !a[0].is_bool())
    return invalid_argument(std::string(fn) + "() needs an int width");
  const std::string fill = a[1].is_string() ? a[1].as_string() : " ";
  if (code_point_count(fill) != 1) {
    return invalid_argument("The fill character must be exactly one character long");
  }
  const std::string& s = self.as_string();
  const auto n = static_cast<int64_t>(code_point_count(s));
  const int64_t width = a[0].as_int();
  if (width <= n) return self;
  STRATA_RETURN_IF_ERROR(in.check_string(static_cast<size_t>(width) * fill.size()));
  STRATA_RETURN_IF_ERROR(in.charge(1 + width / 64));
  const int64_t pad = width - n;
  // Python's center() puts the odd space on the right unless the width is odd.
  int64_t left = where < 0 ? 0 : where > 0 ? pad : pad / 2 + (pad & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < pad - left; ++i) out += fill;
  return Value(std::move(out));
}
Result<Value> str_center(Interpreter& in, const Value& self, Args& args) {
  return pad_impl(in, self, args, 0, "center");
}
Result<Value> str_ljust(Interpreter& in, const Value& self, Args& args) {
  return pad_impl(in, self, args, -1, "ljust");
}
Result<Value> str_rjust(Interpreter& in, const Value& self, Args& args) {
  return pad_impl(in, self, args, 1, "rjust");
}

Result<Value> partition_impl(const Value& self, Args& args, bool from_right) {
  const std::string_view fn = from_right ? "rpartition" : "partition";
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>(fn, args, {"sep"}));
  STRATA_RETURN_IF_ERROR(want_str(fn, a[0], "sep"));
  const std::string& s = self.as_string();
  const std::string& sep = a[0].as_string();
  if (sep.empty()) return invalid_argument("empty separator");
  const size_t at = from_right ? s.rfind(sep) : s.find(sep);
  if (at == std::string::npos) {
    return from_right ? Value::tuple({Value(""), Value(""), self})
                      : Value::tuple({self, Value(""), Value("")});
  }
  return Value::tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
}
Result<Value> str_partition(Interpreter&, const Value& self, Args& args) {
  return partition_impl(self, args, false);
}
Result<Value> str_rpartition(Interpreter&, const Value& self, Args& args) {
  return partition_impl(self, args, true);
}

Result<Value> dict_items(Interpreter& in, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("items", args).status());
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(self.as_dict().size())));
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items()) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}

Result<Value> dict_keys(Interpreter& in, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("keys", args).status());
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(self.as_dict().size())));
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items()) out.push_back(k);
  return Value::list(std::move(out));
}

Result<Value> dict_values(Interpreter& in, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("values", args).status());
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(self.as_dict().size())));
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items()) out.push_back(v);
  return Value::list(std::move(out));
}

Result<Value> dict_get(Interpreter&, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<2>("get", args, {"key", "default"}));
  if (const Value* v = self.as_dict().find(a[0])) return *v;
  return a[1].is_undefined() ? Value::none() : a[1];
}

Result<Value> copy(Interpreter&, const Value& self, Args& args) {
  STRATA_RETURN_IF_ERROR(no_args("copy", args).status());
  return self;  // values are immutable: the copy can share
}

Result<Value> list_index(Interpreter& in, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("index", args, {"value"}));
  const auto& items = self.as_list();
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(items.size())));
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i] == a[0]) return Value(static_cast<int64_t>(i));
  }
  return invalid_argument(to_repr(a[0]) + " is not in list");
}

Result<Value> list_count(Interpreter& in, const Value& self, Args& args) {
  STRATA_ASSIGN_OR_RETURN(auto a, args_of<1>("count", args, {"value"}));
  const auto& items = self.as_list();
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(items.size())));
  int64_t n = 0;
  for (const Value& v : items) n += v == a[0] ? 1 : 0;
  return Value(n);
}

struct MethodRow {
  Value::Kind kind;
  std::string_view name;
  MethodFn fn;  // null: refused by the sandbox (it would change the object)
};

constexpr MethodRow kMethods[] = {
    {Value::Kind::kString, "strip", str_strip},
    {Value::Kind::kString, "lstrip", str_lstrip},
    {Value::Kind::kString, "rstrip", str_rstrip},
    {Value::Kind::kString, "split", str_split},
    {Value::Kind::kString, "rsplit", str_rsplit},
    {Value::Kind::kString, "splitlines", str_splitlines},
    {Value::Kind::kString, "startswith", str_startswith},
    {Value::Kind::kString, "endswith", str_endswith},
    {Value::Kind::kString, "find", str_find},
    {Value::Kind::kString, "rfind", str_rfind},
    {Value::Kind::kString, "index", str_index},
    {Value::Kind::kString, "rindex", str_rindex},
    {Value::Kind::kString, "count", str_count},
    {Value::Kind::kString, "replace", str_replace},
    {Value::Kind::kString, "join", str_join},
    {Value::Kind::kString, "upper", str_upper},
    {Value::Kind::kString, "lower", str_lower},
    {Value::Kind::kString, "casefold", str_lower},
    {Value::Kind::kString, "title", str_title},
    {Value::Kind::kString, "capitalize", str_capitalize},
    {Value::Kind::kString, "isdigit", str_is<digit>},
    {Value::Kind::kString, "isnumeric", str_is<digit>},
    {Value::Kind::kString, "isdecimal", str_is<digit>},
    {Value::Kind::kString, "isalpha", str_is<alpha>},
    {Value::Kind::kString, "isalnum", str_is<alnum>},
    {Value::Kind::kString, "isspace", str_isspace},
    {Value::Kind::kString, "islower", str_islower},
    {Value::Kind::kString, "isupper", str_isupper},
    {Value::Kind::kString, "removeprefix", str_removeprefix},
    {Value::Kind::kString, "removesuffix", str_removesuffix},
    {Value::Kind::kString, "center", str_center},
    {Value::Kind::kString, "ljust", str_ljust},
    {Value::Kind::kString, "rjust", str_rjust},
    {Value::Kind::kString, "partition", str_partition},
    {Value::Kind::kString, "rpartition", str_rpartition},
    {Value::Kind::kDict, "items", dict_items},
    {Value::Kind::kDict, "keys", dict_keys},
    {Value::Kind::kDict, "values", dict_values},
    {Value::Kind::kDict, "get", dict_get},
    {Value::Kind::kDict, "copy", copy},
    {Value::Kind::kDict, "pop", nullptr},
    {Value::Kind::kDict, "popitem", nullptr},
    {Value::Kind::kDict, "setdefault", nullptr},
    {Value::Kind::kDict, "update", nullptr},
    {Value::Kind::kDict, "clear", nullptr},
    {Value::Kind::kList, "index", list_index},
    {Value::Kind::kList, "count", list_count},
    {Value::Kind::kList, "copy", copy},
    {Value::Kind::kList, "append", nullptr},
    {Value::Kind::kList, "extend", nullptr},
    {Value::Kind::kList, "insert", nullptr},
    {Value::Kind::kList, "pop", nullptr},
    {Value::Kind::kList, "remove", nullptr},
    {Value::Kind::kList, "reverse", nullptr},
    {Value::Kind::kList, "sort", nullptr},
    {Value::Kind::kList, "clear", nullptr},
};

}  // namespace

std::shared_ptr<const Callable> find_method(const Value& self, std::string_view name) {
  if (self.is_list() && self.list_shape() == ListData::Shape::kGenerator) return nullptr;
  for (const MethodRow& m : kMethods) {
    if (m.kind == self.kind() && m.name == name) {
      return std::make_shared<const BoundMethod>(self, m.name, m.fn);
    }
  }
  return nullptr;
}

}  // namespace strata::jinja
