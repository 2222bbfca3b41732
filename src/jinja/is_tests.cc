// jinja2's tests (tests.py): `x is defined`, `x is string`, `x is divisibleby 3`...
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"

namespace strata::jinja {
namespace {

using Kind = Value::Kind;

Result<Value> one_arg(std::string_view test, const Args& args) {
  Value a[1];
  STRATA_RETURN_IF_ERROR(bind_args(test, args, {"other"}, a));
  if (a[0].is_undefined() && args.positional.empty() && args.named.empty()) {
    return invalid_argument("test '" + std::string(test) + "' needs an argument");
  }
  return a[0];
}

bool is_generator(const Value& v) {
  return v.is_list() && v.list_shape() == ListData::Shape::kGenerator;
}

Result<bool> t_defined(Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }
Result<bool> t_undefined(Interpreter&, const Value& v, Args&) { return v.is_undefined(); }
Result<bool> t_none(Interpreter&, const Value& v, Args&) { return v.is_none(); }
Result<bool> t_boolean(Interpreter&, const Value& v, Args&) { return v.is_bool(); }
Result<bool> t_true(Interpreter&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
Result<bool> t_false(Interpreter&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
Result<bool> t_integer(Interpreter&, const Value& v, Args&) { return v.is_int(); }
Result<bool> t_float(Interpreter&, const Value& v, Args&) { return v.is_float(); }
Result<bool> t_number(Interpreter&, const Value& v, Args&) { return v.is_number(); }
Result<bool> t_string(Interpreter&, const Value& v, Args&) { return v.is_string(); }
Result<bool> t_mapping(Interpreter&, const Value& v, Args&) { return v.is_dict(); }
Result<bool> t_escaped(Interpreter&, const Value&, Args&) { return false; }

// Python's iter() works: strings, containers, generators, the loop, and undefined.
Result<bool> t_iterable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
         (v.is_object() && v.as_object()->type_name() == "LoopContext");
}

// len() and [] both work; undefined has both (they fail, but exist).
Result<bool> t_sequence(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_list() && !is_generator(v));
}

// Python's callable(): undefined counts, having a __call__ that fails.
Result<bool> t_callable(Interpreter&, const Value& v, Args&) {
  return v.is_callable() || v.is_undefined() ||
         (v.is_object() && v.as_object()->type_name() == "LoopContext");
}

Result<bool> t_sameas(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Value other, one_arg("sameas", args));
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return v.as_bool() == other.as_bool();
    case Kind::kInt:  // CPython keeps one object for each small int
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Kind::kString:
      return &v.as_string() == &other.as_string();
    case Kind::kList:
      return &v.as_list() == &other.as_list();
    case Kind::kDict:
      return &v.as_dict() == &other.as_dict();
    case Kind::kCallable:
      return v.as_callable() == other.as_callable();
    case Kind::kObject:
      return v.as_object() == other.as_object();
    default:
      return false;
  }
}

// value % n == 0, with Python's % (so floats work and anything else is an error).
Result<bool> remainder_is(const Value& v, const Value& n, int64_t want, std::string_view test) {
  if (v.is_undefined()) return invalid_argument(v.undefined_hint());
  if (!v.is_number() || !n.is_number()) {
    return invalid_argument("test '" + std::string(test) + "' needs numbers, got " +
                            std::string(v.type_name()) + " and " + std::string(n.type_name()));
  }
  if (n.as_float() == 0) return invalid_argument("integer division or modulo by zero");
  if (v.is_float() || n.is_float()) {
    double m = std::fmod(v.as_float(), n.as_float());
    if (m != 0 && ((m < 0) != (n.as_float() < 0))) m += n.as_float();
    return m == static_cast<double>(want);
  }
  if (n.as_int() == -1) return want == 0;
  int64_t m = v.as_int() % n.as_int();
  if (m != 0 && ((m < 0) != (n.as_int() < 0))) m += n.as_int();
  return m == want;
}

Result<bool> t_odd(Interpreter&, const Value& v, Args&) {
  return remainder_is(v, Value(int64_t{2}), 1, "odd");
}
Result<bool> t_even(Interpreter&, const Value& v, Args&) {
  return remainder_is(v, Value(int64_t{2}), 0, "even");
}
Result<bool> t_divisibleby(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Value n, one_arg("divisibleby", args));
  return remainder_is(v, n, 0, "divisibleby");
}

Result<bool> t_lower(Interpreter&, const Value& v, Args&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.as_string()) {
    if (c >= 'A' && c <= 'Z') return false;
    cased |= c >= 'a' && c <= 'z';
  }
  return cased;
}

Result<bool> t_upper(Interpreter&, const Value& v, Args&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.as_string()) {
    if (c >= 'a' && c <= 'z') return false;
    cased |= c >= 'A' && c <= 'Z';
  }
  return cased;
}

Result<bool> t_in(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Value seq, one_arg("in", args));
  if (seq.is_string()) {
    if (!v.is_string()) {
      return invalid_argument("'in <string>' requires string as left operand, not " +
                              std::string(v.type_name()));
    }
    return seq.as_string().find(v.as_string()) != std::string::npos;
  }
  if (seq.is_dict()) return seq.as_dict().contains(v);
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(seq));
  for (const Value& x : items) {
    if (x == v) return true;
  }
  return false;
}

Result<bool> t_filter(Interpreter&, const Value& v, Args&) {
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
Result<bool> t_test(Interpreter&, const Value& v, Args&) {
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

Result<bool> t_eq(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Value other, one_arg("==", args));
  return v == other;
}
Result<bool> t_ne(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Value other, one_arg("!=", args));
  return !(v == other);
}

template <int kSign, bool kOrEqual>
Result<bool> t_order(Interpreter&, const Value& v, Args& args) {
  STRATA_ASSIGN_OR_RETURN(Value other, one_arg("comparison", args));
  STRATA_ASSIGN_OR_RETURN(int c, compare(v, other));
  return c == kSign || (kOrEqual && c == 0);
}

struct TestRow {
  std::string_view name;
  TestFn fn;
};

constexpr TestRow kTests[] = {
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"filter", t_filter},
    {"test", t_test},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"lower", t_lower},
    {"upper", t_upper},
    {"string", t_string},
    {"mapping", t_mapping},
    {"number", t_number},
    {"sequence", t_sequence},
    {"iterable", t_iterable},
    {"callable", t_callable},
    {"sameas", t_sameas},
    {"escaped", t_escaped},
    {"in", t_in},
    {"==", t_eq},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"!=", t_ne},
    {"ne", t_ne},
    {">", t_order<1, false>},
    {"gt", t_order<1, false>},
    {"greaterthan", t_order<1, false>},
    {">=", t_order<1, true>},
    {"ge", t_order<1, true>},
    {"<", t_order<-1, false>},
    {"lt", t_order<-1, false>},
    {"lessthan", t_order<-1, false>},
    {"<=", t_order<-1, true>},
    {"le", t_order<-1, true>},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestRow& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace strata::jinja
