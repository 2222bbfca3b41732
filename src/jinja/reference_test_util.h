// Test helper: renders cases with Python's jinja2 (tests/reference/jinja_ref.py, the environment
// transformers renders chat templates in), so that tests compare this engine with the reference
// rather than with outputs it produced itself.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "jinja/json.h"
#include "jinja/value.h"

namespace strata::jinja::reference {

struct ReferenceCase {
  std::string template_text;
  Dict context;
};

// What jinja2 gave for one case: its output, or its error ("TypeError: ...").
struct ReferenceResult {
  bool ok = false;
  std::string text;
};

// jinja2's results for `cases` (strftime_now sees 2024-07-26 12:00:00), or nullopt with
// `why` set when python3 or jinja2 is missing.
inline std::optional<std::vector<ReferenceResult>> render_with_jinja2(
    const std::vector<ReferenceCase>& cases, std::string& why) {
  std::vector<Value> list;
  for (const ReferenceCase& c : cases) {
    Dict d;
    d.set(Value("template"), Value(c.template_text));
    d.set(Value("context"), Value(c.context));
    list.push_back(Value(std::move(d)));
  }
  std::string json;
  if (!dump_json(Value::list(std::move(list)), JsonFormat{}, json).is_ok()) {
    why = "cases are not JSON";
    return std::nullopt;
  }
  const std::string path =
      ::testing::TempDir() + "/jinja_ref_cases_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(path, std::ios::binary);
    out << json;
  }
  const std::string cmd =
      "python3 " STRATA_SOURCE_DIR "/tests/reference/jinja_ref.py '" + path + "' 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    why = "cannot run python3";
    return std::nullopt;
  }
  std::string output;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  const int status = ::pclose(p);
  std::remove(path.c_str());
  if (status != 0 || output.empty()) {
    why = "python3 with jinja2 is not available (Debian: python3-jinja2)";
    return std::nullopt;
  }
  Result<Value> parsed = parse_json(output, 64);
  if (!parsed || !parsed->is_list() || parsed->as_list().size() != cases.size()) {
    why = "jinja_ref.py gave unreadable output";
    return std::nullopt;
  }
  std::vector<ReferenceResult> results;
  for (const Value& r : parsed->as_list()) {
    ReferenceResult res;
    const Value* ok = r.is_dict() ? r.as_dict().find("ok") : nullptr;
    const Value* err = r.is_dict() ? r.as_dict().find("error") : nullptr;
    res.ok = ok != nullptr;
    res.text = ok ? to_str(*ok) : err ? to_str(*err) : "";
    results.push_back(std::move(res));
  }
  return results;
}

// Whether our error message says what jinja2's does: its text after "Type: " (lowercase, no
// final '.'), except for syntax errors, whose wording differs (both must fail, with a line).
inline bool same_error(const std::string& ours, const std::string& reference) {
  if (reference.starts_with("TemplateSyntaxError") ||
      reference.starts_with("TemplateAssertionError")) {
    return ours.find("line ") != std::string::npos;
  }
  std::string want =
      reference.substr(reference.find(": ") == std::string::npos ? 0 : reference.find(": ") + 2);
  if (!want.empty() && want.back() == '.') want.pop_back();
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return s;
  };
  return lower(ours).find(lower(want)) != std::string::npos;
}

}  // namespace strata::jinja::reference
