// The parser's class, shared by its files: statements (parser.cc), expressions
// (parse_expression.cc) and name resolution (resolve.cc).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/parser.h"

namespace strata::jinja {

// Resolves the filter and test names of a parsed body (see parser.h).
Status resolve_names(Body& body, std::string_view source);

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens, const ParseOptions& options)
      : src_(source), tokens_(std::move(tokens)), opt_(options) {}

  Result<Body> run() {
    STRATA_ASSIGN_OR_RETURN(Body body, subparse({}));
    if (cur().kind != TokenKind::kEof) return fail(cur(), "unexpected " + describe(cur()));
    STRATA_RETURN_IF_ERROR(resolve_names(body, src_));
    return body;
  }

 private:
  // ---- tokens

  const Token& cur() const { return tokens_[pos_]; }
  const Token& look(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_name(std::string_view n) const {
    return cur().kind == TokenKind::kName && cur().text == n;
  }
  bool is_op(std::string_view op) const {
    return cur().kind == TokenKind::kOperator && cur().text == op;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kData:
        return "template data";
      case TokenKind::kVariableBegin:
        return "'{{'";
      case TokenKind::kVariableEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInteger:
      case TokenKind::kFloat:
        return "number";
      default:
        return "'" + t.text + "'";
    }
  }

  Status fail(uint32_t offset, const std::string& what) const {
    return invalid_argument("template " + source_position(src_, offset) + ": " + what);
  }
  Status fail(const Token& t, const std::string& what) const { return fail(t.offset, what); }

  Status expect_op(std::string_view op) {
    if (skip_op(op)) return Status::ok();
    return fail(cur(), "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  Status expect_kind(TokenKind kind, std::string_view what) {
    if (cur().kind == kind) {
      next();
      return Status::ok();
    }
    return fail(cur(), "expected " + std::string(what) + ", got " + describe(cur()));
  }
  Result<std::string> expect_name() {
    if (cur().kind != TokenKind::kName)
      return fail(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }

  // ---- nesting

  // Counts a level of nesting while alive; enter() refuses past the limit.
  class Nest {
   public:
    explicit Nest(int& depth) : depth_(depth) { ++depth_; }
    ~Nest() { --depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    int& depth_;
  };
  Status check_nesting(const Token& at) const {
    if (depth_ <= opt_.max_nesting) return Status::ok();
    return fail(at, "nesting deeper than " + std::to_string(opt_.max_nesting) +
                        " levels (the parser's max_nesting limit)");
  }
  // Makes `parent` as high as its child needs; an expression tree past 4 x max_nesting is an
  // error (see Expr::height).
  Status grow(Expr& parent, const Expr* child) {
    if (child == nullptr) return Status::ok();
    parent.height = std::max(parent.height, child->height + 1);
    if (parent.height <= static_cast<uint32_t>(4 * opt_.max_nesting)) return Status::ok();
    return fail(parent.offset, "expression nested deeper than " +
                                   std::to_string(4 * opt_.max_nesting) +
                                   " levels (4 x the parser's max_nesting limit)");
  }
  Status grow_args(Expr& parent, const CallArgs& args) {
    for (const ExprPtr& e : args.positional) STRATA_RETURN_IF_ERROR(grow(parent, e.get()));
    for (const auto& [n, e] : args.named) STRATA_RETURN_IF_ERROR(grow(parent, e.get()));
    STRATA_RETURN_IF_ERROR(grow(parent, args.star_args.get()));
    return grow(parent, args.star_kwargs.get());
  }

  // Loop and macro bodies are new scopes: break/continue and soft frames do not cross them.
  struct LoopScope {
    LoopScope(int& loops, int value) : loops_(loops), saved_(loops) { loops_ = value; }
    ~LoopScope() { loops_ = saved_; }
    int& loops_;
    int saved_;
  };

  // statements and assignment targets (parser.cc)
  // Statements until a block tag named in `end` (left as the current token) or the end.
  Result<Body> subparse(std::initializer_list<std::string_view> end);
  // A body up to one of `end`; the current token is then that end name. `open` is where the
  // block's tag starts, for the error when the template ends first.
  Result<Body> parse_body(std::initializer_list<std::string_view> end, std::string_view block,
                          uint32_t open);
  Result<StmtPtr> parse_statement(std::initializer_list<std::string_view> enclosing_end);
  Result<StmtPtr> parse_for();
  Result<StmtPtr> parse_if();
  Result<StmtPtr> parse_set();
  Status parse_signature(MacroStmt& m);
  Result<StmtPtr> parse_macro();
  Result<StmtPtr> parse_call_block();
  Result<StmtPtr> parse_filter_block();
  Result<StmtPtr> parse_with();
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const;
  Result<Target> parse_target(std::initializer_list<std::string_view> extra_end,
                              bool with_namespace);
  Result<Target> parse_target_primary(bool with_namespace);

  // expressions (parse_expression.cc)
  Result<ExprPtr> parse_expression(bool with_condexpr);
  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> binary(ExprKind kind, BinaryOp op, ExprPtr left, ExprPtr right);
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> unary(ExprKind kind, uint32_t at, ExprPtr operand);
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  static ExprPtr const_expr(uint32_t at, Value v);
  // Expressions separated by commas: a tuple when there is a comma, else the one expression.
  Result<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                              bool explicit_parentheses);
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_filter_expr(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  Result<ExprPtr> parse_subscribed();
  Status parse_call_args(CallArgs& args);
  Result<ExprPtr> parse_call(ExprPtr callee);
  // `| f(args) | g ...` after `node` (null in filter blocks); `start_inline`: the first filter
  // has no '|' before it ({% filter upper %}).
  Result<ExprPtr> parse_filters(ExprPtr node, bool start_inline);
  Result<ExprPtr> parse_test(ExprPtr node);

  std::string_view src_;
  std::vector<Token> tokens_;
  ParseOptions opt_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // loops around the current statement, within the current macro
};

}  // namespace strata::jinja
