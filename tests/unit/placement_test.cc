// The plan before loading: what every device needs for the weights (once), the KV cache and
// each context's step buffers; the refusal before any weight is read; --fit's choice of the
// largest context, then the most contexts, that fit.
#include <gtest/gtest.h>
#include <unistd.h>

#include "backend/cpu_backend.h"
#include "core/host_memory.h"
#include "engine/placement.h"
#include "server/model_load.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

std::string placement_model_path() { return testing::small_llama_file("placement", 4, 7); }

std::vector<std::unique_ptr<Device>> two_cpus(uint64_t limit1 = 0) {
  std::vector<std::unique_ptr<Device>> d;
  for (int i = 0; i < 2; ++i) {
    CpuDeviceOptions o;
    o.name = "CPU" + std::to_string(i);
    o.memory_limit = i == 1 ? limit1 : 0;
    d.push_back(cpu_device_new(o));
  }
  return d;
}

Placement plan_of(const Model& model, const std::vector<std::unique_ptr<Device>>& devices,
                  int64_t n_ctx, int32_t n_contexts, bool use_mmap = true) {
  EngineOptions eo;
  eo.split = {1, 1};
  eo.n_ctx = n_ctx;
  eo.n_contexts = n_contexts;
  eo.use_mmap = use_mmap;
  auto p = placement_plan(model, devices, eo);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return p.is_ok() ? std::move(p).value() : Placement{};
}

TEST(Placement, CountsWeightsOnceKvOnceAndComputePerContext) {
  auto model = Model::open(placement_model_path());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const auto devices = two_cpus();
  const Placement one = plan_of(**model, devices, 4096, 1, false);
  const Placement four = plan_of(**model, devices, 4096, 4, false);
  ASSERT_EQ(one.devices.size(), 2u);
  ASSERT_EQ(four.devices.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const DevicePlan& a = one.devices[i];
    const DevicePlan& b = four.devices[i];
    EXPECT_GT(a.weights, 0u) << "copied weights (no mmap) take device memory";
    EXPECT_EQ(a.weights, b.weights) << "weights are shared by every context";
    EXPECT_EQ(a.kv, b.kv) << "the contexts share the KV cells between them";
    EXPECT_GT(a.compute, 0u);
    EXPECT_EQ(b.n_contexts, 4);
    EXPECT_EQ(b.need(), b.weights + b.kv + 4 * b.compute);
    EXPECT_GT(b.need(), a.need()) << "every context has its own step buffers";
  }
  // With the file mapped, the CPU's weights are page cache and not counted.
  const Placement mapped = plan_of(**model, devices, 4096, 1, true);
  EXPECT_TRUE(mapped.devices[0].mapped);
  EXPECT_EQ(mapped.devices[0].weights, 0u);
  // The KV cache grows with the context.
  EXPECT_GT(plan_of(**model, devices, 8192, 1).devices[1].kv, mapped.devices[1].kv);
}

TEST(Placement, TableNamesEveryDeviceWithNeedAndFreeInMiB) {
  auto model = Model::open(placement_model_path());
  ASSERT_TRUE(model.is_ok());
  const auto devices = two_cpus(uint64_t{3} << 20);
  const Placement p = plan_of(**model, devices, 65536, 4);
  EXPECT_FALSE(p.fits());
  EXPECT_TRUE(p.devices[0].fits());
  EXPECT_FALSE(p.devices[1].fits());
  const std::string t = p.table();
  EXPECT_NE(t.find("need MiB"), std::string::npos) << t;
  EXPECT_NE(t.find("free MiB"), std::string::npos) << t;
  const size_t cpu1 = t.find("\n  CPU1 ");
  ASSERT_NE(cpu1, std::string::npos) << t;
  const std::string line = t.substr(cpu1 + 1, t.find('\n', cpu1 + 1) - cpu1 - 1);
  EXPECT_NE(line.find(" 3.0 "), std::string::npos) << "free MiB: " << line;
  EXPECT_NE(line.find("4 x "), std::string::npos) << "compute of four contexts: " << line;
  EXPECT_NE(line.find("<- does not fit"), std::string::npos) << line;
  // A margin is memory to keep free: a device that fits without one may not with it.
  const Placement small = plan_of(**model, devices, 256, 1);
  ASSERT_TRUE(small.fits());
  EXPECT_FALSE(small.fits({uint64_t{1} << 40}));
  EXPECT_NE(small.table({uint64_t{1} << 40}).find("keeping"), std::string::npos);
}

// The refusal comes before any weight is read: the file is cut at the start of its tensor data
// after it was opened, so that reading any weight through the mapping would kill this process
// (SIGBUS), and a read error could not pass for the refusal either.
TEST(Placement, RefusesBeforeAnyWeightIsRead) {
  SynthParams sp;
  sp.n_embd = 128;
  sp.n_layer = 4;
  sp.n_head = 4;
  sp.n_head_kv = 2;
  sp.n_ff = 256;
  sp.n_vocab = 300;
  sp.dtype = DType::kQ8_0;
  const std::string path = testing::synth_file("placement_cut", sp);
  auto model = Model::open(path);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const uint64_t data_offset = (*model)->file().data_offset();
  ASSERT_LT(data_offset, (*model)->file().file_size());
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(data_offset)), 0);

  server::LoadOptions o;
  o.model_path = path;
  o.n_threads = 1;
  o.n_ctx = 65536;
  o.n_contexts = 4;
  o.use_mmap = false;  // the weights would be copied into the CPU's buffers: read, if loaded
  o.cpu_memory_limit = uint64_t{8} << 20;
  auto loaded = server::load_model(std::move(model).value(), o, 4);
  ASSERT_FALSE(loaded.is_ok());
  const std::string& m = loaded.status().message();
  EXPECT_EQ(loaded.status().kind(), ErrorKind::kOutOfRange) << m;
  EXPECT_NE(m.find("does not fit on its devices with 65536 KV cells over 4 contexts"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("\n  CPU "), std::string::npos) << m;
  EXPECT_NE(m.find(" 8.0 "), std::string::npos) << "the CPU's free MiB: " << m;
}

// The CPU alone, limited so that `limit` decides; the plan's numbers come from placement_plan.
server::LoadOptions fit_options(int64_t n_ctx, int32_t n_contexts, uint64_t limit) {
  server::LoadOptions o;
  o.model_path = placement_model_path();
  o.n_threads = 1;
  o.n_ctx = n_ctx;
  o.n_contexts = n_contexts;
  o.cpu_memory_limit = limit;
  o.use_mmap = true;  // cpu_need counts no weights: they stay in the file's mapping
  o.fit.on = true;
  o.fit.margins = {0};
  o.fit.min_ctx = 512;
  return o;
}

uint64_t cpu_need(int64_t n_ctx, int32_t n_contexts) {
  auto model = Model::open(placement_model_path());
  EXPECT_TRUE(model.is_ok());
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device_new({}));
  EngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.n_contexts = n_contexts;
  auto p = placement_plan(**model, d, eo);
  EXPECT_TRUE(p.is_ok());
  return p.is_ok() ? p->devices[0].need() : 0;
}

TEST(Fit, ChoosesTheLargestContextThatFits) {
  // Room for 3000 cells over 4 contexts, not for the 16384 asked.
  const uint64_t limit = cpu_need(3000, 4);
  ASSERT_GT(cpu_need(16384, 4), limit);
  auto off = fit_options(16384, 4, limit);
  off.fit.on = false;
  EXPECT_FALSE(server::load_model(off, 4).is_ok()) << "refused without --fit";

  auto loaded = server::load_model(fit_options(16384, 4, limit), 4);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->n_contexts, 4);
  EXPECT_LE(loaded->n_ctx, 3000);
  EXPECT_GE(loaded->n_ctx, 512);
  EXPECT_EQ(loaded->n_ctx % 256, 0);
  EXPECT_LE(cpu_need(loaded->n_ctx, 4), limit);
  EXPECT_GT(cpu_need(loaded->n_ctx + 256, 4), limit) << "the largest multiple of 256 that fits";
  EXPECT_EQ(loaded->context, nullptr) << "several contexts: the caller makes them";
  EXPECT_NE(loaded->fit_note.find(std::to_string(loaded->n_ctx) + " KV cells (asked 16384)"),
            std::string::npos)
      << loaded->fit_note;

  // A plan that fits is left as asked.
  auto asked = server::load_model(fit_options(1024, 1, limit), 1);
  ASSERT_TRUE(asked.is_ok()) << asked.status().message();
  EXPECT_EQ(asked->n_ctx, 1024);
  EXPECT_TRUE(asked->fit_note.empty()) << asked->fit_note;
  EXPECT_NE(asked->context, nullptr);
}

TEST(Fit, DropsContextsWhenTheSmallestContextDoesNotFit) {
  // --fit-ctx 4096 over 4 contexts does not fit; over 2 it does. (Contexts of 1024 cells or
  // more all have micro-batches of -b 512 tokens, so that each one more costs the same.)
  const uint64_t limit = cpu_need(4096, 2);
  ASSERT_GT(cpu_need(4096, 3), limit);
  auto o = fit_options(16384, 4, limit);
  o.fit.min_ctx = 4096;
  auto loaded = server::load_model(o, 4);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->n_contexts, 2);
  EXPECT_EQ(loaded->n_ctx, 4096);
  EXPECT_NE(loaded->fit_note.find("2 pipeline groups (asked 4)"), std::string::npos)
      << loaded->fit_note;

  // Not even one context at the smallest context: refused, saying what --fit tried.
  o.cpu_memory_limit = cpu_need(4096, 1) - 1;
  auto none = server::load_model(o, 4);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("--fit: no plan down to 4096 KV cells"), std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("does not fit"), std::string::npos);
}

TEST(HostMemory, ParsesMemAvailableAndCgroupLimits) {
  EXPECT_EQ(meminfo_available("MemTotal:  100 kB\nMemFree:  5 kB\nMemAvailable:    2048 kB\n"),
            uint64_t{2048} << 10);
  EXPECT_FALSE(meminfo_available("MemTotal:  100 kB\n").has_value());
  EXPECT_FALSE(meminfo_available("MemAvailable: lots kB\n").has_value());
  EXPECT_EQ(cgroup_room("1048576\n", "1000\n"), uint64_t{1048576 - 1000});
  EXPECT_EQ(cgroup_room("1000\n", "5000\n"), uint64_t{0}) << "over the limit: no room";
  EXPECT_FALSE(cgroup_room("max\n", "5000\n").has_value()) << "v2: no limit";
  EXPECT_FALSE(cgroup_room("9223372036854771712\n", "5000\n").has_value()) << "v1: no limit";
  EXPECT_GT(host_memory_available(), 0u) << "this machine has some memory free";
}

// Expert tensors count by their real size, all three dimensions: the copied weights of each
// stage are at least every element of its layers' tensors (F32: 4 bytes each, counted here
// from the file's shapes), of which the experts are most.
TEST(Placement, CountsExpertTensorsByTheirRealSize) {
  SynthParams p;
  p.arch = "qwen3moe";
  p.n_embd = 64;
  p.n_layer = 4;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 96;
  p.n_vocab = 300;
  p.n_expert = 16;
  p.n_expert_used = 2;
  p.n_ff_exp = 64;
  auto model = Model::open(testing::synth_file("placement_moe", p));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const Placement plan = plan_of(**model, two_cpus(), 256, 1, false);
  ASSERT_EQ(plan.stages.size(), 2u);
  for (const StagePlan& s : plan.stages) {
    uint64_t elements = 0, experts = 0;
    for (int64_t il = s.layer_begin; il < s.layer_end; ++il) {
      const std::string prefix = "blk." + std::to_string(il) + ".";
      for (const GgufTensorInfo& t : (*model)->file().tensors()) {
        if (t.name.rfind(prefix, 0) != 0) continue;
        elements += static_cast<uint64_t>(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
        if (t.name.find("_exps.") != std::string::npos) {
          experts += static_cast<uint64_t>(t.ne[0] * t.ne[1] * t.ne[2]);
        }
      }
    }
    EXPECT_EQ(experts, static_cast<uint64_t>(3 * 64 * 64 * 16 * (s.layer_end - s.layer_begin)));
    EXPECT_GE(plan.devices[s.device].weights, 4 * elements) << plan.devices[s.device].name;
  }
}

}  // namespace
}  // namespace strata
