// The tables of what templates can call by name: filters (`x | trim`), tests (`x is string`),
// globals (`range(3)`) and methods (`s.startswith('a')`). Each table is one file of rows;
// adding a filter is a function and a row.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "core/status.h"
#include "jinja/value.h"

namespace strata::jinja {

class Interpreter;

// A filter gets its input and the call's arguments; a test likewise, and answers yes or no.
using FilterFn = Result<Value> (*)(Interpreter& in, const Value& input, Args& args);
using TestFn = Result<bool> (*)(Interpreter& in, const Value& input, Args& args);

// Null when there is no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The builtin global `name` (range, dict, namespace, joiner, cycler, raise_exception,
// strftime_now), or undefined.
Value find_global(std::string_view name);

// A method of a str, dict or list value, bound to it (s.strip, d.items, l.index), or null.
// Methods that would change a dict or list (append, update...) are bound too, and refuse when
// called, as jinja2's ImmutableSandboxedEnvironment does.
std::shared_ptr<const Callable> find_method(const Value& self, std::string_view name);

// Python's printf-style formatting, `format % values` (and the format filter): a tuple gives
// the arguments in order, a dict the %(name)s ones, anything else is the one argument.
Result<Value> percent_format(Interpreter& in, const std::string& format, const Value& values);

// Matches a call's arguments to parameter names as Python does: positional first, then by
// name. Parameters not given stay undefined. Errors name the function and the argument.
Status bind_args(std::string_view function, const Args& args,
                 std::initializer_list<std::string_view> params, Value* out);

// bind_args into an array of the N parameters.
template <size_t N>
Result<std::array<Value, N>> args_of(std::string_view fn, const Args& args,
                                     std::initializer_list<std::string_view> params) {
  std::array<Value, N> out;
  STRATA_RETURN_IF_ERROR(bind_args(fn, args, params, out.data()));
  return out;
}

}  // namespace strata::jinja
