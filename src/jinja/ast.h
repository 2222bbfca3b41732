// The syntax tree the parser builds and the interpreter walks. Nodes own their children;
// every node keeps the byte offset of its first token for line:column in error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/builtins.h"
#include "jinja/value.h"

namespace strata::jinja {

enum class ExprKind : uint8_t {
  kConst,
  kName,
  kList,
  kTuple,
  kDict,
  kGetAttr,  // x.name
  kGetItem,  // x[i], x[a:b:c]
  kSlice,    // only as a GetItem's index
  kCall,
  kFilter,  // x | f(args)
  kTest,    // x is t(args)
  kNot,
  kNeg,
  kPos,
  kBinary,  // arithmetic
  kAnd,
  kOr,
  kConcat,  // a ~ b ~ c
  kCompare,
  kCond,  // a if b else c
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  Expr(ExprKind k, uint32_t off) : kind(k), offset(off) {}
  virtual ~Expr() = default;
  ExprKind kind;
  uint32_t offset;
  // Nodes on the longest path down from here (1 for a leaf). `a + b + c...` nests without
  // nesting in the source: the parser bounds this so that no walk, not even the destructor,
  // recurses without limit.
  uint32_t height = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(uint32_t off, Value v) : Expr(ExprKind::kConst, off), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(uint32_t off, std::string n) : Expr(ExprKind::kName, off), name(std::move(n)) {}
  std::string name;
};

// A list or tuple literal.
struct ItemsExpr : Expr {
  using Expr::Expr;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(uint32_t off) : Expr(ExprKind::kDict, off) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(uint32_t off, ExprPtr o, std::string n)
      : Expr(ExprKind::kGetAttr, off), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {
  GetItemExpr(uint32_t off, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::kGetItem, off), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;  // a SliceExpr for x[a:b:c]
};

struct SliceExpr : Expr {
  explicit SliceExpr(uint32_t off) : Expr(ExprKind::kSlice, off) {}
  ExprPtr start, stop, step;  // each may be null
};

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
  ExprPtr star_args;    // *list
  ExprPtr star_kwargs;  // **dict
};

struct CallExpr : Expr {
  CallExpr(uint32_t off, ExprPtr c) : Expr(ExprKind::kCall, off), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgs args;
};

// A filter; `input` is null in a filter block or `{% set x | f %}`, whose body is the input.
// `fn` is null for a filter that does not exist inside an if: an error only when evaluated.
struct FilterExpr : Expr {
  FilterExpr(uint32_t off, ExprPtr in, std::string n)
      : Expr(ExprKind::kFilter, off), input(std::move(in)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  FilterFn fn = nullptr;
  CallArgs args;
};

struct TestExpr : Expr {
  TestExpr(uint32_t off, ExprPtr in, std::string n)
      : Expr(ExprKind::kTest, off), input(std::move(in)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  TestFn fn = nullptr;
  CallArgs args;
};

// not / unary minus / unary plus.
struct UnaryExpr : Expr {
  UnaryExpr(ExprKind k, uint32_t off, ExprPtr x) : Expr(k, off), operand(std::move(x)) {}
  ExprPtr operand;
};

// Arithmetic (kBinary with `op`), and / or.
struct BinaryExpr : Expr {
  BinaryExpr(ExprKind k, uint32_t off, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(k, off), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(uint32_t off) : Expr(ExprKind::kConcat, off) {}
  std::vector<ExprPtr> parts;
};

// a < b <= c: each comparison with the previous operand, as Python chains them.
struct CompareExpr : Expr {
  CompareExpr(uint32_t off, ExprPtr f) : Expr(ExprKind::kCompare, off), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct CondExpr : Expr {
  CondExpr(uint32_t off, ExprPtr t, ExprPtr y, ExprPtr n)
      : Expr(ExprKind::kCond, off),
        test(std::move(t)),
        then(std::move(y)),
        otherwise(std::move(n)) {}
  ExprPtr test, then;
  ExprPtr otherwise;  // null: undefined
};

// Where `set`, `for` and `with` store: a name, ns.attr, or a tuple of targets to unpack.
struct Target {
  enum class Kind : uint8_t { kName, kAttr, kTuple };
  Kind kind = Kind::kName;
  std::string name;  // kName: the variable; kAttr: the namespace variable
  std::string attr;  // kAttr
  std::vector<Target> items;
  uint32_t offset = 0;
};

enum class StmtKind : uint8_t {
  kData,
  kPrint,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kWith,
  kScope,  // transformers' {% generation %}: the body, rendered in place
  kBreak,
  kContinue,
};

struct Stmt {
  Stmt(StmtKind k, uint32_t off) : kind(k), offset(off) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  uint32_t offset;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct DataStmt : Stmt {
  DataStmt(uint32_t off, std::string t) : Stmt(StmtKind::kData, off), text(std::move(t)) {}
  std::string text;
};

struct PrintStmt : Stmt {
  PrintStmt(uint32_t off, ExprPtr e) : Stmt(StmtKind::kPrint, off), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(uint32_t off) : Stmt(StmtKind::kIf, off) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and elifs
  Body otherwise;
};

struct ForStmt : Stmt {
  explicit ForStmt(uint32_t off) : Stmt(StmtKind::kFor, off) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // for x in xs if cond: may be null
  Body body;
  Body otherwise;  // runs when no item passed
};

struct SetStmt : Stmt {
  explicit SetStmt(uint32_t off) : Stmt(StmtKind::kSet, off) {}
  Target target;
  ExprPtr value;
};

// {% set x | filters %}body{% endset %}
struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(uint32_t off) : Stmt(StmtKind::kSetBlock, off) {}
  Target target;
  ExprPtr filter;  // a FilterExpr chain whose innermost input is null; may be null
  Body body;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(uint32_t off) : Stmt(StmtKind::kMacro, off) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  // Whether the body reads these: only then may a call pass extra positional arguments
  // (varargs), unknown keyword arguments (kwargs) or a call block (caller), as in jinja2.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

// {% call(params) macro(args) %}body{% endcall %}: the body is `caller` inside the macro.
struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(uint32_t off) : Stmt(StmtKind::kCallBlock, off) {}
  std::unique_ptr<MacroStmt> caller;
  ExprPtr call;  // a CallExpr
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(uint32_t off) : Stmt(StmtKind::kFilterBlock, off) {}
  ExprPtr filter;  // a FilterExpr chain whose innermost input is null
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(uint32_t off) : Stmt(StmtKind::kWith, off) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct ScopeStmt : Stmt {
  explicit ScopeStmt(uint32_t off) : Stmt(StmtKind::kScope, off) {}
  Body body;
};

}  // namespace strata::jinja
