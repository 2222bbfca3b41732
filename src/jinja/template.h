// A Jinja template: parsed once, rendered many times (from any number of threads at once: a
// Template is immutable, each render has its own interpreter).
//
// Goal: render chat templates exactly as Python's jinja2 does in the environment transformers
// and llama.cpp set up for them (trim_blocks, lstrip_blocks, loop controls, an immutable
// sandbox, transformers' tojson, raise_exception and strftime_now). What of Jinja is left out
// is listed in docs/jinja.md.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/limits.h"
#include "jinja/value.h"

namespace strata::jinja {

class Template {
 public:
  // Parses `source`; errors give the line and column. The limits hold for every render.
  static Result<Template> parse(std::string_view source, const Limits& limits = {});

  // Renders with the variables of `context`; strftime_now() formats `now`.
  Result<std::string> render(const Dict& context, const std::tm& now) const;

  const Limits& limits() const { return limits_; }

 private:
  struct Parsed {
    std::string source;  // normalised: offsets in the tree index it
    Body body;
  };
  Template(std::shared_ptr<const Parsed> parsed, const Limits& limits)
      : parsed_(std::move(parsed)), limits_(limits) {}

  std::shared_ptr<const Parsed> parsed_;
  Limits limits_;
};

}  // namespace strata::jinja
