// Expressions, with jinja2's precedence (parser.py): each level a function.
#include "jinja/parser_internal.h"

namespace strata::jinja {

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

Result<ExprPtr> Parser::parse_condexpr() {
  Nest nest(depth_);
  STRATA_RETURN_IF_ERROR(check_nesting(cur()));
  STRATA_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
  while (is_name("if")) {
    const uint32_t at = cur().offset;
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
    ExprPtr otherwise;
    if (skip_name("else")) {
      STRATA_ASSIGN_OR_RETURN(otherwise, parse_condexpr());
    }
    auto c = std::make_unique<CondExpr>(at, std::move(test), std::move(expr), std::move(otherwise));
    STRATA_RETURN_IF_ERROR(grow(*c, c->test.get()));
    STRATA_RETURN_IF_ERROR(grow(*c, c->then.get()));
    STRATA_RETURN_IF_ERROR(grow(*c, c->otherwise.get()));
    expr = std::move(c);
  }
  return expr;
}

Result<ExprPtr> Parser::binary(ExprKind kind, BinaryOp op, ExprPtr left, ExprPtr right) {
  const uint32_t at = left->offset;
  auto b = std::make_unique<BinaryExpr>(kind, at, op, std::move(left), std::move(right));
  STRATA_RETURN_IF_ERROR(grow(*b, b->left.get()));
  STRATA_RETURN_IF_ERROR(grow(*b, b->right.get()));
  return ExprPtr(std::move(b));
}

Result<ExprPtr> Parser::parse_or() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (skip_name("or")) {
    STRATA_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    STRATA_ASSIGN_OR_RETURN(
        left, binary(ExprKind::kOr, BinaryOp::kAdd, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_and() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (skip_name("and")) {
    STRATA_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    STRATA_ASSIGN_OR_RETURN(
        left, binary(ExprKind::kAnd, BinaryOp::kAdd, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::unary(ExprKind kind, uint32_t at, ExprPtr operand) {
  auto u = std::make_unique<UnaryExpr>(kind, at, std::move(operand));
  STRATA_RETURN_IF_ERROR(grow(*u, u->operand.get()));
  return ExprPtr(std::move(u));
}

Result<ExprPtr> Parser::parse_not() {
  if (is_name("not")) {
    Nest nest(depth_);
    STRATA_RETURN_IF_ERROR(check_nesting(cur()));
    const uint32_t at = cur().offset;
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    return unary(ExprKind::kNot, at, std::move(operand));
  }
  return parse_compare();
}

Result<ExprPtr> Parser::parse_compare() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    CompareOp op;
    const Token& t = cur();
    if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text == "=="   ? CompareOp::kEq
           : t.text == "!=" ? CompareOp::kNe
           : t.text == "<"  ? CompareOp::kLt
           : t.text == "<=" ? CompareOp::kLe
           : t.text == ">"  ? CompareOp::kGt
                            : CompareOp::kGe;
      next();
    } else if (is_name("in")) {
      op = CompareOp::kIn;
      next();
    } else if (is_name("not") && look().kind == TokenKind::kName && look().text == "in") {
      op = CompareOp::kNotIn;
      next();
      next();
    } else {
      break;
    }
    STRATA_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
    if (!cmp) cmp = std::make_unique<CompareExpr>(first->offset, std::move(first));
    STRATA_RETURN_IF_ERROR(grow(*cmp, cmp->first.get()));
    STRATA_RETURN_IF_ERROR(grow(*cmp, operand.get()));
    cmp->rest.emplace_back(op, std::move(operand));
  }
  if (cmp) return ExprPtr(std::move(cmp));
  return first;
}

Result<ExprPtr> Parser::parse_math1() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (is_op("+") || is_op("-")) {
    const BinaryOp op = is_op("+") ? BinaryOp::kAdd : BinaryOp::kSub;
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    STRATA_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, op, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_concat() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
  if (!is_op("~")) return first;
  auto c = std::make_unique<ConcatExpr>(first->offset);
  STRATA_RETURN_IF_ERROR(grow(*c, first.get()));
  c->parts.push_back(std::move(first));
  while (skip_op("~")) {
    STRATA_ASSIGN_OR_RETURN(ExprPtr part, parse_math2());
    STRATA_RETURN_IF_ERROR(grow(*c, part.get()));
    c->parts.push_back(std::move(part));
  }
  return ExprPtr(std::move(c));
}

Result<ExprPtr> Parser::parse_math2() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const BinaryOp op = is_op("*")    ? BinaryOp::kMul
                        : is_op("/")  ? BinaryOp::kDiv
                        : is_op("//") ? BinaryOp::kFloorDiv
                                      : BinaryOp::kMod;
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    STRATA_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, op, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_pow() {
  STRATA_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (skip_op("**")) {
    STRATA_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    STRATA_ASSIGN_OR_RETURN(
        left, binary(ExprKind::kBinary, BinaryOp::kPow, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    Nest nest(depth_);
    STRATA_RETURN_IF_ERROR(check_nesting(cur()));
    const ExprKind kind = is_op("-") ? ExprKind::kNeg : ExprKind::kPos;
    const uint32_t at = cur().offset;
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    STRATA_ASSIGN_OR_RETURN(node, unary(kind, at, std::move(operand)));
  } else {
    STRATA_ASSIGN_OR_RETURN(node, parse_primary());
  }
  STRATA_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    STRATA_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> Parser::parse_primary() {
  const Token& t = cur();
  switch (t.kind) {
    case TokenKind::kName: {
      next();
      if (t.text == "true" || t.text == "True") return const_expr(t.offset, Value(true));
      if (t.text == "false" || t.text == "False") return const_expr(t.offset, Value(false));
      if (t.text == "none" || t.text == "None") return const_expr(t.offset, Value::none());
      return ExprPtr(std::make_unique<NameExpr>(t.offset, t.text));
    }
    case TokenKind::kString: {
      // Adjacent literals join, as in Python: 'a' "b" is 'ab'.
      std::string s = t.text;
      next();
      while (cur().kind == TokenKind::kString) {
        s += cur().text;
        next();
      }
      return const_expr(t.offset, Value(std::move(s)));
    }
    case TokenKind::kInteger:
      next();
      return const_expr(t.offset, Value(t.int_value));
    case TokenKind::kFloat:
      next();
      return const_expr(t.offset, Value(t.float_value));
    default:
      break;
  }
  if (is_op("(")) {
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, {}, true));
    STRATA_RETURN_IF_ERROR(expect_op(")"));
    return e;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  return fail(t, "unexpected " + describe(t));
}

ExprPtr Parser::const_expr(uint32_t at, Value v) {
  return std::make_unique<ConstExpr>(at, std::move(v));
}

// Expressions separated by commas: a tuple when there is a comma, else the one expression.
Result<ExprPtr> Parser::parse_tuple(bool with_condexpr,
                                    std::initializer_list<std::string_view> extra_end,
                                    bool explicit_parentheses) {
  auto tuple = std::make_unique<ItemsExpr>(ExprKind::kTuple, cur().offset);
  bool is_tuple = false;
  while (true) {
    if (!tuple->items.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    if (is_tuple_end(extra_end)) break;
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
    STRATA_RETURN_IF_ERROR(grow(*tuple, e.get()));
    tuple->items.push_back(std::move(e));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!tuple->items.empty()) return std::move(tuple->items[0]);
    if (!explicit_parentheses) {
      return fail(cur(), "expected an expression, got " + describe(cur()));
    }
  }
  return ExprPtr(std::move(tuple));
}

Result<ExprPtr> Parser::parse_list() {
  auto list = std::make_unique<ItemsExpr>(ExprKind::kList, cur().offset);
  next();
  while (!is_op("]")) {
    if (!list->items.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    if (is_op("]")) break;
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
    STRATA_RETURN_IF_ERROR(grow(*list, e.get()));
    list->items.push_back(std::move(e));
  }
  STRATA_RETURN_IF_ERROR(expect_op("]"));
  return ExprPtr(std::move(list));
}

Result<ExprPtr> Parser::parse_dict() {
  auto dict = std::make_unique<DictExpr>(cur().offset);
  next();
  while (!is_op("}")) {
    if (!dict->pairs.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    if (is_op("}")) break;
    STRATA_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
    STRATA_RETURN_IF_ERROR(expect_op(":"));
    STRATA_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    STRATA_RETURN_IF_ERROR(grow(*dict, key.get()));
    STRATA_RETURN_IF_ERROR(grow(*dict, value.get()));
    dict->pairs.emplace_back(std::move(key), std::move(value));
  }
  STRATA_RETURN_IF_ERROR(expect_op("}"));
  return ExprPtr(std::move(dict));
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      STRATA_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (is_op("(")) {
      STRATA_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      STRATA_ASSIGN_OR_RETURN(node, parse_filters(std::move(node), false));
    } else if (is_name("is")) {
      STRATA_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (is_op("(")) {
      STRATA_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr node) {
  const Token& t = cur();
  next();
  if (t.text == ".") {
    const Token& attr = cur();
    next();
    if (attr.kind == TokenKind::kName) {
      auto g = std::make_unique<GetAttrExpr>(t.offset, std::move(node), attr.text);
      STRATA_RETURN_IF_ERROR(grow(*g, g->object.get()));
      return ExprPtr(std::move(g));
    }
    if (attr.kind != TokenKind::kInteger) return fail(attr, "expected a name or number after '.'");
    auto g = std::make_unique<GetItemExpr>(t.offset, std::move(node),
                                           const_expr(attr.offset, Value(attr.int_value)));
    STRATA_RETURN_IF_ERROR(grow(*g, g->object.get()));
    return ExprPtr(std::move(g));
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    STRATA_ASSIGN_OR_RETURN(ExprPtr a, parse_subscribed());
    args.push_back(std::move(a));
  }
  STRATA_RETURN_IF_ERROR(expect_op("]"));
  if (args.empty()) return fail(t, "expected a subscript expression");
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args[0]);
  } else {
    auto tuple = std::make_unique<ItemsExpr>(ExprKind::kTuple, t.offset);
    for (ExprPtr& a : args) {
      STRATA_RETURN_IF_ERROR(grow(*tuple, a.get()));
      tuple->items.push_back(std::move(a));
    }
    index = std::move(tuple);
  }
  auto g = std::make_unique<GetItemExpr>(t.offset, std::move(node), std::move(index));
  STRATA_RETURN_IF_ERROR(grow(*g, g->object.get()));
  STRATA_RETURN_IF_ERROR(grow(*g, g->index.get()));
  return ExprPtr(std::move(g));
}

Result<ExprPtr> Parser::parse_subscribed() {
  const uint32_t at = cur().offset;
  ExprPtr start;
  if (!is_op(":")) {
    STRATA_ASSIGN_OR_RETURN(start, parse_expression(true));
    if (!is_op(":")) return start;
  }
  next();  // the ':'
  auto slice = std::make_unique<SliceExpr>(at);
  slice->start = std::move(start);
  if (!is_op(":") && !is_op("]") && !is_op(",")) {
    STRATA_ASSIGN_OR_RETURN(slice->stop, parse_expression(true));
  }
  if (skip_op(":") && !is_op("]") && !is_op(",")) {
    STRATA_ASSIGN_OR_RETURN(slice->step, parse_expression(true));
  }
  STRATA_RETURN_IF_ERROR(grow(*slice, slice->start.get()));
  STRATA_RETURN_IF_ERROR(grow(*slice, slice->stop.get()));
  STRATA_RETURN_IF_ERROR(grow(*slice, slice->step.get()));
  return ExprPtr(std::move(slice));
}

Status Parser::parse_call_args(CallArgs& args) {
  const Token& open = cur();
  STRATA_RETURN_IF_ERROR(expect_op("("));
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      STRATA_RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
    }
    if (skip_op("*")) {
      if (args.star_args || args.star_kwargs) return fail(open, "invalid syntax for a call");
      STRATA_ASSIGN_OR_RETURN(args.star_args, parse_expression(true));
    } else if (skip_op("**")) {
      if (args.star_kwargs) return fail(open, "invalid syntax for a call");
      STRATA_ASSIGN_OR_RETURN(args.star_kwargs, parse_expression(true));
    } else if (cur().kind == TokenKind::kName && look().kind == TokenKind::kOperator &&
               look().text == "=") {
      if (args.star_kwargs) return fail(open, "invalid syntax for a call");
      std::string key = cur().text;
      next();
      next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      args.named.emplace_back(std::move(key), std::move(value));
    } else {
      if (args.star_args || args.star_kwargs || !args.named.empty()) {
        return fail(cur(), "positional argument after keyword arguments");
      }
      STRATA_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      args.positional.push_back(std::move(value));
    }
    require_comma = true;
  }
  return expect_op(")");
}

Result<ExprPtr> Parser::parse_call(ExprPtr callee) {
  auto c = std::make_unique<CallExpr>(cur().offset, std::move(callee));
  STRATA_RETURN_IF_ERROR(parse_call_args(c->args));
  STRATA_RETURN_IF_ERROR(grow(*c, c->callee.get()));
  STRATA_RETURN_IF_ERROR(grow_args(*c, c->args));
  return ExprPtr(std::move(c));
}

// `| f(args) | g ...` after `node` (null in filter blocks); `start_inline`: the first filter
// has no '|' before it ({% filter upper %}).
Result<ExprPtr> Parser::parse_filters(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const uint32_t at = cur().offset;
    STRATA_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      STRATA_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    auto f = std::make_unique<FilterExpr>(at, std::move(node), std::move(name));
    if (is_op("(")) STRATA_RETURN_IF_ERROR(parse_call_args(f->args));
    STRATA_RETURN_IF_ERROR(grow(*f, f->input.get()));
    STRATA_RETURN_IF_ERROR(grow_args(*f, f->args));
    node = std::move(f);
  }
  return node;
}

Result<ExprPtr> Parser::parse_test(ExprPtr node) {
  const uint32_t at = cur().offset;
  next();  // 'is'
  const bool negated = skip_name("not");
  STRATA_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (skip_op(".")) {
    STRATA_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += "." + part;
  }
  auto t = std::make_unique<TestExpr>(at, std::move(node), std::move(name));
  const Token& c = cur();
  const bool arg_start = c.kind == TokenKind::kName || c.kind == TokenKind::kString ||
                         c.kind == TokenKind::kInteger || c.kind == TokenKind::kFloat ||
                         is_op("[") || is_op("{");
  if (is_op("(")) {
    STRATA_RETURN_IF_ERROR(parse_call_args(t->args));
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    // `x is divisibleby 3`: one argument without parentheses.
    if (is_name("is")) return fail(c, "you cannot chain multiple tests with 'is'");
    STRATA_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    STRATA_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    t->args.positional.push_back(std::move(arg));
  }
  STRATA_RETURN_IF_ERROR(grow(*t, t->input.get()));
  STRATA_RETURN_IF_ERROR(grow_args(*t, t->args));
  if (!negated) return ExprPtr(std::move(t));
  return unary(ExprKind::kNot, at, std::move(t));
}

}  // namespace strata::jinja
