#include "jinja/template.h"

#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace strata::jinja {

Result<Template> Template::parse(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes) {
    return out_of_range("template of " + std::to_string(source.size()) + " bytes is larger than " +
                        std::to_string(limits.max_template_bytes) + " (max_template_bytes)");
  }
  auto parsed = std::make_shared<Parsed>();
  parsed->source = normalize_source(source);
  ParseOptions options;
  options.max_nesting = limits.max_nesting;
  STRATA_ASSIGN_OR_RETURN(parsed->body, jinja::parse(parsed->source, options));
  return Template(std::move(parsed), limits);
}

Result<std::string> Template::render(const Dict& context, const std::tm& now) const {
  Interpreter in(parsed_->source, limits_, context, now);
  std::string out;
  STRATA_RETURN_IF_ERROR(in.render(parsed_->body, out));
  return out;
}

}  // namespace strata::jinja
