// A model file on a CPU device of its own, for tests that run an engine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "engine/engine.h"

namespace strata::testing {

// The model at `path` on one CPU device ("CPU") of n_threads threads, with `options`.
inline std::unique_ptr<Engine> cpu_engine(const std::string& path, int n_threads,
                                          const EngineOptions& options = {}) {
  auto model = Model::open(path);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  CpuDeviceOptions o;
  o.n_threads = n_threads;
  o.name = "CPU";
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(cpu_device_new(o));
  auto engine = Engine::create(std::move(model).value(), std::move(devices), options);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  return std::move(engine).value();
}

}  // namespace strata::testing
