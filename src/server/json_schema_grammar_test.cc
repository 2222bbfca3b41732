#include "server/json_schema_grammar.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/grammar.h"

namespace strata::server {
// Named, not anonymous: the unity build puts several test files in one unit.
namespace json_schema_grammar_test {

using Json = nlohmann::ordered_json;

// A schema and JSON texts labelled valid or invalid under it. The grammar must accept (and
// complete) exactly the valid ones; the jsonschema oracle must agree with every label.
struct SchemaCase {
  const char* name;
  const char* schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

std::shared_ptr<const Grammar> grammar_for(const std::string& schema_text) {
  const Json schema = Json::parse(schema_text);
  Result<std::string> gbnf = json_schema_to_gbnf(schema);
  EXPECT_TRUE(gbnf.is_ok()) << schema_text << "\n" << gbnf.status().message();
  if (!gbnf.is_ok()) return nullptr;
  auto grammar = Grammar::parse(*gbnf);
  EXPECT_TRUE(grammar.is_ok()) << *gbnf << "\n" << grammar.status().message();
  if (!grammar.is_ok()) return nullptr;
  return *grammar;
}

// The text is a whole sentence of the grammar. Fed in two pieces, split inside, so that a
// matcher state carried between accept() calls is exercised too.
bool grammar_matches(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  GrammarMatcher matcher(grammar);
  const size_t half = text.size() / 2;
  if (!matcher.accept(std::string_view(text).substr(0, half)).is_ok()) return false;
  if (!matcher.accept(std::string_view(text).substr(half)).is_ok()) return false;
  return matcher.complete();
}

// The first Python that has jsonschema: the one on PATH (a virtualenv's, say), else the
// system's. Empty when neither has it.
const std::string& python_with_jsonschema() {
  static const std::string python = [] {
    for (const char* candidate : {"python3", "/usr/bin/python3"}) {
      const std::string check = std::string(candidate) + " -c 'import jsonschema' >/dev/null 2>&1";
      if (std::system(check.c_str()) == 0) return std::string(candidate);
    }
    return std::string();
  }();
  return python;
}

bool python_jsonschema_available() { return !python_with_jsonschema().empty(); }

// One schema and the instance texts to validate against it.
struct OracleQuery {
  Json schema;
  std::vector<std::string> texts;
};

// Python's jsonschema (Draft 2020-12) on each query's instance texts: 1 valid, 0 invalid (a text
// that is not JSON is invalid), one list per query. All in one Python process: starting one and
// importing jsonschema takes longer than validating a few thousand instances. nullopt when the
// oracle could not run.
std::optional<std::vector<std::vector<bool>>> jsonschema_verdicts(
    const std::vector<OracleQuery>& queries) {
  static const char kScript[] = R"py(
import json, sys
from jsonschema import Draft202012Validator
for query in json.load(open(sys.argv[1], encoding="utf-8")):
    validator = Draft202012Validator(query["schema"])
    out = []
    for text in query["instances"]:
        try:
            out.append("1" if validator.is_valid(json.loads(text)) else "0")
        except ValueError:
            out.append("0")
    print("".join(out) + ".")
)py";
  char script_path[] = "/tmp/strata_jsg_script_XXXXXX";
  char data_path[] = "/tmp/strata_jsg_data_XXXXXX";
  const int script_fd = mkstemp(script_path);
  const int data_fd = mkstemp(data_path);
  if (script_fd < 0 || data_fd < 0) return std::nullopt;
  close(script_fd);
  close(data_fd);
  std::ofstream(script_path) << kScript;
  Json data = Json::array();
  for (const OracleQuery& q : queries) {
    data.push_back({{"schema", q.schema}, {"instances", q.texts}});
  }
  std::ofstream(data_path) << data.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string command = python_with_jsonschema() + " " + script_path + " " + data_path;
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
    pclose(pipe);
  }
  std::remove(script_path);
  std::remove(data_path);
  // One line per query, each ended by '.' (so that an empty list is a line too).
  std::vector<std::vector<bool>> verdicts;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.back() != '.') return std::nullopt;
    line.pop_back();
    if (verdicts.size() == queries.size() || line.size() != queries[verdicts.size()].texts.size()) {
      return std::nullopt;
    }
    std::vector<bool>& v = verdicts.emplace_back();
    for (char c : line) v.push_back(c == '1');
  }
  if (verdicts.size() != queries.size()) return std::nullopt;
  return verdicts;
}

const std::vector<SchemaCase>& schema_cases() {
  static const std::vector<SchemaCase> cases = {
      {"any value",
       "{}",
       {"1", "\"x\"", "[1,{\"a\":null}]", "{\"a\":[true,false]}", "null", "-0.5e3", "{}", "[]"},
       {"{", "[1,]", "tru", "{\"a\" 1}", "'x'", "01", "[1 2]"}},
      {"true schema", "true", {"false", "[[[]]]", "\"\""}, {"nul", "{,}"}},
      {"person: nested object, required and optional",
       R"({"type":"object","properties":{
            "name":{"type":"string","description":"full name"},
            "age":{"type":"integer"},
            "address":{"type":"object","properties":{"city":{"type":"string"},
                       "zip":{"type":"string"}},"required":["city"],"additionalProperties":false},
            "tags":{"type":"array","items":{"type":"string"}}},
          "required":["name","age"],"additionalProperties":false})",
       {R"({"name":"Ann","age":30})", R"({"name":"Ann","age":30,"address":{"city":"Oslo"}})",
        R"({"name":"Ann","age":-3,"address":{"city":"Oslo","zip":"0150"},"tags":["a","b"]})",
        R"({"name":"","age":0,"tags":[]})", R"({"name":"Ann","age":30,"tags":["x"]})",
        "{ \"name\": \"Ann\",\n  \"age\": 30 }",
        "{\n  \"name\": \"Ann\",\n  \"age\": 30,\n  \"tags\": [\n    \"a\"\n  ]\n}"},
       {R"({"name":"Ann"})", R"({"age":30})", R"({"name":"Ann","age":30.5})",
        R"({"name":"Ann","age":"30"})", R"({"name":"Ann","age":30,"address":{}})",
        R"({"name":"Ann","age":30,"address":{"city":"Oslo","country":"NO"}})",
        R"({"name":"Ann","age":30,"extra":1})", R"({"name":"Ann","age":30,"tags":[1]})", "[]",
        "\"Ann\"", R"({"name":"Ann","age":30)", R"({"name":Ann,"age":30})"}},
      {"pydantic optional with null default",
       R"({"properties":{"name":{"title":"Name","type":"string"},
            "nick":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Nick"}},
          "required":["name"],"title":"User","type":"object"})",
       {R"({"name":"a"})", R"({"name":"a","nick":null})", R"({"name":"a","nick":"b"})"},
       {R"({"nick":"b"})", R"({"name":"a","nick":1})", R"({"name":null})"}},
      {"array with minItems and maxItems",
       R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})",
       {"[1,2]", "[1,2,3,4]", "[ 1, 2, 3 ]", "[0,-1,2]"},
       {"[]", "[1]", "[1,2,3,4,5]", "[1,\"a\"]", "{}", "[1,2,]"}},
      {"array with minItems only",
       R"({"type":"array","minItems":1})",
       {"[1]", "[null,\"a\",{}]"},
       {"[]", "1"}},
      {"array with maxItems 0", R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"}},
      {"prefixItems with items false",
       R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {"[]", "[\"a\"]", "[\"a\",1]"},
       {"[1]", "[\"a\",\"b\"]", "[\"a\",1,2]"}},
      {"prefixItems then items",
       R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],
           "items":{"type":"boolean"},"minItems":1,"maxItems":4})",
       {"[\"a\"]", "[\"a\",1]", "[\"a\",1,true]", "[\"a\",1,true,false]"},
       {"[]", "[\"a\",1,2]", "[\"a\",1,true,false,true]", "[\"a\",true]"}},
      {"enum of mixed values",
       R"({"enum":["red","green",1,null,{"a":[1,2]},true,2.5]})",
       {"\"red\"", "\"green\"", "1", "null", R"({"a":[1,2]})", "true", "2.5"},
       {"\"blue\"", "2", "false", R"({"a":[1]})", "\"Red\"", "\"red\"x"}},
      {"const string", R"({"const":"x"})", {"\"x\""}, {"\"y\"", "\"xx\""}},
      {"const object", R"({"const":{"k":[1,"v"]}})", {R"({"k":[1,"v"]})"}, {R"({"k":[1]})"}},
      {"enum filtered by type", R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"}},
      {"anyOf string or null",
       R"({"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]})",
       {"\"abc\"", "null", "\"\""},
       {"\"abcd\"", "1"}},
      {"oneOf of disjoint objects",
       R"({"oneOf":[
            {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},
             "required":["kind","x"],"additionalProperties":false},
            {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},
             "required":["kind","y"],"additionalProperties":false}]})",
       {R"({"kind":"a","x":1})", R"({"kind":"b","y":"s"})"},
       {R"({"kind":"a","y":"s"})", R"({"kind":"c","x":1})"}},
      {"type list",
       R"({"type":["integer","null"]})",
       {"5", "null", "-7"},
       {"5.5", "\"5\"", "true"}},
      {"type list with lengths",
       R"({"type":["string","boolean"],"minLength":2})",
       {"\"ab\"", "true"},
       {"\"a\"", "null"}},
      {"recursive tree through $defs",
       R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
            "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
            "required":["value","children"],"additionalProperties":false}},
          "$ref":"#/$defs/node"})",
       {R"({"value":1,"children":[]})",
        R"({"value":1,"children":[{"value":2,"children":[{"value":3,"children":[]}]},)"
        R"({"value":4,"children":[]}]})"},
       {R"({"value":1})", R"({"value":1,"children":[{"value":2}]})",
        R"({"value":1,"children":[1]})"}},
      {"linked list through # and definitions",
       R"({"type":"object","properties":{"v":{"$ref":"#/definitions/text"},
            "next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},
          "required":["v","next"],"additionalProperties":false,
          "definitions":{"text":{"type":"string"}}})",
       {R"({"v":"a","next":null})", R"({"v":"a","next":{"v":"b","next":null}})"},
       {R"({"v":"a"})", R"({"v":"a","next":{"v":1,"next":null}})"}},
      {"strings with escapes and unicode",
       R"({"type":"string"})",
       {R"("a\"b")", R"("\\")", R"("\/")", R"("\b\f\n\r\t")", R"("\u00e9")", "\"\xC3\xA9\"",
        "\"\xE6\x97\xA5\xE6\x9C\xAC\"", "\"\xF0\x9F\x98\x80\"", R"("\ud83d\ude00")", "\"\""},
       {"\"a\nb\"", R"("\x41")", R"("\u12")", "'x'", "\"a", "\"a\x01\""}},
      {"string lengths count code points",
       R"({"type":"string","minLength":2,"maxLength":3})",
       {"\"ab\"", "\"abc\"", "\"\xC3\xA9\xE6\x97\xA5\"", R"("\n\t")",
        "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\"", R"("\ud83d\ude00a")"},
       {"\"a\"", "\"abcd\"", R"("\ud83d\ude00")", "\"\xF0\x9F\x98\x80\"", "\"\""}},
      {"integer",
       R"({"type":"integer"})",
       {"0", "-5", "123", "-0", "9999999999999999"},
       {"1.5", "\"1\"", "-", "01", "+1", "true"}},
      {"number",
       R"({"type":"number"})",
       {"0", "-1.5", "1e10", "2.5E-3", "10", "1.0", "-0.0"},
       {"\"1\"", "01", "1.", ".5", "-", "1e", "[1]"}},
      {"integer or number", R"({"type":["integer","number"]})", {"1", "1.5"}, {"\"1\""}},
      {"additionalProperties true after known ones",
       R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
       {"{}", R"({"a":1})", R"({"a":1,"b":"x"})", R"({"b":[1]})", R"({"ab":1})", R"({"":1})",
        R"({"b":1,"c":2})", R"({"a":1,"b":1,"c":{}})"},
       {R"({"a":"x"})", R"({"a":1,"a":"x"})", R"({"a":1,"b":})"}},
      {"additionalProperties false",
       R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false})",
       {"{}", R"({"a":1})"},
       {R"({"b":1})", R"({"a":1,"b":2})", "[]"}},
      {"additionalProperties schema",
       R"({"type":"object","properties":{"a":{"type":"integer"}},
           "additionalProperties":{"type":"string"}})",
       {R"({"a":1,"b":"x"})", R"({"b":"x"})", R"({"b":"x","c":"y"})"},
       {R"({"b":1})", R"({"a":"x"})", R"({"a":1,"b":null})"}},
      {"map of integers",
       R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {"{}", R"({"x":1,"y":2})", R"({"a\"b":3})"},
       {R"({"x":"1"})", "[]"}},
      {"extra keys avoid declared names",
       "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"type\":"
       "\"integer\"},\"b\\\"c\":{\"type\":\"integer\"},\"\xC3\xA9\":{\"type\":\"integer\"}},"
       "\"additionalProperties\":{\"type\":\"string\"}}",
       {R"({"abc":"s"})", R"({"ac":"s"})", R"({"x":"s"})",
        "{\"\xC3\xA9"
        "a\":\"s\"}",
        R"({"b":"s"})", R"({"b\"":"s"})", R"({"b\"cd":"s"})", R"({"a":1,"zz":"s"})",
        R"({"a":1,"ab":2,"b\"c":3,"q":"s"})"},
       {R"({"ab":"s"})", R"({"a":"s"})", "{\"\xC3\xA9\":\"s\"}", R"({"b\"c":"s"})",
        R"({"a":1,"ab":"s"})"}},
      {"allOf merges object schemas",
       R"({"allOf":[{"$ref":"#/$defs/base"},
            {"properties":{"b":{"type":"integer"}},"required":["b"]}],
          "$defs":{"base":{"type":"object","properties":{"a":{"type":"string"}},
            "required":["a"]}}})",
       {R"({"a":"x","b":1})"},
       {R"({"a":"x"})", R"({"b":1})", R"({"a":1,"b":1})"}},
      {"allOf of one schema",
       R"({"allOf":[{"type":"boolean"}],"description":"flag"})",
       {"true"},
       {"1"}},
      {"untyped properties mean an object",
       R"({"properties":{"a":{"type":"boolean"}},"required":["a"]})",
       {R"({"a":true})"},
       {R"({"a":1})", "{}"}},
  };
  return cases;
}

// Integer bounds, checked on every integer of a window around them.
struct IntegerBoundsCase {
  const char* schema;
  int lo_probe, hi_probe;
};
const IntegerBoundsCase kIntegerBoundsCases[] = {
    {R"({"type":"integer","minimum":-15,"maximum":120})", -40, 140},
    {R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1000})", -20, 1020},
    {R"({"type":"integer","minimum":17})", -30, 260},
    {R"({"type":"integer","maximum":-3})", -130, 30},
    {R"({"type":"integer","minimum":-1234,"maximum":-987})", -1300, -900},
    {R"({"type":"integer","minimum":99,"maximum":1001})", 80, 1030},
    {R"({"type":"integer","minimum":0})", -20, 120},
    {R"({"type":"integer","minimum":2.5,"exclusiveMaximum":7.5})", -5, 15},
    {R"({"type":"integer","maximum":5,"minimum":5})", 0, 10},
};

TEST(JsonSchemaGrammar, GrammarAcceptsTheValidAndRejectsTheInvalid) {
  for (const SchemaCase& c : schema_cases()) {
    SCOPED_TRACE(c.name);
    auto grammar = grammar_for(c.schema);
    ASSERT_NE(grammar, nullptr);
    for (const std::string& text : c.valid) {
      EXPECT_TRUE(grammar_matches(grammar, text)) << "valid, but refused: " << text;
    }
    for (const std::string& text : c.invalid) {
      EXPECT_FALSE(grammar_matches(grammar, text)) << "invalid, but accepted: " << text;
    }
  }
}

// The labels above are what jsonschema says, so the grammar agrees with it on every instance.
TEST(JsonSchemaGrammar, LabelsAgreeWithJsonschema) {
  if (!python_jsonschema_available()) GTEST_SKIP() << "needs python3 with jsonschema";
  std::vector<OracleQuery> queries;
  for (const SchemaCase& c : schema_cases()) {
    std::vector<std::string> texts = c.valid;
    texts.insert(texts.end(), c.invalid.begin(), c.invalid.end());
    queries.push_back({Json::parse(c.schema), std::move(texts)});
  }
  auto verdicts = jsonschema_verdicts(queries);
  ASSERT_TRUE(verdicts.has_value()) << "the jsonschema oracle did not run";
  size_t checked = 0;
  for (size_t q = 0; q < queries.size(); ++q) {
    const SchemaCase& c = schema_cases()[q];
    SCOPED_TRACE(c.name);
    for (size_t i = 0; i < queries[q].texts.size(); ++i) {
      EXPECT_EQ((*verdicts)[q][i], i < c.valid.size())
          << "jsonschema disagrees on " << queries[q].texts[i];
    }
    checked += queries[q].texts.size();
  }
  std::printf("cross-checked %zu labelled instances against jsonschema\n", checked);
  EXPECT_GT(checked, 200u);
}

// `pattern`, against Python's jsonschema (which searches with Python's re): every string over
// each case's alphabet up to a length, plus the case's own longer examples, as JSON text. The
// alphabets keep to characters where ECMA-262 and Python agree (\\d and \\w are ASCII in one,
// Unicode in the other) and leave out the control characters the grammar never writes raw; and
// the patterns to syntax both read alike (Python takes "a{,2}" as a count, ECMA-262 as text).
TEST(JsonSchemaGrammar, PatternsAgreeWithJsonschema) {
  if (!python_jsonschema_available()) GTEST_SKIP() << "needs python3 with jsonschema";
  struct PatternCase {
    const char* pattern;
    std::vector<std::string> alphabet;
    size_t max_len;
    std::vector<std::string> examples;
  };
  const std::vector<PatternCase> cases = {
      {"^[a-z]+$", {"a", "z", "A", "0", "-"}, 4, {}},
      {"^\\d{3}-\\d{4}$", {"0", "9", "-", "a"}, 4, {"123-4567", "123-456", "12a-4567"}},
      {"abc", {"a", "b", "c", "x"}, 5, {}},
      {"^(foo|bar)+baz?$", {"fo", "o", "bar", "ba", "z"}, 4, {"foobarba", "barfoobaz"}},
      {"^[^@\\s]+@[^@\\s]+\\.[a-z]{2,3}$",
       {"a", "@", ".", "c", " "},
       5,
       {"ab@cd.com", "a@b.co", "a b@c.de", "a@b.c", "a@b.comm", "a@@b.co"}},
      {"^\\w+$", {"a", "Z", "_", "0", " ", "-"}, 3, {}},
      {"^[\"\\\\]+$", {"\"", "\\", "a"}, 4, {}},
      {"^.{2,4}$", {"a", " ", "\u00e9", "\"", "\t"}, 5, {}},
      {"x$", {"x", "y"}, 5, {}},
      {"^(?:ab|a)c?$", {"a", "b", "c"}, 4, {}},
      {"^[A-Fa-f0-9]{2}(:[A-Fa-f0-9]{2}){2}$",
       {"a", "F", "0", ":", "g"},
       3,
       {"0a:FF:12", "0a:FF:1g", "0a:FF", "0a-FF-12"}},
      {"^\\S+\\s\\S+$", {"a", " ", "\t", "b"}, 4, {}},
      {"[0-9]", {"a", "1", "\u00e9"}, 4, {}},
      {"^\\u00e9+$", {"\u00e9", "e"}, 4, {}},
      {"^[^a]*$", {"a", "b", "\"", "\\", "\u00e9"}, 3, {}},
      {"^a{2,}b*?c{0,1}$", {"a", "b", "c"}, 5, {}},
      {"^[-.x]+\\.\\*$", {"-", ".", "x", "*"}, 4, {}},
      {"^\\x41\\u0042[\\x30-\\x32]$", {"A", "B", "0", "2", "3"}, 3, {}},
      {"^(a|)b$", {"a", "b"}, 3, {}},
      {"^ab{0}c{0,0}(d){0}$", {"a", "b", "c", "d"}, 3, {}},
      {"^a{x}b{2,$", {"a", "{", "x", "}", "b", "2", ","}, 3, {"a{x}b{2,", "a{x}bb"}},
  };
  // Every case's strings, validated in one run of the oracle.
  std::vector<OracleQuery> queries;
  for (const PatternCase& c : cases) {
    std::vector<std::string> values = {""}, level = {""};
    for (size_t len = 1; len <= c.max_len; ++len) {
      std::vector<std::string> next;
      for (const std::string& v : level) {
        for (const std::string& a : c.alphabet) next.push_back(v + a);
      }
      values.insert(values.end(), next.begin(), next.end());
      level = std::move(next);
    }
    values.insert(values.end(), c.examples.begin(), c.examples.end());
    OracleQuery& q = queries.emplace_back();
    q.schema = {{"type", "string"}, {"pattern", c.pattern}};
    for (const std::string& v : values) q.texts.push_back(Json(v).dump());
  }
  auto verdicts = jsonschema_verdicts(queries);
  ASSERT_TRUE(verdicts.has_value()) << "the jsonschema oracle did not run";
  size_t checked = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].pattern);
    const std::vector<std::string>& texts = queries[k].texts;
    auto grammar = grammar_for(queries[k].schema.dump());
    ASSERT_NE(grammar, nullptr);
    size_t matched = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(grammar_matches(grammar, texts[i]), (*verdicts)[k][i]) << texts[i];
      matched += (*verdicts)[k][i] ? 1 : 0;
    }
    EXPECT_GT(matched, 0u);  // each case has strings on both sides
    EXPECT_LT(matched, texts.size());
    checked += texts.size();
  }
  std::printf("cross-checked %zu strings under %zu patterns against jsonschema\n", checked,
              cases.size());
}

TEST(JsonSchemaGrammar, IntegerBoundsAgreeWithJsonschema) {
  const bool oracle = python_jsonschema_available();
  std::vector<OracleQuery> queries;
  for (const IntegerBoundsCase& c : kIntegerBoundsCases) {
    OracleQuery& q = queries.emplace_back();
    q.schema = Json::parse(c.schema);
    for (int v = c.lo_probe; v <= c.hi_probe; ++v) q.texts.push_back(std::to_string(v));
  }
  std::optional<std::vector<std::vector<bool>>> verdicts;
  if (oracle) {
    verdicts = jsonschema_verdicts(queries);
    ASSERT_TRUE(verdicts.has_value()) << "the jsonschema oracle did not run";
  }
  size_t checked = 0;
  for (size_t k = 0; k < queries.size(); ++k) {
    const IntegerBoundsCase& c = kIntegerBoundsCases[k];
    SCOPED_TRACE(c.schema);
    auto grammar = grammar_for(c.schema);
    ASSERT_NE(grammar, nullptr);
    const Json& schema = queries[k].schema;
    const std::vector<std::string>& texts = queries[k].texts;
    for (size_t i = 0; i < texts.size(); ++i) {
      const int v = c.lo_probe + static_cast<int>(i);
      // Without the oracle, the bounds read directly (every case has at least one bound).
      bool expected = true;
      if (schema.contains("minimum")) expected = expected && v >= schema["minimum"].get<double>();
      if (schema.contains("maximum")) expected = expected && v <= schema["maximum"].get<double>();
      if (schema.contains("exclusiveMinimum"))
        expected = expected && v > schema["exclusiveMinimum"].get<double>();
      if (schema.contains("exclusiveMaximum"))
        expected = expected && v < schema["exclusiveMaximum"].get<double>();
      if (verdicts) {
        ASSERT_EQ((*verdicts)[k][i], expected) << texts[i];
      }
      EXPECT_EQ(grammar_matches(grammar, texts[i]), expected) << texts[i];
    }
    checked += texts.size();
  }
  if (oracle) std::printf("cross-checked %zu integers against jsonschema\n", checked);
}

// Where the grammar is stricter than the schema by design: jsonschema accepts these, the
// grammar does not. Each is a choice the header states.
TEST(JsonSchemaGrammar, StricterThanTheSchemaByDesign) {
  struct StrictCase {
    const char* schema;
    const char* text;
    const char* why;
  };
  const StrictCase cases[] = {
      {R"({"type":"object","properties":{"a":{"type":"integer"}}})", R"({"a":1,"b":2})",
       "no extra keys when additionalProperties is absent (llama.cpp's reading)"},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
          "required":["b"]})",
       R"({"a":1,"b":2})", "required properties come first"},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
       R"({"b":1,"a":1})", "declared properties come before extra ones"},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
       R"({"\u0063":1})", "no escape while an extra key still spells a declared name's start"},
      {R"({"type":"integer"})", "1.0", "an integer has no fraction"},
      {R"({"type":"integer"})", "1e3", "an integer has no exponent"},
      {R"({"type":"integer"})", "12345678901234567", "at most 16 digits"},
      {R"({"type":"number"})", "1e0001", "at most 3 exponent digits"},
      {R"({"type":"string"})", R"("\ud800")", "no lone surrogate escape"},
      {R"({"type":"string"})", "\"\x7F\"", "no raw DEL"},
      {R"({"type":"array"})", "[1,\n\n\n2]", "at most two newlines between tokens"},
      {R"({"type":"array"})", "[1,\n                     2]", "at most 20 spaces of indent"},
      {R"({"enum":[1.5]})", "1.50", "enum values are matched as their compact JSON text"},
  };
  std::optional<std::vector<std::vector<bool>>> verdicts;
  if (python_jsonschema_available()) {
    std::vector<OracleQuery> queries;
    for (const StrictCase& c : cases) queries.push_back({Json::parse(c.schema), {c.text}});
    verdicts = jsonschema_verdicts(queries);
    ASSERT_TRUE(verdicts.has_value()) << "the jsonschema oracle did not run";
  }
  for (size_t k = 0; k < std::size(cases); ++k) {
    const StrictCase& c = cases[k];
    SCOPED_TRACE(std::string(c.schema) + " " + c.text + ": " + c.why);
    auto grammar = grammar_for(c.schema);
    ASSERT_NE(grammar, nullptr);
    EXPECT_FALSE(grammar_matches(grammar, c.text));
    if (verdicts) {
      EXPECT_TRUE((*verdicts)[k][0]) << "jsonschema refuses it too, so it is no design choice";
    }
  }
}

// String formats: labelled by hand (jsonschema checks formats only with optional packages).
TEST(JsonSchemaGrammar, StringFormats) {
  const SchemaCase cases[] = {
      {"date",
       R"({"type":"string","format":"date"})",
       {"\"2024-02-29\"", "\"1999-12-31\"", "\"2023-04-30\""},
       {"\"2024-13-01\"", "\"2024-04-31\"", "\"2024-02-30\"", "\"24-01-01\"", "\"2024-1-1\""}},
      {"time",
       R"({"type":"string","format":"time"})",
       {"\"23:59:59Z\"", "\"00:00:00.123+05:30\"", "\"12:30:00-08:00\""},
       {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\"", "\"12:00Z\""}},
      {"date-time",
       R"({"format":"date-time"})",
       {"\"2024-05-06T07:08:09Z\""},
       {"\"2024-05-06 07:08:09Z\"", "\"2024-05-06\""}},
      {"uuid",
       R"({"type":"string","format":"uuid"})",
       {"\"123e4567-e89b-12d3-a456-426614174000\""},
       {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400\""}},
  };
  for (const SchemaCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto grammar = grammar_for(c.schema);
    ASSERT_NE(grammar, nullptr);
    for (const std::string& text : c.valid) EXPECT_TRUE(grammar_matches(grammar, text)) << text;
    for (const std::string& text : c.invalid) {
      EXPECT_FALSE(grammar_matches(grammar, text)) << text;
    }
  }
}

// Refusals: the kind of error and the JSON pointer and keyword it names.
TEST(JsonSchemaGrammar, RefusalsNameThePointer) {
  struct RefusalCase {
    std::string schema;
    ErrorKind kind;
    std::string message_part;
  };
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  std::string many_values = R"({"enum":[)";
  for (int i = 0; i < 1025; ++i) many_values += (i ? "," : "") + std::to_string(i);
  many_values += "]}";
  std::string huge = R"({"enum":[)";
  for (int i = 0; i < 1000; ++i) {
    huge += (i ? ",\"" : "\"") + std::to_string(i) + std::string(2000, 'x') + "\"";
  }
  huge += "]}";
  // More subschemas than the visit budget, each cheap and deduplicated, so that only the visit
  // count stops the work (different $ref texts reaching one subschema multiply work the same way).
  Json wide_any = {{"anyOf", Json::array()}};
  for (int i = 0; i < 100001; ++i) wide_any["anyOf"].push_back({{"type", "null"}});
  const std::string many_subschemas = wide_any.dump();
  const RefusalCase cases[] = {
      {R"j({"type":"object","properties":{"age":{"type":"string","pattern":"(?=a)"}}})j",
       ErrorKind::kUnsupported, "schema/properties/age/pattern: lookaround"},
      {R"j({"type":"string","pattern":"(a)\\1"})j", ErrorKind::kUnsupported, "a backreference"},
      {R"j({"type":"string","pattern":"\\bfoo"})j", ErrorKind::kUnsupported, "a word boundary"},
      {R"j({"type":"string","pattern":"^a$|^b$"})j", ErrorKind::kUnsupported,
       "'$' inside the pattern"},
      {R"j({"type":"string","pattern":"\\p{L}"})j", ErrorKind::kUnsupported, "the escape '\\p'"},
      {R"j({"type":"string","pattern":"a{1001}"})j", ErrorKind::kUnsupported, "a count above 1000"},
      {R"j({"type":"string","pattern":"[a"})j", ErrorKind::kInvalidArgument, "an unclosed '['"},
      {R"j({"type":"string","pattern":"(a"})j", ErrorKind::kInvalidArgument, "an unclosed '('"},
      {R"j({"type":"string","pattern":"a)"})j", ErrorKind::kUnsupported, "an unmatched ')'"},
      {R"j({"type":"string","pattern":"*a"})j", ErrorKind::kInvalidArgument,
       "a quantifier with nothing before it"},
      {R"j({"type":"string","pattern":"[z-a]"})j", ErrorKind::kInvalidArgument, "out of order"},
      {R"j({"type":"string","pattern":"^a\\u0001b$"})j", ErrorKind::kUnsupported,
       "a control character"},
      {R"j({"type":"string","pattern":"^a$","maxLength":3})j", ErrorKind::kUnsupported,
       "'pattern' next to 'minLength'"},
      {R"({"$ref":"https://example.com/s.json#/$defs/a"})", ErrorKind::kUnsupported,
       "schema/$ref: remote '$ref'"},
      {R"({"$ref":"#"})", ErrorKind::kInvalidArgument,
       "schema/$ref: '$ref' \"#\" refers back to itself"},
      {R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},
          "$ref":"#/$defs/a"})",
       ErrorKind::kInvalidArgument, "schema/$defs/b/anyOf/0/$ref: '$ref' \"#/$defs/a\" refers"},
      {R"({"$ref":"#/$defs/missing"})", ErrorKind::kInvalidArgument, "names nothing"},
      {deep, ErrorKind::kOutOfRange, "deeper than 64"},
      {many_values, ErrorKind::kOutOfRange, "schema/enum: 1025 values, more than 1024"},
      {huge, ErrorKind::kOutOfRange, "bytes (the limit)"},
      {R"({"type":"string","maxLength":5000})", ErrorKind::kOutOfRange,
       "schema/maxLength: 5000 is more than 1000"},
      {R"({"type":"array","minItems":-1})", ErrorKind::kInvalidArgument,
       "schema/minItems: must be a non-negative integer"},
      {R"({"type":"string","format":"email"})", ErrorKind::kUnsupported,
       "schema/format: \"email\" is not supported"},
      {R"({"type":"number","minimum":0})", ErrorKind::kUnsupported,
       "schema: 'minimum' is supported only on \"type\": \"integer\""},
      {R"({"properties":{"a":{"foo":1}}})", ErrorKind::kUnsupported,
       "schema/properties/a: 'foo' is not supported"},
      {R"({"properties":{"a":false}})", ErrorKind::kUnsupported,
       "schema/properties/a: the schema false"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", ErrorKind::kUnsupported,
       "schema/required: \"b\" is not in 'properties'"},
      {R"({"type":"strin"})", ErrorKind::kInvalidArgument, "schema/type: \"strin\" is not a type"},
      {R"({"type":"string","$ref":"#"})", ErrorKind::kUnsupported, "schema: 'type' next to '$ref'"},
      {R"({"type":"array","items":[{"type":"string"}]})", ErrorKind::kUnsupported,
       "schema/items: a list of schemas"},
      {R"({"allOf":[{"type":"string"},{"minLength":1}]})", ErrorKind::kUnsupported,
       "schema/allOf/0: 'type' in an 'allOf'"},
      {R"({"type":"integer","minimum":10,"maximum":5})", ErrorKind::kInvalidArgument,
       "schema: no integer"},
      {R"({"type":"array","minItems":3,"maxItems":2})", ErrorKind::kInvalidArgument,
       "schema: no array has at least 3"},
      {R"({"type":"array","uniqueItems":true})", ErrorKind::kUnsupported, "'uniqueItems'"},
      {R"({"not":{"type":"string"}})", ErrorKind::kUnsupported, "schema: 'not' is not supported"},
      {R"([1])", ErrorKind::kInvalidArgument, "schema: a schema must be an object or a boolean"},
      {R"({"anyOf":[{"type":"null"},{"$ref":"#/anyOf/00"}]})", ErrorKind::kInvalidArgument,
       "schema/anyOf/1/$ref: '$ref' \"#/anyOf/00\" names nothing"},
      {many_subschemas, ErrorKind::kOutOfRange, "subschemas to convert"},
  };
  for (const RefusalCase& c : cases) {
    SCOPED_TRACE(c.schema.substr(0, 200));
    Result<std::string> gbnf = json_schema_to_gbnf(Json::parse(c.schema));
    ASSERT_FALSE(gbnf.is_ok());
    EXPECT_EQ(gbnf.status().kind(), c.kind) << gbnf.status().message();
    EXPECT_NE(gbnf.status().message().find(c.message_part), std::string::npos)
        << gbnf.status().message();
  }
}

// Limits that refuse, not crash: long names, many properties, deep nesting just under the limit.
TEST(JsonSchemaGrammar, LargeButAllowedSchemasParse) {
  Json props = Json::object();
  for (int i = 0; i < 300; ++i) {
    props[std::string(200, 'k') + std::to_string(i)] = {{"type", "integer"}};
  }
  const Json wide = {{"type", "object"}, {"properties", props}, {"additionalProperties", true}};
  auto grammar = grammar_for(wide.dump());
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(grammar_matches(grammar, R"({"x":1})"));
  EXPECT_FALSE(grammar_matches(grammar, "{\"" + std::string(200, 'k') + "7\":\"s\"}"));

  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 60; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  grammar = grammar_for(deep);
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(grammar_matches(grammar, std::string(60, '[') + "\"a\"" + std::string(60, ']')));

  Json tuple = {{"type", "array"}, {"prefixItems", Json::array()}};
  for (int i = 0; i < 200; ++i) tuple["prefixItems"].push_back({{"type", "integer"}});
  grammar = grammar_for(tuple.dump());
  ASSERT_NE(grammar, nullptr);
  std::string hundred = "[0";
  for (int i = 1; i < 100; ++i) hundred += "," + std::to_string(i);
  EXPECT_TRUE(grammar_matches(grammar, hundred + "]"));
}

}  // namespace json_schema_grammar_test
}  // namespace strata::server
