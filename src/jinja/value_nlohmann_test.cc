#include "jinja/value_nlohmann.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "jinja/json_test_util.h"

namespace strata::jinja {
namespace {

using testing::dumps;

TEST(JinjaNlohmann, OrderedJsonKeepsTheClientsKeyOrder) {
  const char* text = R"({"type": "function", "function": {"name": "f", "description": "d"}})";
  Result<Value> ordered = from_nlohmann(nlohmann::ordered_json::parse(text));
  ASSERT_TRUE(ordered.is_ok());
  EXPECT_EQ(dumps(*ordered), text);
  // nlohmann::json sorts keys: the template would see another order than the client sent.
  Result<Value> sorted = from_nlohmann(nlohmann::json::parse(text));
  ASSERT_TRUE(sorted.is_ok());
  EXPECT_EQ(dumps(*sorted),
            R"({"function": {"description": "d", "name": "f"}, "type": "function"})");
}

TEST(JinjaNlohmann, RoundTrip) {
  const auto j = nlohmann::ordered_json::parse(
      R"({"s": "é", "i": -3, "u": 18446744073709551615, "f": 0.5, "b": true, "n": null,
          "a": [1, [2, {"x": []}]], "o": {}})");
  Result<Value> v = from_nlohmann(j);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_TRUE(v->as_dict().find("u")->is_float());  // past int64
  Result<nlohmann::ordered_json> back = to_nlohmann<nlohmann::ordered_json>(*v);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ((*back)["a"], j["a"]);
  EXPECT_EQ((*back)["s"], "é");
  EXPECT_EQ(back->begin().key(), "s");

  Dict keys;
  keys.set(Value(1), Value::tuple({Value(true)}));
  Result<nlohmann::json> k = to_nlohmann<nlohmann::json>(Value(keys));
  ASSERT_TRUE(k.is_ok());
  EXPECT_EQ(k->dump(), R"({"1":[true]})");
  EXPECT_FALSE(to_nlohmann<nlohmann::json>(Value()).is_ok());
}

TEST(JinjaNlohmann, DepthLimit) {
  nlohmann::json deep = 1;
  for (int i = 0; i < 300; ++i) deep = nlohmann::json::array({deep});
  EXPECT_FALSE(from_nlohmann(deep).is_ok());
  EXPECT_TRUE(from_nlohmann(deep, 400).is_ok());
}

}  // namespace
}  // namespace strata::jinja
