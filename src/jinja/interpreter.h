// The interpreter: renders a syntax tree with a context, as jinja2 renders a template in an
// ImmutableSandboxedEnvironment (no attribute starting with '_', no method that changes a list
// or dict), with its scoping rules: a for loop's body and a macro are scopes of their own, an
// if is not; namespace() objects are how a loop body changes something outside it.
//
// Every limit of limits.h is enforced here; hitting one ends the render with an error naming it.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/limits.h"
#include "jinja/value.h"

namespace strata::jinja {

// Variables a scope defines; a lookup walks up through the parents, then the context.
struct Frame {
  std::vector<std::pair<std::string_view, Value>> vars;  // names live in the tree or context
  std::shared_ptr<Frame> parent;

  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v);
};

class Interpreter {
 public:
  // `source` is the normalised template text (for line numbers in errors); `context` holds the
  // render's variables; `now` is what strftime_now() formats.
  Interpreter(std::string_view source, const Limits& limits, const Dict& context, std::tm now);

  Status render(const Body& body, std::string& out);

  // ---- for the builtins

  Result<Value> call(const Value& callee, Args& args);
  // x.name and x[key] with jinja2's rules: a dict's methods before its keys for x.name, the
  // other way round for x[key]; what is missing is undefined, not an error.
  Result<Value> getattr(const Value& object, std::string_view name);
  Result<Value> getitem(const Value& object, const Value& key);
  // Charges `units` of work (limits.h); an error once the budget is spent.
  Status charge(int64_t units);
  // Refuses a string of `bytes` past max_string_bytes, or a list past max_list_items.
  Status check_string(size_t bytes) const;
  Status check_items(size_t n) const;
  const Limits& limits() const { return limits_; }
  const std::tm& now() const { return now_; }

  // The filter or test `name` applied by another one (map, select...).
  Result<Value> apply_filter(std::string_view name, const Value& input, Args& args);
  Result<bool> apply_test(std::string_view name, const Value& input, Args& args);

  // An object that may end up holding itself: released (Object::release) when render() ends.
  void release_at_end(std::shared_ptr<Object> o) { mutables_.push_back(std::move(o)); }

  // A macro call (the Callable of a macro forwards here).
  Result<Value> call_macro(const MacroStmt& macro, const std::shared_ptr<Frame>& closure,
                           const Value& caller, Args& args);

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  // Counts one level of evaluation while alive (max_eval_depth).
  class Depth;

  // statements (interpreter.cc)
  Status render_body(const Body& body, std::string& out);
  Status render_stmt(const Stmt& s, std::string& out);
  Status render_for(const ForStmt& s, std::string& out);
  Status render_macro_body(const Body& body, std::shared_ptr<Frame> frame, std::string& out);
  Status assign(const Target& target, const Value& value);
  Status append(std::string& out, std::string_view text);
  Result<Value> filter_body(const Expr* filter, const Body& body);

  // expressions (eval.cc)
  Result<Value> eval(const Expr& e);
  Result<Value> eval_inner(const Expr& e);
  Result<Args> eval_args(const CallArgs& args);
  Result<Value> eval_filter(const FilterExpr& f, const Value* block_input);
  Result<Value> eval_compare(const CompareExpr& c);
  Result<Value> lookup(std::string_view name) const;

  // The error with the line and column of the innermost node it came from.
  Status at(uint32_t offset, const Status& cause);

  std::string_view source_;
  const Limits& limits_;
  const Dict& context_;
  std::tm now_;
  std::shared_ptr<Frame> frame_;
  // The frames a macro closes over. A macro is a variable of the frame it closes over, so each
  // is a reference cycle; render() breaks them when it ends, as nothing can call a macro then.
  std::vector<std::shared_ptr<Frame>> closures_;
  std::vector<std::shared_ptr<Object>> mutables_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
  int calls_ = 0;
  int64_t loop_iterations_ = 0;
  int64_t work_ = 0;
  bool error_placed_ = false;  // the error being returned already names its line
};

class Interpreter::Depth {
 public:
  explicit Depth(Interpreter& in) : in_(in) { ++in_.depth_; }
  ~Depth() { --in_.depth_; }
  Depth(const Depth&) = delete;
  Depth& operator=(const Depth&) = delete;
  Status check() const {
    if (in_.depth_ <= in_.limits_.max_eval_depth) return Status::ok();
    return out_of_range("evaluation nested deeper than " +
                        std::to_string(in_.limits_.max_eval_depth) + " levels (max_eval_depth)");
  }

 private:
  Interpreter& in_;
};

}  // namespace strata::jinja
