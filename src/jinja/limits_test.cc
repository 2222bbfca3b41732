// Templates are untrusted: every limit of limits.h ends a render with an error that names it,
// and syntax errors say where they are. None of these may crash, hang or exhaust memory.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "jinja/template.h"

namespace strata::jinja {
namespace {

std::string error_of(std::string_view source, const Limits& limits = {}, Dict context = {}) {
  Result<Template> t = Template::parse(source, limits);
  if (!t) return t.status().message();
  Result<std::string> out = t->render(context, std::tm{});
  return out ? std::string() : out.status().message();
}

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

void expect_error(const std::string& message, std::string_view want) {
  EXPECT_NE(message.find(want), std::string::npos)
      << "wanted '" << want << "' in: " << (message.empty() ? "(no error)" : message);
}

TEST(JinjaLimits, TemplateSize) {
  Limits l;
  l.max_template_bytes = 64;
  expect_error(error_of(std::string(65, 'x'), l), "max_template_bytes");
  EXPECT_EQ(error_of(std::string(64, 'x'), l), "");
}

TEST(JinjaLimits, ParserNesting) {
  // Parentheses, blocks, `not` and unary minus each recurse in the parser.
  expect_error(error_of("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}"),
               "max_nesting");
  expect_error(error_of(repeat("{% if true %}", 5000) + repeat("{% endif %}", 5000)),
               "max_nesting");
  expect_error(error_of("{{ " + repeat("not ", 5000) + "x }}"), "max_nesting");
  expect_error(error_of("{{ " + repeat("-", 5000) + "1 }}"), "max_nesting");
  expect_error(error_of("{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}"), "max_nesting");
  expect_error(error_of("{{ " + repeat("f(", 5000) + repeat(")", 5000) + " }}"), "max_nesting");
  expect_error(error_of("{{ 1 " + repeat("if 1 else 1 ", 5000) + "}}"), "max_nesting");
  // Loops of the grammar nest the tree without nesting the parser: bounded by height.
  expect_error(error_of("{{ 1" + repeat(" + 1", 100000) + " }}"), "max_nesting");
  expect_error(error_of("{{ x" + repeat(".a", 100000) + " }}"), "max_nesting");
  expect_error(error_of("{{ x" + repeat("|trim", 100000) + " }}"), "max_nesting");
  // A chain of comparisons is one flat node.
  EXPECT_EQ(error_of("{{ 1" + repeat(" < 1", 100000) + " }}"), "");
  // A real template's nesting is far below the limit.
  EXPECT_EQ(
      error_of("{{ ((((1)))) + 1 + 2 + 3 }}{% if 1 %}{% for x in [1] %}{% endfor %}{% endif %}"),
      "");
}

TEST(JinjaLimits, MacroRecursion) {
  expect_error(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
               "max_call_depth");
  Limits l;
  l.max_call_depth = 1000;
  l.max_eval_depth = 200;
  expect_error(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", l),
               "max_eval_depth");
}

TEST(JinjaLimits, LoopIterations) {
  expect_error(error_of("{% for i in range(100000) %}{% for j in range(100000) %}"
                        "{% endfor %}{% endfor %}"),
               "max_loop_iterations");
  Limits l;
  l.max_loop_iterations = 10;
  expect_error(error_of("{% for i in range(11) %}{% endfor %}", l), "max_loop_iterations");
  EXPECT_EQ(error_of("{% for i in range(10) %}{% endfor %}", l), "");
  // The sandbox's range() cap comes first for one huge range.
  expect_error(error_of("{% for i in range(1000000000) %}{% endfor %}"), "larger than 100000");
}

TEST(JinjaLimits, OutputBytes) {
  Limits l;
  l.max_output_bytes = 1000;
  expect_error(error_of("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", l),
               "max_output_bytes");
  expect_error(error_of(std::string(1001, 'd'), l), "max_output_bytes");
  // A macro's or a set block's buffer is output too.
  expect_error(
      error_of("{% set x %}{% for i in range(100) %}0123456789abc{% endfor %}{% endset %}", l),
      "max_output_bytes");
}

TEST(JinjaLimits, StringsAndLists) {
  // Doubling a string or a list in a loop: stopped at the size limit, not by memory.
  expect_error(error_of("{% set ns = namespace(s='x') %}{% for i in range(100) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
               "max_string_bytes");
  expect_error(error_of("{% set ns = namespace(s='x') %}{% for i in range(100) %}"
                        "{% set ns.s = ns.s + ns.s %}{% endfor %}"),
               "max_string_bytes");
  expect_error(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}"
                        "{% set ns.l = ns.l + ns.l %}{% endfor %}"),
               "max_list_items");
  expect_error(error_of("{{ 'x' * 1000000000000 }}"), "max_string_bytes");
  expect_error(error_of("{{ [1, 2] * 1000000000000 }}"), "max_list_items");
  expect_error(error_of("{{ 'abc'.center(1000000000000) }}"), "max_string_bytes");
  expect_error(error_of("{{ 'x'|indent(1000000000000) }}"), "max_string_bytes");
}

TEST(JinjaLimits, ValueDepth) {
  // Nesting a list in itself in a loop: the walks over it (tojson, ==, print) stay bounded.
  expect_error(error_of("{% set ns = namespace(v=[]) %}{% for i in range(100000) %}"
                        "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v|tojson }}"),
               "max_value_depth");
  expect_error(error_of("{% set ns = namespace(v={}) %}{% for i in range(100000) %}"
                        "{% set ns.v = {'a': ns.v} %}{% endfor %}{{ ns.v == ns.v }}"),
               "max_value_depth");
  // A namespace that holds itself prints without recursing forever, and is not JSON.
  Result<Template> t =
      Template::parse("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ ns.me.me.a }}");
  ASSERT_TRUE(t.is_ok());
  Result<std::string> out = t->render(Dict(), std::tm{});
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_NE(out->find("|1"), std::string::npos) << *out;
  expect_error(error_of("{% set ns = namespace() %}{{ ns|tojson }}"), "not JSON serializable");
}

TEST(JinjaLimits, Work) {
  // Few iterations, each one expensive: the work budget, not the iteration count, stops it.
  Limits l;
  l.max_work = 100000;
  Dict ctx;
  ctx.set(Value("big"), Value(std::string(100000, 'x')));
  expect_error(error_of("{% for i in range(1000) %}{% set y = big|tojson %}{% endfor %}", l, ctx),
               "max_work");
  expect_error(
      error_of("{% for i in range(1000) %}{% set y = big.split('x') %}{% endfor %}", l, ctx),
      "max_work");
}

TEST(JinjaLimits, DefaultsStopHostileTemplatesQuickly) {
  // Each template runs until the default work budget (about a second of one core) stops it. The
  // sanitizer builds' interpreter is 60 times slower (the fuzzers' coverage counters are in it),
  // which made this test a minute and a half of the suite; they check the limits with the small
  // budgets of the tests above, and the Release build runs this one.
  if (STRATA_TEST_SANITIZED) GTEST_SKIP() << "the default budgets are run out in Release only";
  // Each of these would run for hours or exhaust memory without limits.
  const char* hostile[] = {
      "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
      "{% set ns = namespace(s='abcdefgh') %}{% for i in range(100000) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% macro f() %}{{ f() }}{{ f() }}{% endmacro %}{{ f() }}",
      "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = [i, j] * 50 %}"
      "{% endfor %}{% endfor %}",
  };
  for (const char* h : hostile) EXPECT_NE(error_of(h), "") << h;
}

TEST(JinjaSyntax, ErrorsSayWhere) {
  struct ErrorCase {
    const char* source;
    const char* where;
    const char* what;
  };
  const ErrorCase cases[] = {
      {"{% if x %}\n{% endfor %}", "line 2, column 4", "unknown tag 'endfor'"},
      {"{% if x %}\nabc", "line 1, column 4", "'if' block"},
      {"ab\n{{ 'abc }}", "line 2, column 4", "unterminated string"},
      {"hello\n  {{ 1 + }}", "line 2, column 10", "unexpected '}}'"},
      {"{% for %}{% endfor %}", "line 1, column 8", "expected an assignment target"},
      {"x\n\n{# unclosed", "line 3, column 1", "missing end of comment"},
      {"{{ x | }}", "line 1, column 8", "expected a name"},
      {"{% set 1 = 2 %}", "line 1, column 8", "can't assign"},
      {"{{ (1 }}", "line 1, column 7", "unexpected '}', expected ')'"},
      {"{{ x ! y }}", "line 1, column 6", "unexpected character '!'"},
      {"{% break %}", "line 1, column 4", "outside a loop"},
      {"{% include 'x' %}", "line 1, column 4", "not supported"},
      {"{% for x in y recursive %}{% endfor %}", "line 1, column 15", "recursive loops"},
      {"{{ x|nofilter }}", "line 1, column 6", "no filter named 'nofilter'"},
      {"{{ 99999999999999999999 }}", "line 1, column 4", "integer literal too large"},
      {"{{ '\\x4' }}", "line 1, column 4", "escape"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "line 1, column 18", "non-default argument"},
      {"{{ x }", "line 1, column 6", "unexpected '}'"},
      {"{{ x ", "line 1, column 1", "unclosed '{{'"},
      {"{% raw %}abc", "line 1, column 1", "missing end of raw"},
  };
  for (const ErrorCase& c : cases) {
    Result<Template> t = Template::parse(c.source);
    ASSERT_FALSE(t.is_ok()) << c.source;
    expect_error(t.status().message(), c.where);
    expect_error(t.status().message(), c.what);
  }
}

TEST(JinjaSyntax, RuntimeErrorsSayWhere) {
  const std::string message = error_of("line one\nline two {{ x }}\n  {{ nope.attr }}");
  expect_error(message, "line 3, column ");
  expect_error(message, "'nope' is undefined");
  // Inside a macro: the line of the failing expression, not of the call.
  expect_error(error_of("{% macro m() %}\n\n{{ raise_exception('boom') }}{% endmacro %}{{ m() }}"),
               "line 3");
}

TEST(JinjaTemplate, RendersFromManyThreads) {
  Result<Template> t = Template::parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.is_ok());
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&t, &wrong, k] {
      Dict ctx;
      ctx.set(Value("xs"), Value::list(std::vector<Value>(static_cast<size_t>(k + 1), Value(7))));
      for (int i = 0; i < 200; ++i) {
        Result<std::string> out = t->render(ctx, std::tm{});
        if (!out || *out != std::to_string(7 * (k + 1))) ++wrong[static_cast<size_t>(k)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace strata::jinja
