#include "jinja/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/text.h"

namespace strata::jinja {
namespace {

void dump_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = utf8_next(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    char buf[16];
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out += s.substr(at, i - at);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

Result<std::string> json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.as_string();
    case Value::Kind::kBool:
      return std::string(k.as_bool() ? "true" : "false");
    case Value::Kind::kNone:
      return std::string("null");
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    case Value::Kind::kFloat:
      return json_float(k.as_float());
    default:
      return invalid_argument("keys must be str, int, float, bool or None, not " +
                              std::string(k.type_name()));
  }
}

void newline_indent(const JsonFormat& f, int level, std::string& out) {
  out += '\n';
  for (int i = 0; i < level; ++i) out += f.indent_text;
}

Status dump(const Value& v, const JsonFormat& f, int level, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::ok();
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return Status::ok();
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return Status::ok();
    case Value::Kind::kFloat:
      out += json_float(v.as_float());
      return Status::ok();
    case Value::Kind::kString:
      dump_string(v.as_string(), f.ensure_ascii, out);
      return Status::ok();
    case Value::Kind::kList: {
      if (v.list_shape() == ListData::Shape::kGenerator) break;
      const auto& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += f.item_separator;
        if (f.indent) newline_indent(f, level + 1, out);
        STRATA_RETURN_IF_ERROR(dump(items[i], f, level + 1, out));
      }
      if (f.indent) newline_indent(f, level, out);
      out += ']';
      return Status::ok();
    }
    case Value::Kind::kDict: {
      const Dict& d = v.as_dict();
      if (d.empty()) {
        out += "{}";
        return Status::ok();
      }
      std::vector<const Dict::Item*> items;
      items.reserve(d.size());
      for (const Dict::Item& it : d.items()) items.push_back(&it);
      if (f.sort_keys) {
        for (const Dict::Item* it : items) {
          if (!it->first.is_string()) {
            return invalid_argument("sort_keys needs str keys, found " +
                                    std::string(it->first.type_name()));
          }
        }
        std::stable_sort(items.begin(), items.end(), [](const Dict::Item* a, const Dict::Item* b) {
          return a->first.as_string() < b->first.as_string();
        });
      }
      out += '{';
      bool first = true;
      for (const Dict::Item* it : items) {
        if (!first) out += f.item_separator;
        first = false;
        if (f.indent) newline_indent(f, level + 1, out);
        STRATA_ASSIGN_OR_RETURN(std::string key, json_key(it->first));
        dump_string(key, f.ensure_ascii, out);
        out += f.key_separator;
        STRATA_RETURN_IF_ERROR(dump(it->second, f, level + 1, out));
      }
      if (f.indent) newline_indent(f, level, out);
      out += '}';
      return Status::ok();
    }
    default:
      break;
  }
  return invalid_argument("Object of type " + std::string(v.type_name()) +
                          " is not JSON serializable");
}

// A recursive-descent reader; `depth` counts open arrays and objects.
class Reader {
 public:
  Reader(std::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  Result<Value> document() {
    STRATA_ASSIGN_OR_RETURN(Value v, value(0));
    skip_space();
    if (pos_ != s_.size()) return fail("extra data after the JSON value");
    return v;
  }

 private:
  Status fail(const std::string& what) const {
    return invalid_argument("JSON: " + what + " at offset " + std::to_string(pos_));
  }

  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Result<Value> value(int depth) {
    skip_space();
    if (pos_ >= s_.size()) return fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{' || c == '[') {
      if (depth >= max_depth_) {
        return fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
      }
      return c == '{' ? object(depth + 1) : array(depth + 1);
    }
    if (c == '"') {
      STRATA_ASSIGN_OR_RETURN(std::string str, string());
      return Value(std::move(str));
    }
    if (literal("true")) return Value(true);
    if (literal("false")) return Value(false);
    if (literal("null")) return Value::none();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    return fail(std::string("unexpected character '") + c + "'");
  }

  Result<Value> array(int depth) {
    ++pos_;
    std::vector<Value> items;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Value::list(std::move(items));
    }
    while (true) {
      STRATA_ASSIGN_OR_RETURN(Value v, value(depth));
      items.push_back(std::move(v));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return Value::list(std::move(items));
      }
      return fail("expected ',' or ']'");
    }
  }

  Result<Value> object(int depth) {
    ++pos_;
    Dict d;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Value(std::move(d));
    }
    while (true) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
      STRATA_ASSIGN_OR_RETURN(std::string key, string());
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      STRATA_ASSIGN_OR_RETURN(Value v, value(depth));
      d.set(Value(std::move(key)), std::move(v));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return Value(std::move(d));
      }
      return fail("expected ',' or '}'");
    }
  }

  Result<uint32_t> hex4() {
    if (s_.size() - pos_ < 4) return fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex_value(s_[pos_++]);
      if (d < 0) return fail("bad \\u escape");
      v = (v << 4) | static_cast<uint32_t>(d);
    }
    return v;
  }

  Result<std::string> string() {
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<uint8_t>(c) < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (++pos_ >= s_.size()) return fail("unterminated escape");
      const char e = s_[pos_++];
      if (const char ctl = control_escape(e)) {
        out += ctl;
        continue;
      }
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'u': {
          STRATA_ASSIGN_OR_RETURN(uint32_t cp, hex4());
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            const size_t save = pos_;
            pos_ += 2;
            STRATA_ASSIGN_OR_RETURN(uint32_t lo, hex4());
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          // A lone surrogate cannot be UTF-8: write U+FFFD for it.
          if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
          utf8_append(out, cp);
          break;
        }
        default:
          return fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  Result<Value> number() {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    const size_t int_at = pos_;
    if (digits() == 0) return fail("bad number");
    if (s_[int_at] == '0' && pos_ - int_at > 1) return fail("leading zero in a number");
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return fail("bad number");
      is_float = true;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return fail("bad number");
      is_float = true;
    }
    const std::string_view text = s_.substr(start, pos_ - start);
    if (!is_float) {
      int64_t i = 0;
      const auto res = std::from_chars(text.data(), text.data() + text.size(), i);
      if (res.ec == std::errc() && res.ptr == text.data() + text.size()) return Value(i);
    }
    // Integers past int64 become floats (Python would keep them exact). strtod: overflow
    // gives inf and underflow 0, as Python's float() does.
    return Value(std::strtod(std::string(text).c_str(), nullptr));
  }

  std::string_view s_;
  int max_depth_;
  size_t pos_ = 0;
};

}  // namespace

Status dump_json(const Value& v, const JsonFormat& format, std::string& out) {
  return dump(v, format, 0, out);
}

Result<Value> parse_json(std::string_view text, int max_depth) {
  return Reader(text, max_depth).document();
}

}  // namespace strata::jinja
