// What the value tests share: a value written as JSON, with a test failure when it cannot be.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "jinja/json.h"
#include "jinja/value.h"

namespace strata::testing {

inline std::string dumps(const jinja::Value& v, const jinja::JsonFormat& f = {}) {
  std::string out;
  Status st = jinja::dump_json(v, f, out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out;
}

}  // namespace strata::testing
