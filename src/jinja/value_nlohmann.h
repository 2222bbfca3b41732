// Values to and from nlohmann::json, for the server, which parses requests with it. The only
// file of src/jinja that knows nlohmann-json; it is header-only so that nothing else links it.
//
// Key order: nlohmann::json keeps object keys sorted, nlohmann::ordered_json in the order of the
// text. A template's tojson writes keys in the Value's order, and Python keeps the client's
// order: parse a request with ordered_json for the prompt to equal llama-server's and
// transformers'. Both work here (any basic_json).
#pragma once

#include <cmath>
#include <string>
#include <utility>

#include "core/status.h"
#include "jinja/json.h"
#include "jinja/value.h"

namespace strata::jinja {

// The Value of a JSON document; nesting deeper than `max_depth` is an error naming the limit.
template <typename Json>
Result<Value> from_nlohmann(const Json& j, int max_depth = 256) {
  if (max_depth < 0) {
    return invalid_argument("JSON nested deeper than the limit of the chat template's values");
  }
  switch (j.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return Value::none();
    case Json::value_t::boolean:
      return Value(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Json::value_t::number_float:
      return Value(j.template get<double>());
    case Json::value_t::string:
      return Value(j.template get_ref<const std::string&>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const Json& e : j) {
        STRATA_ASSIGN_OR_RETURN(Value v, from_nlohmann(e, max_depth - 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        STRATA_ASSIGN_OR_RETURN(Value v, from_nlohmann(it.value(), max_depth - 1));
        d.set(Value(it.key()), std::move(v));
      }
      return Value(std::move(d));
    }
    case Json::value_t::binary:
      break;
  }
  return invalid_argument("binary JSON values have no Value");
}

// The JSON of a Value: what Python's json module would make of it (tuples are arrays, dict keys
// that are not strings become strings as json.dumps writes them). Undefined, callables and
// objects are an error.
template <typename Json>
Result<Json> to_nlohmann(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      return Json(nullptr);
    case Value::Kind::kBool:
      return Json(v.as_bool());
    case Value::Kind::kInt:
      return Json(v.as_int());
    case Value::Kind::kFloat:
      return Json(v.as_float());
    case Value::Kind::kString:
      return Json(v.as_string());
    case Value::Kind::kList: {
      Json a = Json::array();
      for (const Value& e : v.as_list()) {
        STRATA_ASSIGN_OR_RETURN(Json x, to_nlohmann<Json>(e));
        a.push_back(std::move(x));
      }
      return a;
    }
    case Value::Kind::kDict: {
      Json o = Json::object();
      for (const auto& [k, e] : v.as_dict().items()) {
        std::string key;
        if (k.is_string()) {
          key = k.as_string();
        } else {
          // json.dumps' spelling of a non-string key: "1", "2.5", "true", "null".
          STRATA_RETURN_IF_ERROR(dump_json(k, JsonFormat{}, key));
        }
        STRATA_ASSIGN_OR_RETURN(Json x, to_nlohmann<Json>(e));
        o[key] = std::move(x);
      }
      return o;
    }
    default:
      break;
  }
  return invalid_argument("Object of type " + std::string(v.type_name()) +
                          " is not JSON serializable");
}

}  // namespace strata::jinja
