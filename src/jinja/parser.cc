#include "jinja/parser.h"

#include <initializer_list>

#include "jinja/parser_internal.h"

namespace strata::jinja {
namespace {

// Tags that jinja2 has and this engine does not: a clear error rather than "unknown tag".
constexpr std::string_view kUnsupportedTags[] = {"extends", "block", "include",
                                                 "import",  "from",  "autoescape"};

}  // namespace

// Statements until a block tag named in `end` (left as the current token) or the end.
Result<Body> Parser::subparse(std::initializer_list<std::string_view> end) {
  Body body;
  while (cur().kind != TokenKind::kEof) {
    const Token& t = cur();
    if (t.kind == TokenKind::kData) {
      body.push_back(std::make_unique<DataStmt>(t.offset, t.text));
      next();
    } else if (t.kind == TokenKind::kVariableBegin) {
      next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, {}, false));
      body.push_back(std::make_unique<PrintStmt>(t.offset, std::move(e)));
      STRATA_RETURN_IF_ERROR(expect_kind(TokenKind::kVariableEnd, "'}}'"));
    } else if (t.kind == TokenKind::kBlockBegin) {
      next();
      for (std::string_view e : end) {
        if (is_name(e)) return body;
      }
      STRATA_ASSIGN_OR_RETURN(StmtPtr s, parse_statement(end));
      if (s) body.push_back(std::move(s));
      STRATA_RETURN_IF_ERROR(expect_kind(TokenKind::kBlockEnd, "'%}'"));
    } else {
      return fail(t, "unexpected " + describe(t));
    }
  }
  return body;
}

// A body up to one of `end`; the current token is then that end name. `open` is where the
// block's tag starts, for the error when the template ends first.
Result<Body> Parser::parse_body(std::initializer_list<std::string_view> end, std::string_view block,
                                uint32_t open) {
  skip_op(":");
  STRATA_RETURN_IF_ERROR(expect_kind(TokenKind::kBlockEnd, "'%}'"));
  STRATA_ASSIGN_OR_RETURN(Body body, subparse(end));
  if (cur().kind == TokenKind::kEof) {
    std::string names;
    for (std::string_view e : end) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
    return fail(cur(), "unexpected end of template: the '" + std::string(block) +
                           "' block opened at " + source_position(src_, open) + " needs " + names);
  }
  return body;
}

Result<StmtPtr> Parser::parse_statement(std::initializer_list<std::string_view> enclosing_end) {
  Nest nest(depth_);
  const Token& t = cur();
  STRATA_RETURN_IF_ERROR(check_nesting(t));
  if (t.kind != TokenKind::kName) return fail(t, "tag name expected, got " + describe(t));
  const std::string tag = t.text;
  if (tag == "for") return parse_for();
  if (tag == "if") return parse_if();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "call") return parse_call_block();
  if (tag == "filter") return parse_filter_block();
  if (tag == "with") return parse_with();
  if (tag == "print") {
    next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, {}, false));
    return StmtPtr(std::make_unique<PrintStmt>(t.offset, std::move(e)));
  }
  if (tag == "generation") {
    next();
    auto s = std::make_unique<ScopeStmt>(t.offset);
    STRATA_ASSIGN_OR_RETURN(s->body, parse_body({"endgeneration"}, "generation", s->offset));
    next();
    return StmtPtr(std::move(s));
  }
  if (tag == "break" || tag == "continue") {
    if (loops_ == 0) return fail(t, "'" + tag + "' outside a loop");
    next();
    return StmtPtr(
        std::make_unique<Stmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, t.offset));
  }
  for (std::string_view u : kUnsupportedTags) {
    if (tag == u) return fail(t, "the '" + tag + "' tag is not supported");
  }
  std::string expected;
  for (std::string_view e : enclosing_end) {
    expected += (expected.empty() ? " (expected '" : "' or '") + std::string(e);
  }
  if (!expected.empty()) expected += "')";
  return fail(t, "unknown tag '" + tag + "'" + expected);
}

Result<StmtPtr> Parser::parse_for() {
  auto s = std::make_unique<ForStmt>(cur().offset);
  next();
  STRATA_ASSIGN_OR_RETURN(s->target, parse_target({"in"}, false));
  if (!skip_name("in")) return fail(cur(), "expected 'in', got " + describe(cur()));
  STRATA_ASSIGN_OR_RETURN(s->iter, parse_tuple(false, {"recursive"}, false));
  if (skip_name("if")) {
    STRATA_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
  }
  if (is_name("recursive")) return fail(cur(), "recursive loops are not supported");
  {
    LoopScope scope(loops_, loops_ + 1);
    STRATA_ASSIGN_OR_RETURN(s->body, parse_body({"endfor", "else"}, "for", s->offset));
  }
  const bool has_else = is_name("else");
  next();
  if (has_else) {
    STRATA_ASSIGN_OR_RETURN(s->otherwise, parse_body({"endfor"}, "for", s->offset));
    next();
  }
  return StmtPtr(std::move(s));
}

Result<StmtPtr> Parser::parse_if() {
  auto s = std::make_unique<IfStmt>(cur().offset);
  next();
  while (true) {
    STRATA_ASSIGN_OR_RETURN(ExprPtr test, parse_tuple(false, {}, false));
    STRATA_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}, "if", s->offset));
    s->branches.emplace_back(std::move(test), std::move(body));
    if (is_name("elif")) {
      next();
      continue;
    }
    if (is_name("else")) {
      next();
      STRATA_ASSIGN_OR_RETURN(s->otherwise, parse_body({"endif"}, "if", s->offset));
    }
    next();
    return StmtPtr(std::move(s));
  }
}

Result<StmtPtr> Parser::parse_set() {
  const uint32_t at = cur().offset;
  next();
  STRATA_ASSIGN_OR_RETURN(Target target, parse_target({}, true));
  if (skip_op("=")) {
    auto s = std::make_unique<SetStmt>(at);
    s->target = std::move(target);
    STRATA_ASSIGN_OR_RETURN(s->value, parse_tuple(true, {}, false));
    return StmtPtr(std::move(s));
  }
  auto s = std::make_unique<SetBlockStmt>(at);
  s->target = std::move(target);
  STRATA_ASSIGN_OR_RETURN(s->filter, parse_filters(nullptr, false));
  STRATA_ASSIGN_OR_RETURN(s->body, parse_body({"endset"}, "set", s->offset));
  next();
  return StmtPtr(std::move(s));
}

Status Parser::parse_signature(MacroStmt& m) {
  STRATA_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (!m.params.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    STRATA_ASSIGN_OR_RETURN(std::string name, expect_name());
    if (skip_op("=")) {
      STRATA_ASSIGN_OR_RETURN(ExprPtr d, parse_expression(true));
      m.defaults.push_back(std::move(d));
    } else if (!m.defaults.empty()) {
      return fail(cur(), "non-default argument follows default argument");
    }
    m.params.push_back(std::move(name));
  }
  return expect_op(")");
}

Result<StmtPtr> Parser::parse_macro() {
  auto s = std::make_unique<MacroStmt>(cur().offset);
  next();
  STRATA_ASSIGN_OR_RETURN(s->name, expect_name());
  STRATA_RETURN_IF_ERROR(parse_signature(*s));
  LoopScope scope(loops_, 0);
  STRATA_ASSIGN_OR_RETURN(s->body, parse_body({"endmacro"}, "macro", s->offset));
  next();
  return StmtPtr(std::move(s));
}

Result<StmtPtr> Parser::parse_call_block() {
  auto s = std::make_unique<CallBlockStmt>(cur().offset);
  next();
  s->caller = std::make_unique<MacroStmt>(s->offset);
  s->caller->name = "caller";
  if (is_op("(")) STRATA_RETURN_IF_ERROR(parse_signature(*s->caller));
  STRATA_ASSIGN_OR_RETURN(s->call, parse_expression(true));
  if (s->call->kind != ExprKind::kCall) return fail(s->call->offset, "expected a call");
  LoopScope scope(loops_, 0);
  STRATA_ASSIGN_OR_RETURN(s->caller->body, parse_body({"endcall"}, "call", s->offset));
  next();
  return StmtPtr(std::move(s));
}

Result<StmtPtr> Parser::parse_filter_block() {
  auto s = std::make_unique<FilterBlockStmt>(cur().offset);
  next();
  STRATA_ASSIGN_OR_RETURN(s->filter, parse_filters(nullptr, true));
  STRATA_ASSIGN_OR_RETURN(s->body, parse_body({"endfilter"}, "filter", s->offset));
  next();
  return StmtPtr(std::move(s));
}

Result<StmtPtr> Parser::parse_with() {
  auto s = std::make_unique<WithStmt>(cur().offset);
  next();
  while (cur().kind != TokenKind::kBlockEnd) {
    if (!s->assignments.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    STRATA_ASSIGN_OR_RETURN(Target target, parse_target({}, false));
    STRATA_RETURN_IF_ERROR(expect_op("="));
    STRATA_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    s->assignments.emplace_back(std::move(target), std::move(value));
  }
  STRATA_ASSIGN_OR_RETURN(s->body, parse_body({"endwith"}, "with", s->offset));
  next();
  return StmtPtr(std::move(s));
}

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
  const TokenKind k = cur().kind;
  if (k == TokenKind::kVariableEnd || k == TokenKind::kBlockEnd || is_op(")")) return true;
  for (std::string_view e : extra_end) {
    if (is_name(e)) return true;
  }
  return false;
}

Result<Target> Parser::parse_target(std::initializer_list<std::string_view> extra_end,
                                    bool with_namespace) {
  Nest nest(depth_);
  STRATA_RETURN_IF_ERROR(check_nesting(cur()));
  Target tuple;
  tuple.kind = Target::Kind::kTuple;
  tuple.offset = cur().offset;
  bool is_tuple = false;
  while (true) {
    if (!tuple.items.empty()) STRATA_RETURN_IF_ERROR(expect_op(","));
    if (is_tuple_end(extra_end)) break;
    STRATA_ASSIGN_OR_RETURN(Target t, parse_target_primary(with_namespace));
    tuple.items.push_back(std::move(t));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (is_tuple) return tuple;
  if (tuple.items.empty())
    return fail(cur(), "expected an assignment target, got " + describe(cur()));
  return std::move(tuple.items[0]);
}

Result<Target> Parser::parse_target_primary(bool with_namespace) {
  Target t;
  t.offset = cur().offset;
  if (skip_op("(")) {
    STRATA_ASSIGN_OR_RETURN(t, parse_target({}, with_namespace));
    STRATA_RETURN_IF_ERROR(expect_op(")"));
    return t;
  }
  if (cur().kind != TokenKind::kName) return fail(cur(), "can't assign to " + describe(cur()));
  const std::string& n = cur().text;
  if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None") {
    return fail(cur(), "can't assign to '" + n + "'");
  }
  t.name = n;
  next();
  if (with_namespace && skip_op(".")) {
    t.kind = Target::Kind::kAttr;
    STRATA_ASSIGN_OR_RETURN(t.attr, expect_name());
  }
  return t;
}

Result<Body> parse(std::string_view source, const ParseOptions& options) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source, options.lex));
  return Parser(source, std::move(tokens), options).run();
}

}  // namespace strata::jinja
