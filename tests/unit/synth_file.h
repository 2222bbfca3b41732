// A synthetic model written once per test process into the temp directory and removed when
// the test binary ends (shared by the tests that need a model file).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/synth.h"

namespace strata::testing {

class SynthFiles : public ::testing::Environment {
 public:
  static std::vector<std::string>& paths() {
    static std::vector<std::string> p;
    return p;
  }
  void TearDown() override {
    for (const std::string& p : paths()) std::filesystem::remove(p);
  }
};

// `name` must be unique per parameter set within the test binary.
inline std::string synth_file(const std::string& name, const SynthParams& p) {
  static const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SynthFiles);
  (void)kEnv;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata_" + name + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  if (!std::filesystem::exists(path)) {
    SynthFiles::paths().push_back(path);
    const Status s = synth_write(p, path);
    EXPECT_TRUE(s.is_ok()) << s.message();
  }
  return path;
}

}  // namespace strata::testing
