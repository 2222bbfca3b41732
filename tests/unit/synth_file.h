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

// A small llama (n_embd 128, 4 heads of which 2 are KV heads, n_ff 256, n_vocab 300, q8_0)
// of n_layer layers with weights from `seed`, written once per test binary as `name`.
inline std::string small_llama_file(const std::string& name, int64_t n_layer, uint64_t seed) {
  SynthParams p;
  p.n_embd = 128;
  p.n_layer = n_layer;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 300;
  p.dtype = DType::kQ8_0;
  p.seed = seed;
  return synth_file(name, p);
}

}  // namespace strata::testing
