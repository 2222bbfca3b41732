// Expressions: names, literals, attribute and item access, slicing, operators, calls.
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

Status undefined_error(const Value& v) { return invalid_argument(v.undefined_hint()); }

Status bad_operands(std::string_view op, const Value& a, const Value& b) {
  return invalid_argument("unsupported operand type(s) for " + std::string(op) + ": '" +
                          std::string(a.type_name()) + "' and '" + std::string(b.type_name()) +
                          "'");
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

// Python's floor division and modulo for ints (rounding toward minus infinity).
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

Result<Value> repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty())
      STRATA_RETURN_IF_ERROR(
          in.check_string(s.size() * static_cast<size_t>(std::min<int64_t>(times, INT32_MAX))));
    STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(s.size()) * times / 64));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.as_list();
  if (!items.empty()) {
    STRATA_RETURN_IF_ERROR(
        in.check_items(items.size() * static_cast<size_t>(std::min<int64_t>(times, INT32_MAX))));
  }
  STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(items.size()) * times));
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.list_shape() == ListData::Shape::kTuple ? Value::tuple(std::move(out))
                                                     : Value::list(std::move(out));
}

Result<Value> arithmetic(Interpreter& in, BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  static constexpr std::string_view kNames[] = {"+", "-", "*", "/", "//", "%", "**"};
  const std::string_view name = kNames[static_cast<int>(op)];
  if (a.is_number() && b.is_number()) {
    const bool ints = is_intlike(a) && is_intlike(b);
    const double x = a.as_float();
    const double y = b.as_float();
    int64_t r = 0;
    switch (op) {
      case BinaryOp::kAdd:
        if (!ints) return Value(x + y);
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) break;
        return Value(r);
      case BinaryOp::kSub:
        if (!ints) return Value(x - y);
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) break;
        return Value(r);
      case BinaryOp::kMul:
        if (!ints) return Value(x * y);
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) break;
        return Value(r);
      case BinaryOp::kDiv:
        if (y == 0) return invalid_argument("division by zero");
        return Value(x / y);
      case BinaryOp::kFloorDiv:
        if (y == 0) return invalid_argument("integer division or modulo by zero");
        if (!ints) return Value(std::floor(x / y));
        if (a.as_int() == INT64_MIN && b.as_int() == -1) break;
        return Value(floor_div(a.as_int(), b.as_int()));
      case BinaryOp::kMod:
        if (y == 0) return invalid_argument("integer division or modulo by zero");
        if (!ints) {
          double m = std::fmod(x, y);
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value(m);
        }
        if (b.as_int() == -1) return Value(int64_t{0});
        return Value(floor_mod(a.as_int(), b.as_int()));
      case BinaryOp::kPow: {
        if (!ints || b.as_int() < 0) {
          if (x == 0 && y < 0) return invalid_argument("0.0 cannot be raised to a negative power");
          return Value(std::pow(x, y));
        }
        int64_t base = a.as_int();
        int64_t e = b.as_int();
        int64_t acc = 1;
        bool overflow = false;
        while (e > 0 && !overflow) {
          if (e & 1) overflow |= __builtin_mul_overflow(acc, base, &acc);
          e >>= 1;
          if (e > 0) overflow |= __builtin_mul_overflow(base, base, &base);
        }
        if (overflow) break;
        return Value(acc);
      }
    }
    return out_of_range("integer overflow in " + std::to_string(a.as_int()) + " " +
                        std::string(name) + " " + std::to_string(b.as_int()) +
                        " (ints are 64-bit here)");
  }
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      const size_t n = a.as_string().size() + b.as_string().size();
      STRATA_RETURN_IF_ERROR(in.check_string(n));
      STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(n / 64)));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_string()) {
      return invalid_argument("can only concatenate str (not \"" + std::string(b.type_name()) +
                              "\") to str");
    }
    if (a.is_list() && b.is_list() && a.list_shape() == b.list_shape() &&
        a.list_shape() != ListData::Shape::kGenerator) {
      std::vector<Value> out = a.as_list();
      const auto& more = b.as_list();
      STRATA_RETURN_IF_ERROR(in.check_items(out.size() + more.size()));
      STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(out.size() + more.size())));
      out.insert(out.end(), more.begin(), more.end());
      return a.list_shape() == ListData::Shape::kTuple ? Value::tuple(std::move(out))
                                                       : Value::list(std::move(out));
    }
  }
  if (op == BinaryOp::kMul) {
    const bool a_seq =
        a.is_string() || (a.is_list() && a.list_shape() != ListData::Shape::kGenerator);
    const bool b_seq =
        b.is_string() || (b.is_list() && b.list_shape() != ListData::Shape::kGenerator);
    if (a_seq && is_intlike(b)) return repeat(in, a, b.as_int());
    if (b_seq && is_intlike(a)) return repeat(in, b, a.as_int());
  }
  if (op == BinaryOp::kMod && a.is_string()) return percent_format(in, a.as_string(), b);
  return bad_operands(name, a, b);
}

// Python's slice.indices(): the positions a[start:stop:step] visits.
Result<std::vector<size_t>> slice_positions(size_t length, const Value& start, const Value& stop,
                                            const Value& step) {
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !v->is_undefined() && !is_intlike(*v)) {
      return invalid_argument("slice indices must be integers or None");
    }
  }
  const auto n = static_cast<int64_t>(length);
  const int64_t st = is_intlike(step) ? step.as_int() : 1;
  if (st == 0) return invalid_argument("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (!is_intlike(v)) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  const int64_t e = adjust(stop, st < 0 ? -1 : n);
  std::vector<size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<size_t>(i));
  return out;
}

Result<Value> slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop,
                    const Value& step) {
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const bool ascii = is_ascii(s);
    const std::vector<size_t> offsets = ascii ? std::vector<size_t>() : code_point_offsets(s);
    const size_t n = ascii ? s.size() : offsets.size() - 1;
    STRATA_ASSIGN_OR_RETURN(std::vector<size_t> pos, slice_positions(n, start, stop, step));
    STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(pos.size() / 64)));
    std::string out;
    for (size_t p : pos) {
      if (ascii) {
        out += s[p];
      } else {
        out.append(s, offsets[p], offsets[p + 1] - offsets[p]);
      }
    }
    return Value(std::move(out));
  }
  if (obj.is_list() && obj.list_shape() != ListData::Shape::kGenerator) {
    const auto& items = obj.as_list();
    STRATA_ASSIGN_OR_RETURN(std::vector<size_t> pos,
                            slice_positions(items.size(), start, stop, step));
    STRATA_RETURN_IF_ERROR(in.charge(1 + static_cast<int64_t>(pos.size())));
    std::vector<Value> out;
    out.reserve(pos.size());
    for (size_t p : pos) out.push_back(items[p]);
    return obj.list_shape() == ListData::Shape::kTuple ? Value::tuple(std::move(out))
                                                       : Value::list(std::move(out));
  }
  if (obj.is_undefined()) return undefined_error(obj);
  return Value::undefined("'" + std::string(obj.type_name()) + "' object is not subscriptable");
}

// The object as jinja2's undefined messages name it: 'dict object', 'str object'.
std::string object_name(const Value& v) {
  if (v.is_none()) return "None";
  return std::string(v.type_name()) + " object";
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return invalid_argument("'in <string>' requires string as left operand, not " +
                                std::string(item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list()) {
        if (v == item) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (!Dict::key_ok(item) && !item.is_undefined()) {
        return invalid_argument("unhashable type: '" + std::string(item.type_name()) + "'");
      }
      return container.as_dict().contains(item);
    default:
      return invalid_argument("argument of type '" + std::string(container.type_name()) +
                              "' is not iterable");
  }
}

}  // namespace

Result<Value> Interpreter::lookup(std::string_view name) const {
  for (const Frame* f = frame_.get(); f != nullptr; f = f->parent.get()) {
    if (const Value* v = f->find(name)) return *v;
  }
  if (const Value* v = context_.find(name)) return *v;
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + std::string(name) + "' is undefined");
}

Result<Value> Interpreter::getattr(const Value& object, std::string_view name) {
  if (object.is_undefined()) return undefined_error(object);
  if (object.is_object()) return object.as_object()->attr(name);
  if (!name.empty() && name[0] == '_') {
    // The sandbox hides every attribute that starts with '_' (a dict's keys stay reachable).
    if (object.is_dict()) {
      if (const Value* v = object.as_dict().find(name)) return *v;
    }
    return Value::undefined("access to attribute '" + std::string(name) + "' of '" +
                            std::string(object.type_name()) + "' object is unsafe");
  }
  if (auto method = find_method(object, name)) return Value(std::move(method));
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(name)) return *v;
  }
  return Value::undefined("'" + object_name(object) + "' has no attribute '" + std::string(name) +
                          "'");
}

Result<Value> Interpreter::getitem(const Value& object, const Value& key) {
  if (object.is_undefined()) return undefined_error(object);
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(key)) return *v;
  } else if (object.is_list() && is_intlike(key) &&
             object.list_shape() != ListData::Shape::kGenerator) {
    const auto& items = object.as_list();
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
    return Value::undefined(object_name(object) + " has no element " +
                            std::to_string(key.as_int()));
  } else if (object.is_string() && is_intlike(key)) {
    const std::string& s = object.as_string();
    const std::vector<size_t> offsets = code_point_offsets(s);
    const auto n = static_cast<int64_t>(offsets.size() - 1);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      const auto at = static_cast<size_t>(i);
      return Value(s.substr(offsets[at], offsets[at + 1] - offsets[at]));
    }
    return Value::undefined(object_name(object) + " has no element " +
                            std::to_string(key.as_int()));
  } else if (object.is_object() && key.is_string()) {
    return object.as_object()->attr(key.as_string());
  }
  if (key.is_string()) {
    if (key.as_string().empty() || key.as_string()[0] != '_') {
      if (auto method = find_method(object, key.as_string())) return Value(std::move(method));
    }
    return Value::undefined("'" + object_name(object) + "' has no attribute '" + key.as_string() +
                            "'");
  }
  return Value::undefined("'" + object_name(object) + "' has no element " + to_repr(key));
}

Result<Value> Interpreter::eval(const Expr& e) {
  Depth depth(*this);
  STRATA_RETURN_IF_ERROR(at(e.offset, depth.check()));
  Result<Value> v = eval_inner(e);
  if (!v) return at(e.offset, v.status());
  if (v->depth() > limits_.max_value_depth) {
    return at(e.offset,
              out_of_range("lists and dicts nested deeper than " +
                           std::to_string(limits_.max_value_depth) + " levels (max_value_depth)"));
  }
  return v;
}

Result<Args> Interpreter::eval_args(const CallArgs& call) {
  Args args;
  for (const ExprPtr& e : call.positional) {
    STRATA_ASSIGN_OR_RETURN(Value v, eval(*e));
    args.positional.push_back(std::move(v));
  }
  if (call.star_args) {
    STRATA_ASSIGN_OR_RETURN(Value v, eval(*call.star_args));
    STRATA_ASSIGN_OR_RETURN(std::vector<Value> more, iterate(v));
    for (Value& m : more) args.positional.push_back(std::move(m));
  }
  for (const auto& [name, e] : call.named) {
    STRATA_ASSIGN_OR_RETURN(Value v, eval(*e));
    args.named.emplace_back(name, std::move(v));
  }
  if (call.star_kwargs) {
    STRATA_ASSIGN_OR_RETURN(Value v, eval(*call.star_kwargs));
    if (!v.is_dict()) return invalid_argument("argument after ** must be a mapping");
    for (const auto& [k, val] : v.as_dict().items()) {
      if (!k.is_string()) return invalid_argument("keywords must be strings");
      args.named.emplace_back(k.as_string(), val);
    }
  }
  return args;
}

Result<Value> Interpreter::eval_filter(const FilterExpr& f, const Value* block_input) {
  Value input;
  if (f.input == nullptr) {
    input = *block_input;
  } else if (f.input->kind == ExprKind::kFilter && block_input != nullptr) {
    STRATA_ASSIGN_OR_RETURN(input,
                            eval_filter(static_cast<const FilterExpr&>(*f.input), block_input));
  } else {
    STRATA_ASSIGN_OR_RETURN(input, eval(*f.input));
  }
  if (f.fn == nullptr) return invalid_argument("no filter named '" + f.name + "'");
  STRATA_ASSIGN_OR_RETURN(Args args, eval_args(f.args));
  Result<Value> v = f.fn(*this, input, args);
  if (!v) return at(f.offset, v.status());
  return v;
}

Result<Value> Interpreter::eval_compare(const CompareExpr& c) {
  STRATA_ASSIGN_OR_RETURN(Value left, eval(*c.first));
  for (const auto& [op, expr] : c.rest) {
    STRATA_ASSIGN_OR_RETURN(Value right, eval(*expr));
    bool ok = false;
    switch (op) {
      case CompareOp::kEq:
        ok = left == right;
        break;
      case CompareOp::kNe:
        ok = !(left == right);
        break;
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        STRATA_ASSIGN_OR_RETURN(bool in, contains(right, left));
        ok = in == (op == CompareOp::kIn);
        break;
      }
      default: {
        STRATA_ASSIGN_OR_RETURN(int cmp, compare(left, right));
        ok = op == CompareOp::kLt   ? cmp < 0
             : op == CompareOp::kLe ? cmp <= 0
             : op == CompareOp::kGt ? cmp > 0
                                    : cmp >= 0;
      }
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Result<Value> Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return static_cast<const ConstExpr&>(e).value;
    case ExprKind::kName:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      const auto& items = static_cast<const ItemsExpr&>(e).items;
      std::vector<Value> out;
      out.reserve(items.size());
      for (const ExprPtr& i : items) {
        STRATA_ASSIGN_OR_RETURN(Value v, eval(*i));
        out.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(out)) : Value::tuple(std::move(out));
    }
    case ExprKind::kDict: {
      Dict d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).pairs) {
        STRATA_ASSIGN_OR_RETURN(Value key, eval(*k));
        if (!Dict::key_ok(key)) {
          return invalid_argument("unhashable type: '" + std::string(key.type_name()) + "'");
        }
        STRATA_ASSIGN_OR_RETURN(Value value, eval(*v));
        d.set(std::move(key), std::move(value));
      }
      return Value(std::move(d));
    }
    case ExprKind::kGetAttr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value obj, eval(*g.object));
      return getattr(obj, g.name);
    }
    case ExprKind::kGetItem: {
      const auto& g = static_cast<const GetItemExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value obj, eval(*g.object));
      if (g.index->kind == ExprKind::kSlice) {
        const auto& s = static_cast<const SliceExpr&>(*g.index);
        Value bounds[3];
        const Expr* parts[3] = {s.start.get(), s.stop.get(), s.step.get()};
        for (int i = 0; i < 3; ++i) {
          if (parts[i] == nullptr) {
            bounds[i] = Value::none();
          } else {
            STRATA_ASSIGN_OR_RETURN(bounds[i], eval(*parts[i]));
          }
        }
        return slice(*this, obj, bounds[0], bounds[1], bounds[2]);
      }
      STRATA_ASSIGN_OR_RETURN(Value key, eval(*g.index));
      return getitem(obj, key);
    }
    case ExprKind::kSlice:
      return invalid_argument("a slice outside of a subscript");
    case ExprKind::kCall: {
      const auto& c = static_cast<const CallExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value callee, eval(*c.callee));
      STRATA_ASSIGN_OR_RETURN(Args args, eval_args(c.args));
      return call(callee, args);
    }
    case ExprKind::kFilter:
      return eval_filter(static_cast<const FilterExpr&>(e), nullptr);
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value input, eval(*t.input));
      if (t.fn == nullptr) return invalid_argument("no test named '" + t.name + "'");
      STRATA_ASSIGN_OR_RETURN(Args args, eval_args(t.args));
      STRATA_ASSIGN_OR_RETURN(bool yes, t.fn(*this, input, args));
      return Value(yes);
    }
    case ExprKind::kNot: {
      STRATA_ASSIGN_OR_RETURN(Value v, eval(*static_cast<const UnaryExpr&>(e).operand));
      return Value(!v.truthy());
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      STRATA_ASSIGN_OR_RETURN(Value v, eval(*static_cast<const UnaryExpr&>(e).operand));
      if (v.is_undefined()) return undefined_error(v);
      const bool neg = e.kind == ExprKind::kNeg;
      if (v.is_float()) return Value(neg ? -v.as_float() : v.as_float());
      if (is_intlike(v)) {
        if (neg && v.as_int() == INT64_MIN) return out_of_range("integer overflow in unary -");
        return Value(neg ? -v.as_int() : v.as_int());
      }
      return invalid_argument(std::string("bad operand type for unary ") + (neg ? "-" : "+") +
                              ": '" + std::string(v.type_name()) + "'");
    }
    case ExprKind::kBinary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value l, eval(*b.left));
      STRATA_ASSIGN_OR_RETURN(Value r, eval(*b.right));
      return arithmetic(*this, b.op, l, r);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      // Python returns an operand, not a bool: `a or 'x'` is a when a is true.
      const auto& b = static_cast<const BinaryExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value l, eval(*b.left));
      if (l.truthy() == (e.kind == ExprKind::kOr)) return l;
      return eval(*b.right);
    }
    case ExprKind::kConcat: {
      // Sizes first: a concatenation past the limit fails before it allocates.
      const auto& parts = static_cast<const ConcatExpr&>(e).parts;
      std::vector<Value> texts;
      texts.reserve(parts.size());
      size_t total = 0;
      for (const ExprPtr& p : parts) {
        STRATA_ASSIGN_OR_RETURN(Value v, eval(*p));
        if (!v.is_string()) v = Value(to_str(v));
        total += v.as_string().size();
        STRATA_RETURN_IF_ERROR(check_string(total));
        texts.push_back(std::move(v));
      }
      STRATA_RETURN_IF_ERROR(charge(1 + static_cast<int64_t>(total / 64)));
      std::string out;
      out.reserve(total);
      for (const Value& t : texts) out += t.as_string();
      return Value(std::move(out));
    }
    case ExprKind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::kCond: {
      const auto& c = static_cast<const CondExpr&>(e);
      STRATA_ASSIGN_OR_RETURN(Value test, eval(*c.test));
      if (test.truthy()) return eval(*c.then);
      if (c.otherwise) return eval(*c.otherwise);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section "
          "was defined");
    }
  }
  return internal_error("unknown expression kind");
}

}  // namespace strata::jinja
