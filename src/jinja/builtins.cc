// Global functions: range, dict, namespace, joiner, cycler, and what transformers adds for
// chat templates (raise_exception, strftime_now).
#include "jinja/builtins.h"

#include <array>
#include <ctime>

#include "jinja/interpreter.h"

namespace strata::jinja {

Status bind_args(std::string_view function, const Args& args,
                 std::initializer_list<std::string_view> params, Value* out) {
  const std::string fn(function);
  if (args.positional.size() > params.size()) {
    return invalid_argument(fn + "() takes at most " + std::to_string(params.size()) +
                            " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [name, v] : args.named) {
    size_t i = 0;
    for (std::string_view p : params) {
      if (p == name) break;
      ++i;
    }
    if (i == params.size()) {
      return invalid_argument(fn + "() got an unexpected keyword argument '" + name + "'");
    }
    if (i < args.positional.size()) {
      return invalid_argument(fn + "() got multiple values for argument '" + name + "'");
    }
    out[i] = v;
  }
  return Status::ok();
}

namespace {

// namespace(): the one mutable container; `{% set ns.x = 1 %}` writes to it from any scope.
class Namespace : public Object {
 public:
  explicit Namespace(Dict attrs) : attrs_(std::move(attrs)) {}
  std::string_view type_name() const override { return "Namespace"; }
  Value attr(std::string_view name) const override {
    if (const Value* v = attrs_.find(name)) return *v;
    return Value::undefined("'Namespace' object has no attribute '" + std::string(name) + "'");
  }
  Status set_attr(std::string_view name, Value value) override {
    attrs_.set(Value(name), std::move(value));
    return Status::ok();
  }
  void release() override { attrs_ = Dict(); }
  std::string repr(int depth) const override {
    if (depth <= 0) return "<Namespace ...>";
    std::string out = "<Namespace {";
    bool first = true;
    for (const auto& [k, v] : attrs_.items()) {
      if (!first) out += ", ";
      first = false;
      out += to_repr(k) + ": " + (v.is_object() ? v.as_object()->repr(depth - 1) : to_repr(v));
    }
    return out + "}>";
  }

 private:
  Dict attrs_;
};

using GlobalFn = Result<Value> (*)(Interpreter& in, Args& args);

class Builtin : public Callable {
 public:
  Builtin(std::string_view name, GlobalFn fn) : name_(name), fn_(fn) {}
  std::string_view name() const override { return name_; }
  Result<Value> call(Interpreter& in, Args& args) const override { return fn_(in, args); }

 private:
  std::string_view name_;
  GlobalFn fn_;
};

// dict(...) and namespace(...): a mapping and/or pairs, then keyword arguments.
Result<Dict> dict_from(Interpreter& in, Args& args, std::string_view fn) {
  if (args.positional.size() > 1) {
    return invalid_argument(std::string(fn) + " expected at most 1 argument, got " +
                            std::to_string(args.positional.size()));
  }
  Dict d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      STRATA_ASSIGN_OR_RETURN(std::vector<Value> pairs, iterate(src));
      for (const Value& p : pairs) {
        STRATA_RETURN_IF_ERROR(in.charge(1));
        if (!p.is_list() || p.as_list().size() != 2) {
          return invalid_argument(std::string(fn) + ": each item must be a pair");
        }
        if (!Dict::key_ok(p.as_list()[0])) {
          return invalid_argument("unhashable type: '" + std::string(p.as_list()[0].type_name()) +
                                  "'");
        }
        d.set(p.as_list()[0], p.as_list()[1]);
      }
    }
  }
  for (auto& [k, v] : args.named) d.set(Value(k), std::move(v));
  return d;
}

Result<Value> global_dict(Interpreter& in, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Dict d, dict_from(in, args, "dict"));
  return Value(std::move(d));
}

Result<Value> global_namespace(Interpreter& in, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Dict d, dict_from(in, args, "namespace"));
  auto ns = std::make_shared<Namespace>(std::move(d));
  in.release_at_end(ns);
  return Value(std::shared_ptr<Object>(std::move(ns)));
}

// The sandbox's cap on range(): a bigger one is refused before any list is built.
constexpr int64_t kMaxRange = 100000;

Result<Value> global_range(Interpreter& in, Args& args) {
  if (!args.named.empty()) return invalid_argument("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) {
    return invalid_argument("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  }
  for (const Value& v : p) {
    if (!v.is_int() && !v.is_bool()) {
      std::string type(v.type_name());
      return invalid_argument("'" + type + "' object cannot be interpreted as an integer");
    }
  }
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) return invalid_argument("range() arg 3 must not be zero");
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 n = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (n > kMaxRange) {
    return out_of_range("range of " + std::to_string(static_cast<int64_t>(n)) +
                        " items: the sandbox blocks ranges larger than " +
                        std::to_string(kMaxRange));
  }
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(n)));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0, v = start; i < static_cast<int64_t>(n); ++i, v += step) out.emplace_back(v);
  return Value::list(std::move(out));
}

Result<Value> global_raise_exception(Interpreter&, Args& args) {
  std::string message = args.positional.empty() ? std::string() : to_str(args.positional[0]);
  return invalid_argument("raise_exception: " + message);
}

Result<Value> global_strftime_now(Interpreter& in, Args& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    return invalid_argument("strftime_now() takes one format string");
  }
  const std::string& format = args.positional[0].as_string();
  if (format.size() > 256) return invalid_argument("strftime_now(): format longer than 256 bytes");
  // Each directive expands to at most a few dozen bytes (%c is the longest).
  std::string out(format.size() * 32 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &in.now());
  out.resize(n);
  return Value(std::move(out));
}

// joiner(sep): '' on its first call, then sep.
class Joiner : public Callable {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string_view name() const override { return "joiner"; }
  Result<Value> call(Interpreter&, Args&) const override {
    if (!used_) {
      used_ = true;
      return Value("");
    }
    return Value(sep_);
  }

 private:
  std::string sep_;
  mutable bool used_ = false;  // a joiner belongs to one render, on one thread
};

Result<Value> global_joiner(Interpreter&, Args& args) {
  Value sep[1];
  STRATA_RETURN_IF_ERROR(bind_args("joiner", args, {"sep"}, sep));
  return Value(std::make_shared<const Joiner>(sep[0].is_undefined() ? ", " : to_str(sep[0])));
}

// cycler(a, b, c): .next() returns the items in turn, .current the next one, .reset().
class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "Cycler"; }
  Value attr(std::string_view name) const override;
  std::string repr(int) const override { return "<Cycler>"; }
  Value current() const { return items_[pos_]; }
  Value advance() const {
    Value v = items_[pos_];
    pos_ = (pos_ + 1) % items_.size();
    return v;
  }
  void reset() const { pos_ = 0; }

 private:
  std::vector<Value> items_;
  mutable size_t pos_ = 0;
};

class CyclerMethod : public Callable {
 public:
  CyclerMethod(std::shared_ptr<const Cycler> c, bool next) : c_(std::move(c)), next_(next) {}
  std::string_view name() const override { return next_ ? "next" : "reset"; }
  Result<Value> call(Interpreter&, Args&) const override {
    if (next_) return c_->advance();
    c_->reset();
    return Value::none();
  }

 private:
  std::shared_ptr<const Cycler> c_;
  bool next_;
};

Value Cycler::attr(std::string_view name) const {
  std::shared_ptr<const Cycler> self = shared_from_this();
  if (name == "current") return current();
  if (name == "next") return Value(std::make_shared<const CyclerMethod>(self, true));
  if (name == "reset") return Value(std::make_shared<const CyclerMethod>(self, false));
  return Value::undefined("'Cycler' object has no attribute '" + std::string(name) + "'");
}

Result<Value> global_cycler(Interpreter&, Args& args) {
  if (args.positional.empty()) return invalid_argument("cycler() needs at least one item");
  return Value(std::shared_ptr<Object>(std::make_shared<Cycler>(args.positional)));
}

struct GlobalRow {
  std::string_view name;
  GlobalFn fn;
};

constexpr std::array<GlobalRow, 7> kGlobals = {{
    {"range", global_range},
    {"dict", global_dict},
    {"namespace", global_namespace},
    {"joiner", global_joiner},
    {"cycler", global_cycler},
    {"raise_exception", global_raise_exception},
    {"strftime_now", global_strftime_now},
}};

}  // namespace

Value find_global(std::string_view name) {
  for (const GlobalRow& g : kGlobals) {
    if (g.name == name) {
      return Value(std::make_shared<const Builtin>(g.name, g.fn));
    }
  }
  return Value();
}

}  // namespace strata::jinja
