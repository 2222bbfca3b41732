// Name resolution after parsing: filter and test names to their functions, as jinja2's compiler
// does, and which macros read varargs, kwargs or caller.
#include "jinja/lexer.h"
#include "jinja/parser_internal.h"

namespace strata::jinja {
namespace {

class Resolver {
 public:
  explicit Resolver(std::string_view source) : src_(source) {}

  Status resolve_args(CallArgs& args, bool soft, int depth) {
    for (ExprPtr& e : args.positional) STRATA_RETURN_IF_ERROR(resolve(e.get(), soft, depth));
    for (auto& [n, e] : args.named) STRATA_RETURN_IF_ERROR(resolve(e.get(), soft, depth));
    STRATA_RETURN_IF_ERROR(resolve(args.star_args.get(), soft, depth));
    return resolve(args.star_kwargs.get(), soft, depth);
  }

  // Depth here follows the tree, whose height the parser has bounded.
  Status resolve(Expr* e, bool soft, int depth) {
    if (e == nullptr) return Status::ok();
    ++depth;
    switch (e->kind) {
      case ExprKind::kList:
      case ExprKind::kTuple:
        for (ExprPtr& i : static_cast<ItemsExpr*>(e)->items) {
          STRATA_RETURN_IF_ERROR(resolve(i.get(), soft, depth));
        }
        return Status::ok();
      case ExprKind::kDict:
        for (auto& [k, v] : static_cast<DictExpr*>(e)->pairs) {
          STRATA_RETURN_IF_ERROR(resolve(k.get(), soft, depth));
          STRATA_RETURN_IF_ERROR(resolve(v.get(), soft, depth));
        }
        return Status::ok();
      case ExprKind::kGetAttr:
        return resolve(static_cast<GetAttrExpr*>(e)->object.get(), soft, depth);
      case ExprKind::kGetItem: {
        auto* g = static_cast<GetItemExpr*>(e);
        STRATA_RETURN_IF_ERROR(resolve(g->object.get(), soft, depth));
        return resolve(g->index.get(), soft, depth);
      }
      case ExprKind::kSlice: {
        auto* s = static_cast<SliceExpr*>(e);
        STRATA_RETURN_IF_ERROR(resolve(s->start.get(), soft, depth));
        STRATA_RETURN_IF_ERROR(resolve(s->stop.get(), soft, depth));
        return resolve(s->step.get(), soft, depth);
      }
      case ExprKind::kCall: {
        auto* c = static_cast<CallExpr*>(e);
        STRATA_RETURN_IF_ERROR(resolve(c->callee.get(), soft, depth));
        return resolve_args(c->args, soft, depth);
      }
      case ExprKind::kFilter: {
        auto* f = static_cast<FilterExpr*>(e);
        f->fn = find_filter(f->name);
        if (f->fn == nullptr && !soft) return fail(f->offset, "no filter named '" + f->name + "'");
        STRATA_RETURN_IF_ERROR(resolve(f->input.get(), soft, depth));
        return resolve_args(f->args, soft, depth);
      }
      case ExprKind::kTest: {
        auto* t = static_cast<TestExpr*>(e);
        t->fn = find_test(t->name);
        if (t->fn == nullptr && !soft) return fail(t->offset, "no test named '" + t->name + "'");
        STRATA_RETURN_IF_ERROR(resolve(t->input.get(), soft, depth));
        return resolve_args(t->args, soft, depth);
      }
      case ExprKind::kNot:
      case ExprKind::kNeg:
      case ExprKind::kPos:
        return resolve(static_cast<UnaryExpr*>(e)->operand.get(), soft, depth);
      case ExprKind::kBinary:
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        auto* b = static_cast<BinaryExpr*>(e);
        STRATA_RETURN_IF_ERROR(resolve(b->left.get(), soft, depth));
        return resolve(b->right.get(), soft, depth);
      }
      case ExprKind::kConcat:
        for (ExprPtr& p : static_cast<ConcatExpr*>(e)->parts) {
          STRATA_RETURN_IF_ERROR(resolve(p.get(), soft, depth));
        }
        return Status::ok();
      case ExprKind::kCompare: {
        auto* c = static_cast<CompareExpr*>(e);
        STRATA_RETURN_IF_ERROR(resolve(c->first.get(), soft, depth));
        for (auto& [op, x] : c->rest) STRATA_RETURN_IF_ERROR(resolve(x.get(), soft, depth));
        return Status::ok();
      }
      case ExprKind::kCond: {
        // jinja2 compiles a conditional expression in a soft frame.
        auto* c = static_cast<CondExpr*>(e);
        STRATA_RETURN_IF_ERROR(resolve(c->test.get(), true, depth));
        STRATA_RETURN_IF_ERROR(resolve(c->then.get(), true, depth));
        return resolve(c->otherwise.get(), true, depth);
      }
      case ExprKind::kName: {
        const std::string& n = static_cast<NameExpr*>(e)->name;
        if (macro_ != nullptr) {
          macro_->uses_varargs |= n == "varargs";
          macro_->uses_kwargs |= n == "kwargs";
          macro_->uses_caller |= n == "caller";
        }
        return Status::ok();
      }
      case ExprKind::kConst:
        return Status::ok();
    }
    return Status::ok();
  }

  // `soft`: inside an if, where unknown filters and tests wait until they are evaluated.
  Status resolve(Body& body, bool soft, int depth) {
    for (StmtPtr& s : body) STRATA_RETURN_IF_ERROR(resolve(*s, soft, depth + 1));
    return Status::ok();
  }

  Status resolve(Stmt& s, bool soft, int depth) {
    switch (s.kind) {
      case StmtKind::kPrint:
        return resolve(static_cast<PrintStmt&>(s).expr.get(), soft, depth);
      case StmtKind::kIf: {
        auto& i = static_cast<IfStmt&>(s);
        for (auto& [test, body] : i.branches) {
          STRATA_RETURN_IF_ERROR(resolve(test.get(), true, depth));
          STRATA_RETURN_IF_ERROR(resolve(body, true, depth));
        }
        return resolve(i.otherwise, true, depth);
      }
      case StmtKind::kFor: {
        auto& f = static_cast<ForStmt&>(s);
        STRATA_RETURN_IF_ERROR(resolve(f.iter.get(), soft, depth));
        STRATA_RETURN_IF_ERROR(resolve(f.filter.get(), false, depth));
        STRATA_RETURN_IF_ERROR(resolve(f.body, false, depth));
        return resolve(f.otherwise, soft, depth);
      }
      case StmtKind::kSet:
        return resolve(static_cast<SetStmt&>(s).value.get(), soft, depth);
      case StmtKind::kSetBlock: {
        auto& b = static_cast<SetBlockStmt&>(s);
        STRATA_RETURN_IF_ERROR(resolve(b.filter.get(), soft, depth));
        return resolve(b.body, false, depth);
      }
      case StmtKind::kMacro: {
        auto& m = static_cast<MacroStmt&>(s);
        MacroStmt* const outer = macro_;
        macro_ = &m;
        for (ExprPtr& d : m.defaults) STRATA_RETURN_IF_ERROR(resolve(d.get(), false, depth));
        const Status st = resolve(m.body, false, depth);
        macro_ = outer;
        return st;
      }
      case StmtKind::kCallBlock: {
        auto& c = static_cast<CallBlockStmt&>(s);
        STRATA_RETURN_IF_ERROR(resolve(*c.caller, soft, depth));
        return resolve(c.call.get(), soft, depth);
      }
      case StmtKind::kFilterBlock: {
        auto& f = static_cast<FilterBlockStmt&>(s);
        STRATA_RETURN_IF_ERROR(resolve(f.filter.get(), soft, depth));
        return resolve(f.body, false, depth);
      }
      case StmtKind::kWith: {
        auto& w = static_cast<WithStmt&>(s);
        for (auto& [t, e] : w.assignments) STRATA_RETURN_IF_ERROR(resolve(e.get(), soft, depth));
        return resolve(w.body, false, depth);
      }
      case StmtKind::kScope:
        return resolve(static_cast<ScopeStmt&>(s).body, soft, depth);
      default:
        return Status::ok();
    }
  }

 private:
  Status fail(uint32_t offset, const std::string& what) const {
    return invalid_argument("template " + source_position(src_, offset) + ": " + what);
  }

  std::string_view src_;
  MacroStmt* macro_ = nullptr;  // the macro whose body is being resolved
};

}  // namespace

Status resolve_names(Body& body, std::string_view source) {
  return Resolver(source).resolve(body, /*soft=*/false, 0);
}

}  // namespace strata::jinja
