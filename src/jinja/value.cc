#include "jinja/value.h"

#include <algorithm>
#include <cmath>

#include "jinja/text.h"

namespace strata::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  std::get<Undefined>(v.v_).hint = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value::Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}

Value::Value(Dict d) : v_(std::make_shared<const Dict>(std::move(d))) {}

Value Value::make_list(std::vector<Value> items, ListData::Shape shape) {
  auto data = std::make_shared<ListData>();
  uint32_t depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  data->items = std::move(items);
  data->shape = shape;
  data->depth = depth + 1;
  Value out;
  out.v_ = List(std::move(data));
  return out;
}

Value Value::list(std::vector<Value> items) {
  return make_list(std::move(items), ListData::Shape::kList);
}

Value Value::tuple(std::vector<Value> items) {
  return make_list(std::move(items), ListData::Shape::kTuple);
}

Value Value::generator(std::vector<Value> items) {
  return make_list(std::move(items), ListData::Shape::kGenerator);
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_float() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

std::string Value::undefined_hint() const {
  const auto& hint = std::get<Undefined>(v_).hint;
  return hint ? *hint : "value is undefined";
}

uint32_t Value::depth() const {
  if (is_list()) return std::get<List>(v_)->depth;
  if (is_dict()) return as_dict().depth();
  return 0;
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return list_shape() == ListData::Shape::kGenerator || !as_list().empty();
    case Kind::kDict:
      return !as_dict().empty();
    case Kind::kCallable:
    case Kind::kObject:
      return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (list_shape()) {
        case ListData::Shape::kTuple:
          return "tuple";
        case ListData::Shape::kGenerator:
          return "generator";
        default:
          return "list";
      }
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
    case Kind::kObject:
      return as_object()->type_name();
  }
  return "object";
}

bool operator==(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      const bool gen = a.list_shape() == ListData::Shape::kGenerator;
      if (gen || a.list_shape() != b.list_shape()) return gen && &a.as_list() == &b.as_list();
      return a.as_list() == b.as_list();
    }
    case K::kDict: {
      const Dict& da = a.as_dict();
      const Dict& db = b.as_dict();
      if (da.size() != db.size()) return false;
      for (const auto& [k, v] : da.items()) {
        const Value* other = db.find(k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
    case K::kCallable:
      return a.as_callable() == b.as_callable();
    case K::kObject:
      return a.as_object() == b.as_object();
    default:
      return false;
  }
}

namespace {

// The hash-index key: equal Python keys (1, 1.0, True) give the same text.
std::string canonical_key(const Value& k) {
  std::string key;
  if (k.is_string()) {
    key = 's';
    key += k.as_string();
  } else if (k.is_none()) {
    key = 'n';
  } else if (k.is_float() &&
             !(k.as_float() == std::trunc(k.as_float()) && std::fabs(k.as_float()) < 9.2e18)) {
    key = 'f';
    key += float_repr(k.as_float());
  } else {
    key = 'i';
    key += std::to_string(k.is_float() ? static_cast<int64_t>(k.as_float()) : k.as_int());
  }
  return key;
}

}  // namespace

bool Dict::key_ok(const Value& key) { return key.is_string() || key.is_number() || key.is_none(); }

void Dict::index(size_t i) { index_.emplace(canonical_key(items_[i].first), i); }

void Dict::set(Value key, Value value) {
  for (size_t i = 0; index_.empty() && i < items_.size(); ++i) {
    if (items_[i].first == key) {
      items_[i].second = std::move(value);
      depth_ = 1;
      for (const Item& it : items_) depth_ = std::max(depth_, it.second.depth() + 1);
      return;
    }
  }
  if (!index_.empty()) {
    auto it = index_.find(canonical_key(key));
    if (it != index_.end()) {
      items_[it->second].second = std::move(value);
      depth_ = 1;
      for (const Item& item : items_) depth_ = std::max(depth_, item.second.depth() + 1);
      return;
    }
  }
  depth_ = std::max(depth_, value.depth() + 1);
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() == kIndexFrom) {
    for (size_t i = 0; i < items_.size(); ++i) index(i);
  } else if (items_.size() > kIndexFrom) {
    index(items_.size() - 1);
  }
}

const Value* Dict::find(const Value& key) const {
  if (!key_ok(key)) return nullptr;
  if (key.is_string()) return find(std::string_view(key.as_string()));
  if (!index_.empty()) {
    auto it = index_.find(canonical_key(key));
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  for (const Item& it : items_) {
    if (it.first == key) return &it.second;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  if (!index_.empty()) {
    std::string k = "s";
    k += key;
    auto it = index_.find(k);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  for (const Item& it : items_) {
    if (it.first.is_string() && it.first.as_string() == key) return &it.second;
  }
  return nullptr;
}

Status Object::set_attr(std::string_view name, Value) {
  return invalid_argument("cannot assign attribute '" + std::string(name) + "' on a " +
                          std::string(type_name()) + " object (only on a namespace)");
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.as_string();
    default:
      return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return float_repr(v.as_float());
    case Value::Kind::kString:
      return str_repr(v.as_string());
    case Value::Kind::kList: {
      const auto shape = v.list_shape();
      if (shape == ListData::Shape::kGenerator) return "<generator object>";
      const bool tuple = shape == ListData::Shape::kTuple;
      std::string out = tuple ? "(" : "[";
      const auto& items = v.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += to_repr(items[i]);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items()) {
        if (!first) out += ", ";
        first = false;
        out += to_repr(k) + ": " + to_repr(val);
      }
      return out + "}";
    }
    case Value::Kind::kCallable:
      return "<function " + std::string(v.as_callable()->name()) + ">";
    case Value::Kind::kObject:
      return v.as_object()->repr(8);
  }
  return "";
}

Result<int> compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float();
      const double y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list_shape() == b.list_shape() &&
      a.list_shape() != ListData::Shape::kGenerator) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] == y[i]) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) {
    return invalid_argument((a.is_undefined() ? a : b).undefined_hint());
  }
  return invalid_argument("'<' not supported between instances of '" + std::string(a.type_name()) +
                          "' and '" + std::string(b.type_name()) + "'");
}

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& [k, val] : v.as_dict().items()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      std::vector<Value> chars;
      for (size_t i = 0; i < s.size();) {
        const size_t at = i;
        utf8_next(s, i);
        chars.emplace_back(std::string_view(s).substr(at, i - at));
      }
      return chars;
    }
    default:
      std::string what(1, '\'');
      what += v.type_name();
      return invalid_argument(what + "' object is not iterable");
  }
}

}  // namespace strata::jinja
