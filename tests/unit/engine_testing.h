// What the engine's tests share: greedy argmax, an environment variable set for one scope, and
// an in-process worker on a free port of 127.0.0.1.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "rpc/worker.h"

namespace strata::testing {

// The index of the largest of x[0..n); the first of equals.
inline int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) best = x[i] > x[best] ? static_cast<int32_t>(i) : best;
  return best;
}

// Sets an environment variable until the end of the scope, then removes it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A worker of `o` (its address, threads and logging set here) on a free port of 127.0.0.1;
// nullptr, with a test failure, when it does not start.
inline std::unique_ptr<rpc::Worker> start_local_worker(rpc::WorkerOptions o = {},
                                                       int n_threads = 1) {
  o.address = "127.0.0.1:0";
  o.n_threads = n_threads;
  o.log = false;
  auto w = rpc::Worker::start(o);
  EXPECT_TRUE(w.is_ok()) << w.status().message();
  return w.is_ok() ? std::move(w).value() : nullptr;
}

}  // namespace strata::testing
