#include "jinja/interpreter.h"

#include "jinja/builtins.h"
#include "jinja/lexer.h"

namespace strata::jinja {

const Value* Frame::find(std::string_view name) const {
  for (const auto& [n, v] : vars) {
    if (n == name) return &v;
  }
  return nullptr;
}

void Frame::set(std::string_view name, Value v) {
  for (auto& [n, old] : vars) {
    if (n == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

namespace {

// Makes `frame` current while alive and restores the previous one, error or not.
class FrameScope {
 public:
  FrameScope(std::shared_ptr<Frame>& current, std::shared_ptr<Frame> frame)
      : current_(current), saved_(std::move(current)) {
    current_ = std::move(frame);
  }
  ~FrameScope() { current_ = std::move(saved_); }
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;

 private:
  std::shared_ptr<Frame>& current_;
  std::shared_ptr<Frame> saved_;
};

std::shared_ptr<Frame> child_of(const std::shared_ptr<Frame>& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

// loop.cycle('odd', 'even') at one iteration.
class CycleFn : public Callable {
 public:
  explicit CycleFn(size_t index) : index_(index) {}
  std::string_view name() const override { return "cycle"; }
  Result<Value> call(Interpreter&, Args& args) const override {
    if (args.positional.empty()) return invalid_argument("no items for cycling given");
    return args.positional[index_ % args.positional.size()];
  }

 private:
  size_t index_;
};

// The `loop` variable. One object per loop, advanced in place: a copy taken in an outer loop
// ({% set outer = loop %}) reads that loop's current iteration, as in jinja2.
class LoopObject : public Object {
 public:
  explicit LoopObject(std::vector<Value> items)
      : items_(std::make_shared<const std::vector<Value>>(std::move(items))) {}
  const std::vector<Value>& items() const { return *items_; }
  size_t index = 0;

  std::string_view type_name() const override { return "LoopContext"; }
  Value attr(std::string_view name) const override {
    const auto n = static_cast<int64_t>(items_->size());
    const auto i = static_cast<int64_t>(index);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(1);
    if (name == "depth0") return Value(0);
    if (name == "previtem") {
      return i > 0 ? (*items_)[index - 1] : Value::undefined("there is no previous item");
    }
    if (name == "nextitem") {
      return i + 1 < n ? (*items_)[index + 1] : Value::undefined("there is no next item");
    }
    if (name == "cycle") return Value(std::make_shared<const CycleFn>(index));
    return Value::undefined("'LoopContext' object has no attribute '" + std::string(name) + "'");
  }
  std::string repr(int) const override {
    return "<LoopContext " + std::to_string(index + 1) + "/" + std::to_string(items_->size()) + ">";
  }

 private:
  std::shared_ptr<const std::vector<Value>> items_;  // the loop object may outlive the loop
};

class MacroFn : public Callable {
 public:
  MacroFn(const MacroStmt& macro, std::shared_ptr<Frame> closure, Value caller)
      : macro_(macro), closure_(std::move(closure)), caller_(std::move(caller)) {}
  std::string_view name() const override { return macro_.name; }
  Result<Value> call(Interpreter& in, Args& args) const override {
    return in.call_macro(macro_, closure_, caller_, args);
  }

 private:
  const MacroStmt& macro_;
  std::shared_ptr<Frame> closure_;
  Value caller_;
};

// Items to unpack into a tuple target.
Result<std::vector<Value>> unpack(const Value& v, size_t want) {
  if (v.is_undefined() || !(v.is_list() || v.is_dict() || v.is_string())) {
    return invalid_argument("cannot unpack non-iterable " + std::string(v.type_name()) + " object");
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.size() > want) {
    return invalid_argument("too many values to unpack (expected " + std::to_string(want) + ")");
  }
  if (items.size() < want) {
    return invalid_argument("not enough values to unpack (expected " + std::to_string(want) +
                            ", got " + std::to_string(items.size()) + ")");
  }
  return items;
}

}  // namespace

Interpreter::Interpreter(std::string_view source, const Limits& limits, const Dict& context,
                         std::tm now)
    : source_(source), limits_(limits), context_(context), now_(now) {}

Status Interpreter::at(uint32_t offset, const Status& cause) {
  if (error_placed_ || cause.is_ok()) return cause;
  error_placed_ = true;
  return Status(cause.kind(),
                "template " + source_position(source_, offset) + ": " + cause.message());
}

Status Interpreter::charge(int64_t units) {
  work_ += units;
  if (work_ <= limits_.max_work) return Status::ok();
  return out_of_range("rendering took more than " + std::to_string(limits_.max_work) +
                      " units of work (max_work)");
}

Status Interpreter::check_string(size_t bytes) const {
  if (bytes <= limits_.max_string_bytes) return Status::ok();
  return out_of_range("a string of " + std::to_string(bytes) + " bytes is longer than " +
                      std::to_string(limits_.max_string_bytes) + " (max_string_bytes)");
}

Status Interpreter::check_items(size_t n) const {
  if (n <= limits_.max_list_items) return Status::ok();
  return out_of_range("a list of " + std::to_string(n) + " items is longer than " +
                      std::to_string(limits_.max_list_items) + " (max_list_items)");
}

Status Interpreter::append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    return out_of_range("output longer than " + std::to_string(limits_.max_output_bytes) +
                        " bytes (max_output_bytes)");
  }
  STRATA_RETURN_IF_ERROR(charge(1 + static_cast<int64_t>(text.size() / 64)));
  out += text;
  return Status::ok();
}

Status Interpreter::render(const Body& body, std::string& out) {
  frame_ = std::make_shared<Frame>();
  flow_ = Flow::kNormal;
  error_placed_ = false;
  Status s = render_body(body, out);
  for (const std::shared_ptr<Frame>& f : closures_) f->vars.clear();
  closures_.clear();
  for (const std::shared_ptr<Object>& o : mutables_) o->release();
  mutables_.clear();
  return s;
}

Status Interpreter::render_body(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    STRATA_RETURN_IF_ERROR(render_stmt(*s, out));
    if (flow_ != Flow::kNormal) break;
  }
  return Status::ok();
}

Status Interpreter::render_stmt(const Stmt& s, std::string& out) {
  Depth depth(*this);
  STRATA_RETURN_IF_ERROR(at(s.offset, depth.check()));
  switch (s.kind) {
    case StmtKind::kData:
      return at(s.offset, append(out, static_cast<const DataStmt&>(s).text));
    case StmtKind::kPrint: {
      STRATA_ASSIGN_OR_RETURN(Value v, eval(*static_cast<const PrintStmt&>(s).expr));
      if (v.is_string()) return at(s.offset, append(out, v.as_string()));
      return at(s.offset, append(out, to_str(v)));
    }
    case StmtKind::kIf: {
      const auto& i = static_cast<const IfStmt&>(s);
      for (const auto& [test, body] : i.branches) {
        STRATA_ASSIGN_OR_RETURN(Value v, eval(*test));
        if (v.truthy()) return render_body(body, out);
      }
      return render_body(i.otherwise, out);
    }
    case StmtKind::kFor:
      return render_for(static_cast<const ForStmt&>(s), out);
    case StmtKind::kSet: {
      const auto& set = static_cast<const SetStmt&>(s);
      STRATA_ASSIGN_OR_RETURN(Value v, eval(*set.value));
      return at(s.offset, assign(set.target, v));
    }
    case StmtKind::kSetBlock: {
      const auto& set = static_cast<const SetBlockStmt&>(s);
      STRATA_ASSIGN_OR_RETURN(Value v, filter_body(set.filter.get(), set.body));
      return at(s.offset, assign(set.target, v));
    }
    case StmtKind::kMacro: {
      const auto& m = static_cast<const MacroStmt&>(s);
      frame_->set(m.name, Value(std::make_shared<const MacroFn>(m, frame_, Value())));
      closures_.push_back(frame_);
      return Status::ok();
    }
    case StmtKind::kCallBlock: {
      const auto& c = static_cast<const CallBlockStmt&>(s);
      const auto& call = static_cast<const CallExpr&>(*c.call);
      STRATA_ASSIGN_OR_RETURN(Value callee, eval(*call.callee));
      STRATA_ASSIGN_OR_RETURN(Args args, eval_args(call.args));
      // The body becomes `caller` of the called macro.
      args.named.emplace_back("caller",
                              Value(std::make_shared<const MacroFn>(*c.caller, frame_, Value())));
      Result<Value> v = Interpreter::call(callee, args);
      if (!v) return at(call.offset, v.status());
      return at(s.offset, append(out, to_str(*v)));
    }
    case StmtKind::kFilterBlock: {
      const auto& f = static_cast<const FilterBlockStmt&>(s);
      STRATA_ASSIGN_OR_RETURN(Value v, filter_body(f.filter.get(), f.body));
      return at(s.offset, append(out, to_str(v)));
    }
    case StmtKind::kWith: {
      const auto& w = static_cast<const WithStmt&>(s);
      std::vector<Value> values;
      for (const auto& [target, expr] : w.assignments) {
        STRATA_ASSIGN_OR_RETURN(Value v, eval(*expr));
        values.push_back(std::move(v));
      }
      FrameScope scope(frame_, child_of(frame_));
      for (size_t i = 0; i < values.size(); ++i) {
        STRATA_RETURN_IF_ERROR(at(s.offset, assign(w.assignments[i].first, values[i])));
      }
      return render_body(w.body, out);
    }
    case StmtKind::kScope:
      return render_body(static_cast<const ScopeStmt&>(s).body, out);
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return Status::ok();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return Status::ok();
  }
  return Status::ok();
}

Result<Value> Interpreter::filter_body(const Expr* filter, const Body& body) {
  std::string text;
  {
    FrameScope scope(frame_, child_of(frame_));
    STRATA_RETURN_IF_ERROR(render_body(body, text));
  }
  Value v(std::move(text));
  if (filter == nullptr) return v;
  return eval_filter(static_cast<const FilterExpr&>(*filter), &v);
}

Status Interpreter::render_for(const ForStmt& s, std::string& out) {
  STRATA_ASSIGN_OR_RETURN(Value seq, eval(*s.iter));
  Result<std::vector<Value>> all = iterate(seq);
  if (!all) return at(s.iter->offset, all.status());
  std::vector<Value> items;
  if (s.filter) {
    for (Value& item : *all) {
      STRATA_RETURN_IF_ERROR(at(s.offset, charge(1)));
      FrameScope scope(frame_, child_of(frame_));
      STRATA_RETURN_IF_ERROR(at(s.offset, assign(s.target, item)));
      STRATA_ASSIGN_OR_RETURN(Value keep, eval(*s.filter));
      if (keep.truthy()) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) return render_body(s.otherwise, out);
  auto loop = std::make_shared<LoopObject>(std::move(items));
  const Value loop_value{std::shared_ptr<Object>(loop)};
  const std::vector<Value>& looped = loop->items();
  for (size_t i = 0; i < looped.size(); ++i) {
    if (++loop_iterations_ > limits_.max_loop_iterations) {
      return at(s.offset,
                out_of_range("loops ran more than " + std::to_string(limits_.max_loop_iterations) +
                             " iterations (max_loop_iterations)"));
    }
    STRATA_RETURN_IF_ERROR(at(s.offset, charge(1)));
    loop->index = i;
    FrameScope scope(frame_, child_of(frame_));
    STRATA_RETURN_IF_ERROR(at(s.offset, assign(s.target, looped[i])));
    frame_->set("loop", loop_value);
    STRATA_RETURN_IF_ERROR(render_body(s.body, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::ok();
}

Status Interpreter::assign(const Target& target, const Value& value) {
  switch (target.kind) {
    case Target::Kind::kName:
      frame_->set(target.name, value);
      return Status::ok();
    case Target::Kind::kAttr: {
      STRATA_ASSIGN_OR_RETURN(Value ns, lookup(target.name));
      if (ns.is_undefined()) return invalid_argument(ns.undefined_hint());
      if (!ns.is_object()) {
        return invalid_argument("cannot assign attribute on non-namespace object '" + target.name +
                                "' (" + std::string(ns.type_name()) + ")");
      }
      return ns.as_object()->set_attr(target.attr, value);
    }
    case Target::Kind::kTuple: {
      STRATA_ASSIGN_OR_RETURN(std::vector<Value> items, unpack(value, target.items.size()));
      for (size_t i = 0; i < items.size(); ++i) {
        STRATA_RETURN_IF_ERROR(assign(target.items[i], items[i]));
      }
      return Status::ok();
    }
  }
  return Status::ok();
}

Result<Value> Interpreter::call_macro(const MacroStmt& macro, const std::shared_ptr<Frame>& closure,
                                      const Value& caller, Args& args) {
  if (calls_ >= limits_.max_call_depth) {
    return out_of_range("macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                        " (max_call_depth)");
  }
  struct CallCount {
    explicit CallCount(int& n) : n_(n) { ++n_; }
    ~CallCount() { --n_; }
    int& n_;
  } count(calls_);

  auto frame = child_of(closure);
  const size_t n = macro.params.size();
  std::vector<bool> given(n, false);
  for (size_t i = 0; i < args.positional.size() && i < n; ++i) {
    frame->set(macro.params[i], std::move(args.positional[i]));
    given[i] = true;
  }
  if (args.positional.size() > n && !macro.uses_varargs) {
    return invalid_argument("macro '" + macro.name + "' takes not more than " + std::to_string(n) +
                            " argument(s)");
  }
  Dict kwargs;
  Value call_block = caller;
  for (auto& [key, v] : args.named) {
    size_t p = 0;
    while (p < n && macro.params[p] != key) ++p;
    if (p < n) {
      if (given[p]) {
        return invalid_argument("macro '" + macro.name + "' got multiple values for argument '" +
                                key + "'");
      }
      frame->set(macro.params[p], std::move(v));
      given[p] = true;
    } else if (key == "caller") {
      call_block = std::move(v);
    } else if (macro.uses_kwargs) {
      kwargs.set(Value(key), std::move(v));
    } else {
      return invalid_argument("macro '" + macro.name + "' takes no keyword argument '" + key + "'");
    }
  }
  if (macro.uses_varargs) {
    std::vector<Value> extra;
    for (size_t i = n; i < args.positional.size(); ++i) extra.push_back(args.positional[i]);
    frame->set("varargs", Value::tuple(std::move(extra)));
  }
  if (macro.uses_kwargs) frame->set("kwargs", Value(std::move(kwargs)));
  if (!call_block.is_undefined()) frame->set("caller", call_block);

  FrameScope scope(frame_, frame);
  const size_t first_default = n - macro.defaults.size();
  for (size_t p = 0; p < n; ++p) {
    if (given[p]) continue;
    if (p >= first_default) {
      STRATA_ASSIGN_OR_RETURN(Value d, eval(*macro.defaults[p - first_default]));
      frame_->set(macro.params[p], std::move(d));
    } else {
      frame_->set(macro.params[p],
                  Value::undefined("parameter '" + macro.params[p] + "' was not provided"));
    }
  }
  std::string out;
  STRATA_RETURN_IF_ERROR(render_body(macro.body, out));
  flow_ = Flow::kNormal;
  return Value(std::move(out));
}

Result<Value> Interpreter::call(const Value& callee, Args& args) {
  if (callee.is_callable()) return callee.as_callable()->call(*this, args);
  if (callee.is_undefined()) return invalid_argument(callee.undefined_hint());
  return invalid_argument("'" + std::string(callee.type_name()) + "' object is not callable");
}

Result<Value> Interpreter::apply_filter(std::string_view name, const Value& input, Args& args) {
  const FilterFn fn = find_filter(name);
  if (fn == nullptr) return invalid_argument("no filter named '" + std::string(name) + "'");
  return fn(*this, input, args);
}

Result<bool> Interpreter::apply_test(std::string_view name, const Value& input, Args& args) {
  const TestFn fn = find_test(name);
  if (fn == nullptr) return invalid_argument("no test named '" + std::string(name) + "'");
  return fn(*this, input, args);
}

}  // namespace strata::jinja
