// What the engine's tests share: greedy argmax and generation, an environment variable set for
// one scope, a CPU device, an engine with a context, a wait for a condition, and an in-process
// worker on a free port of 127.0.0.1 with a remote device on it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"

namespace strata::testing {

// The index of the largest of x[0..n); the first of equals.
inline int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) best = x[i] > x[best] ? static_cast<int32_t>(i) : best;
  return best;
}

// Greedy generation from a prompt of 11 tokens (from `seed`) in micro-batches of 4, then n_gen
// steps; every logit row, bytewise.
inline std::vector<uint8_t> greedy_logits(const Engine& engine, int seed, int n_gen = 8) {
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_batch = 4;
  auto ctx = Context::create(engine, cp);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  if (!ctx.is_ok()) return {};
  std::vector<uint8_t> bytes;
  Batch b;
  for (int i = 0; i < 11; ++i) b.add(5 + (seed * 29 + i * 13) % 290, i, 0, i == 10);
  for (int step = 0; step < n_gen; ++step) {
    Status s = (*ctx)->decode(b);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) return bytes;
    const float* l = (*ctx)->logits(0);
    const auto* p = reinterpret_cast<const uint8_t*>(l);
    bytes.insert(bytes.end(), p, p + 4 * (*ctx)->n_vocab());
    b.clear();
    b.add(argmax(l, (*ctx)->n_vocab()), (*ctx)->seq_len(0), 0, true);
  }
  return bytes;
}

// A CPU device named `name`; memory_limit 0: the machine's available memory.
inline std::unique_ptr<Device> cpu_device(const std::string& name, int n_threads = 2,
                                          uint64_t memory_limit = 0) {
  CpuDeviceOptions o;
  o.name = name;
  o.n_threads = n_threads;
  o.memory_limit = memory_limit;
  return cpu_device_new(o);
}

// An engine and a context of it.
struct Loaded {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Context> ctx;
};

// Polls `done` every 10 ms for up to 5 s; its last answer. (A worker frees a buffer when its
// FREE_BUFFER message arrives, after the call returned.)
inline bool wait_for(const std::function<bool()>& done) {
  for (int i = 0; i < 500 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
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

// A remote device named RPC0 on `worker`, with the client's default options.
inline Result<std::unique_ptr<Device>> remote_device_on(const rpc::Worker& worker) {
  rpc::ClientOptions co;
  co.endpoint = worker.address();
  co.name = "RPC0";
  return rpc::remote_device_new(co);
}

}  // namespace strata::testing
