// Values behave as Python's objects do for jinja2: equality, truth, str(), repr(), ordering,
// dict order; JSON is written as Python's json.dumps writes it and read as RFC 8259 says.
#include "jinja/value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "jinja/json.h"
#include "jinja/json_test_util.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

Value parse(std::string_view json) {
  Result<Value> v = parse_json(json, 64);
  EXPECT_TRUE(v.is_ok()) << json << ": " << v.status().message();
  return v.is_ok() ? *v : Value();
}

using testing::dumps;

TEST(JinjaValue, FloatReprIsPythons) {
  // repr(float) in Python 3: shortest round trip, scientific below 1e-4 and from 1e16.
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789.125, "123456789.125"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {1.5e-7, "1.5e-07"},
      {-2.5, "-2.5"},
      {-0.0, "-0.0"},
      {1e300, "1e+300"},
      {2.5e-320, "2.5e-320"},
      {NAN, "nan"},
      {-INFINITY, "-inf"},
      {123.0, "123.0"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
  };
  for (const auto& [d, want] : cases) EXPECT_EQ(float_repr(d), want) << want;
}

TEST(JinjaValue, StrAndRepr) {
  EXPECT_EQ(to_str(Value()), "");
  EXPECT_EQ(to_str(Value::none()), "None");
  EXPECT_EQ(to_str(Value(true)), "True");
  EXPECT_EQ(to_str(Value(int64_t{-12})), "-12");
  EXPECT_EQ(to_str(Value("it's")), "it's");
  EXPECT_EQ(to_repr(Value("it's")), "\"it's\"");
  EXPECT_EQ(to_repr(Value("a'b\"c\\\n\x01")), "'a\\'b\"c\\\\\\n\\x01'");
  EXPECT_EQ(to_repr(Value("é\xC2\xA0")), "'é\\xa0'");  // NBSP is not printable for Python
  EXPECT_EQ(to_repr(Value::list({Value(1), Value("a"), Value::none(), Value(1.5)})),
            "[1, 'a', None, 1.5]");
  EXPECT_EQ(to_repr(Value::tuple({Value(1)})), "(1,)");
  EXPECT_EQ(to_repr(Value::tuple({})), "()");
  EXPECT_EQ(to_repr(parse(R"({"b": [1, {"c": null}], "a": true})")),
            "{'b': [1, {'c': None}], 'a': True}");
}

TEST(JinjaValue, EqualityAndTruth) {
  EXPECT_EQ(Value(1), Value(1.0));
  EXPECT_EQ(Value(true), Value(1));
  EXPECT_FALSE(Value(1) == Value("1"));
  EXPECT_FALSE(Value::list({Value(1)}) == Value::tuple({Value(1)}));
  EXPECT_EQ(parse(R"({"a": 1, "b": 2})"), parse(R"({"b": 2, "a": 1})"));
  EXPECT_FALSE(parse(R"({"a": 1})") == parse(R"({"a": 2})"));
  EXPECT_EQ(Value(), Value());
  EXPECT_FALSE(Value() == Value::none());
  EXPECT_FALSE(Value().truthy());
  EXPECT_FALSE(Value("").truthy());
  EXPECT_FALSE(Value(0.0).truthy());
  EXPECT_FALSE(Value::list({}).truthy());
  EXPECT_TRUE(Value::generator({}).truthy());  // a generator object is always true
  EXPECT_TRUE(Value(" ").truthy());
}

TEST(JinjaValue, Ordering) {
  EXPECT_EQ(*compare(Value(1), Value(2.5)), -1);
  EXPECT_EQ(*compare(Value("b"), Value("a")), 1);
  EXPECT_EQ(*compare(Value("é"), Value("z")), 1);  // code point order
  EXPECT_EQ(*compare(Value::list({Value(1), Value(2)}), Value::list({Value(1)})), 1);
  Result<int> bad = compare(Value(1), Value("a"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "'<' not supported between instances of 'int' and 'str'");
}

TEST(JinjaValue, DictKeepsOrderAndPythonKeys) {
  Dict d;
  for (int i = 20; i > 0; --i) {
    std::string key(1, 'k');
    key += std::to_string(i);
    d.set(Value(key), Value(i));
  }
  d.set(Value("k7"), Value("again"));  // an existing key keeps its place
  ASSERT_EQ(d.size(), 20u);
  EXPECT_EQ(d.items()[0].first.as_string(), "k20");
  EXPECT_EQ(d.items()[13].second.as_string(), "again");
  EXPECT_EQ(d.find("k7")->as_string(), "again");  // found through the hash index (> 8 keys)
  EXPECT_EQ(d.find("nope"), nullptr);

  Dict n;
  n.set(Value(1), Value("int"));
  n.set(Value(1.0), Value("float"));  // 1 == 1.0 == True: one key, as in Python
  n.set(Value(true), Value("bool"));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n.items()[0].second.as_string(), "bool");
  for (int i = 2; i < 12; ++i) n.set(Value(i), Value(i));
  EXPECT_EQ(n.find(Value(1.0))->as_string(), "bool");
  EXPECT_EQ(n.find(Value(11.0))->as_int(), 11);
  EXPECT_FALSE(Dict::key_ok(Value::list({})));
}

TEST(JinjaValue, DepthIsTracked) {
  EXPECT_EQ(Value(1).depth(), 0u);
  EXPECT_EQ(parse("[[[1]], {\"a\": [2]}]").depth(), 3u);
}

TEST(JinjaValue, Iterate) {
  EXPECT_EQ(iterate(Value("aé😀"))->size(), 3u);
  EXPECT_EQ((*iterate(parse(R"({"x": 1, "y": 2})")))[1].as_string(), "y");
  EXPECT_TRUE(iterate(Value())->empty());
  EXPECT_FALSE(iterate(Value(3)).is_ok());
}

TEST(JinjaJson, DumpsAsPython) {
  const Value v = parse(R"({"name": "é \"q\" \n\t\u0001\u007f/", "n": [1, 2.5, 1e-07, null, true],
                            "empty": {}, "list": []})");
  // json.dumps(v, ensure_ascii=False): control characters escaped, the rest as is.
  EXPECT_EQ(dumps(v), R"({"name": "é \"q\" \n\t\u0001)"
                      "\x7f"
                      R"(/", "n": [1, 2.5, 1e-07, null, true], "empty": {}, "list": []})");
  JsonFormat indent;
  indent.indent = true;
  indent.indent_text = "  ";
  indent.item_separator = ",";
  EXPECT_EQ(dumps(parse(R"({"a": [1, {"b": []}], "c": {}})"), indent),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {}\n}");
  JsonFormat ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(dumps(Value("é😀\x7f"), ascii), R"("\u00e9\ud83d\ude00\u007f")");
  JsonFormat sorted;
  sorted.sort_keys = true;
  sorted.item_separator = ",";
  sorted.key_separator = ":";
  EXPECT_EQ(dumps(parse(R"({"b": 1, "a": {"d": 2, "c": 3}})"), sorted),
            R"({"a":{"c":3,"d":2},"b":1})");
  Dict keys;
  keys.set(Value(1), Value("i"));
  keys.set(Value(2.5), Value("f"));
  keys.set(Value(false), Value("b"));
  keys.set(Value::none(), Value("n"));
  EXPECT_EQ(dumps(Value(keys)), R"({"1": "i", "2.5": "f", "false": "b", "null": "n"})");
  EXPECT_EQ(dumps(Value::tuple({Value(NAN), Value(INFINITY)})), "[NaN, Infinity]");

  std::string out;
  Status st = dump_json(Value(), JsonFormat{}, out);
  EXPECT_EQ(st.message(), "Object of type Undefined is not JSON serializable");
  EXPECT_FALSE(dump_json(Value::generator({}), JsonFormat{}, out).is_ok());
}

TEST(JinjaJson, Parses) {
  const Value v =
      parse(R"( {"z": 1, "a": [true, false, null, -0.5, 12, 1e400, "\u00e9\ud83d\ude00\n"],
                             "z": 2} )");
  ASSERT_TRUE(v.is_dict());
  ASSERT_EQ(v.as_dict().size(), 2u);
  EXPECT_EQ(v.as_dict().items()[0].first.as_string(), "z");  // first place, last value
  EXPECT_EQ(v.as_dict().items()[0].second.as_int(), 2);
  const auto& a = v.as_dict().find("a")->as_list();
  EXPECT_TRUE(a[4].is_int());
  EXPECT_TRUE(std::isinf(a[5].as_float()));
  EXPECT_EQ(a[6].as_string(), "é😀\n");
  EXPECT_TRUE(parse("123456789012345678901234").is_float());  // past int64

  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "\"\x01\"", "[1] x", "\"\\q\"", "nul",
                          "{1: 2}", "\"\\u12\"", "-", "1.", "1e"}) {
    EXPECT_FALSE(parse_json(bad, 64).is_ok()) << bad;
  }
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  Result<Value> too_deep = parse_json(deep, 64);
  ASSERT_FALSE(too_deep.is_ok());
  EXPECT_NE(too_deep.status().message().find("deeper than 64"), std::string::npos);
  EXPECT_TRUE(parse_json(deep, 100).is_ok());
}

TEST(JinjaText, PythonStringOperations) {
  // str.strip() strips Unicode whitespace (NBSP, ideographic space), not other characters.
  EXPECT_EQ(strip("\xC2\xA0 \t a b \xE3\x80\x80\n", nullptr, true, true), "a b");
  const std::string chars = "xé";
  EXPECT_EQ(strip("éxaxé", &chars, true, true), "a");
  EXPECT_EQ(split_whitespace("  a \t b\n\nc ", -1), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split_whitespace(" a b c ", 1), (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(split_on("a,,b", ",", -1), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(rsplit_on("a,b,c", ",", 1), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_EQ(split_lines("a\nb\r\nc\rd\xE2\x80\xA8"
                        "e\n"),
            (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(replace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(title("hello big-world (x) o'neil"), "Hello Big-World (X) O'neil");
  EXPECT_EQ(capitalize("hELLO"), "Hello");
  // Text that is not UTF-8 still has a length and slices back to its bytes.
  EXPECT_EQ(code_point_count("a\xFF\xC3"), 3u);
  EXPECT_EQ(code_point_offsets("aé").back(), 3u);
}

}  // namespace
}  // namespace strata::jinja
