// Value: what a Jinja template computes with, and how the model layer holds a conversation.
//
// Goal: the data model of Python as jinja2 sees it (None, bool, int, float, str, list, tuple,
// dict with insertion order) with Python's semantics for truth, equality, ordering, str() and
// repr(), so that templates render byte for byte as jinja2 renders them. Messages, tools and tool
// calls of a chat are Values too: the same structure the template reads, without a JSON library.
// Non-goals: Python's unbounded ints (int64 here; an overflow is an error), sets, bytes.
//
// Values are immutable and cheap to copy: strings, lists and dicts are shared, never copied.
// Two kinds exist only inside a render: callables (macros, builtins, bound methods) and objects
// (namespace(), the loop variable), which are the only things a template can mutate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace strata::jinja {

class Value;
class Dict;
class Callable;
class Object;

// A list or a tuple (they print differently: [1, 2] and (1, 2), and never compare equal).
// A generator (what select/map/reject return in jinja2) iterates like a list but has no len()
// and is always true.
struct ListData {
  enum class Shape : uint8_t { kList, kTuple, kGenerator };
  std::vector<Value> items;
  Shape shape = Shape::kList;
  uint32_t depth = 1;  // nesting of lists and dicts: 1 + the deepest element's
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable,
    kObject,
  };

  // Undefined, as jinja2's default Undefined: prints as "", is false, iterates as empty; any
  // other use is an error whose text is `hint` ("'x' is undefined").
  Value() = default;
  static Value undefined(std::string hint);
  static Value none() { return Value(Tag::kNone); }

  Value(bool b) : v_(b) {}                                        // NOLINT: implicit by design
  Value(int i) : v_(static_cast<int64_t>(i)) {}                   // NOLINT
  Value(int64_t i) : v_(i) {}                                     // NOLINT
  Value(double d) : v_(d) {}                                      // NOLINT
  Value(std::string s);                                           // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}            // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                 // NOLINT
  Value(Dict d);                                                  // NOLINT
  Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}  // NOLINT
  Value(std::shared_ptr<Object> o) : v_(std::move(o)) {}          // NOLINT

  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value generator(std::vector<Value> items);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }  // not bool, unlike Python
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python's Number
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }  // list, tuple or generator
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  bool is_object() const { return kind() == Kind::kObject; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;   // int or bool
  double as_float() const;  // int, bool or float
  const std::string& as_string() const { return *std::get<Str>(v_); }
  const std::vector<Value>& as_list() const { return std::get<List>(v_)->items; }
  ListData::Shape list_shape() const { return std::get<List>(v_)->shape; }
  const Dict& as_dict() const { return *std::get<DictPtr>(v_); }
  const std::shared_ptr<const Callable>& as_callable() const { return std::get<Fn>(v_); }
  const std::shared_ptr<Object>& as_object() const { return std::get<Obj>(v_); }
  // The text an undefined value reports when it is used.
  std::string undefined_hint() const;

  // Nesting of lists and dicts (a scalar is 0): walks over values recurse this deep.
  uint32_t depth() const;

  // Python's bool(): empty strings and containers, 0, None and undefined are false.
  bool truthy() const;
  // Python's type name, as error messages show it ("str", "dict", "NoneType"...).
  std::string_view type_name() const;

  // Python's == (1 == 1.0 == True; a list never equals a tuple; dicts compare unordered).
  friend bool operator==(const Value& a, const Value& b);

 private:
  enum class Tag : uint8_t { kNone };
  struct Undefined {
    std::shared_ptr<const std::string> hint;
  };
  using Str = std::shared_ptr<const std::string>;
  using List = std::shared_ptr<const ListData>;
  using DictPtr = std::shared_ptr<const Dict>;
  using Fn = std::shared_ptr<const Callable>;
  using Obj = std::shared_ptr<Object>;

  explicit Value(Tag) : v_(Tag::kNone) {}
  static Value make_list(std::vector<Value> items, ListData::Shape shape);

  // The order of the alternatives is Kind's.
  std::variant<Undefined, Tag, bool, int64_t, double, Str, List, DictPtr, Fn, Obj> v_;
};

// A dict with Python's insertion order. Keys are scalars (str, int, float, bool, None); 1,
// 1.0 and True are the same key, as in Python. Lookups past a few entries go through a hash
// index, so a large dict from a request cannot make a template quadratic.
class Dict {
 public:
  using Item = std::pair<Value, Value>;

  // Sets key to value: a new key goes last, an existing one keeps its place. Keys must be
  // scalars (see key_ok).
  void set(Value key, Value value);
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  bool contains(const Value& key) const { return find(key) != nullptr; }

  const std::vector<Item>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  uint32_t depth() const { return depth_; }

  // Whether `key` can be a dict key (Python: hashable; here: a scalar).
  static bool key_ok(const Value& key);

 private:
  static constexpr size_t kIndexFrom = 8;
  void index(size_t i);

  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // canonical key -> position, when large
  uint32_t depth_ = 1;
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

class Interpreter;

// Something a template can call: a macro, a global such as range(), a bound method.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string_view name() const = 0;
  virtual Result<Value> call(Interpreter& in, Args& args) const = 0;
};

// A mutable object: namespace(), loop, joiner(). Attribute reads see the current state.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string_view type_name() const = 0;
  // The attribute, or undefined.
  virtual Value attr(std::string_view name) const = 0;
  // Only a namespace accepts `{% set ns.x = ... %}`.
  virtual Status set_attr(std::string_view name, Value value);
  // Python's repr(); `depth` bounds recursion through objects that hold themselves.
  virtual std::string repr(int depth) const = 0;
  // Drops what the object holds, at the end of a render: a namespace may hold itself, and
  // without a garbage collector that cycle would outlive the render.
  virtual void release() {}
};

// Python's str(): what {{ value }} prints. None prints "None", undefined "".
std::string to_str(const Value& v);
// Python's repr(): how a value prints inside a list or dict ('a', None, 1.5).
std::string to_repr(const Value& v);
// Python's ordering for <, sort and max: numbers with numbers, str with str, lists and tuples
// element by element. Other pairs are an error, as in Python.
Result<int> compare(const Value& a, const Value& b);
// Python's iteration: a list's items, a dict's keys, a str's characters; undefined is empty.
// Anything else is an error ("'int' object is not iterable").
Result<std::vector<Value>> iterate(const Value& v);

}  // namespace strata::jinja
