// The scheduler: stages over several devices with the hidden state moved by asynchronous copy,
// the memory check before loading, and errors of one stage reported without hanging the rest.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::cpu_device;
using testing::greedy_logits;

std::string split_model_path() { return testing::small_llama_file("split", 4, 11); }

// Forwards to a CPU device; its streams fail every computation from the `fail_from`-th on. Their
// copies after an event are the CPU stream's, queued behind the event; with `blocking_copies`,
// the default Stream's, which waits for the event on the caller's thread (as a remote stream's
// do with ClientOptions::async_copy off), so that every stage is done before the next starts.
class FlakyDevice : public Device {
 public:
  FlakyDevice(std::unique_ptr<Device> inner, int fail_from, bool blocking_copies = false)
      : inner_(std::move(inner)), fail_from_(fail_from), blocking_copies_(blocking_copies) {}
  DeviceInfo info() const override { return inner_->info(); }
  DeviceCaps caps() const override { return inner_->caps(); }
  Result<std::unique_ptr<Buffer>> alloc_buffer(uint64_t size) override {
    return inner_->alloc_buffer(size);
  }
  Result<std::unique_ptr<Buffer>> buffer_from_host(const void* ptr, uint64_t size) override {
    return inner_->buffer_from_host(ptr, size);
  }
  std::unique_ptr<Stream> create_stream() override;

  std::unique_ptr<Device> inner_;
  int fail_from_;
  const bool blocking_copies_;
  int computes_ = 0;
};

class FlakyStream : public Stream {
 public:
  FlakyStream(FlakyDevice& d, std::unique_ptr<Stream> inner) : d_(d), inner_(std::move(inner)) {}
  void set_tensor(const TensorRef& t, const void* p, size_t n) override {
    inner_->set_tensor(t, p, n);
  }
  void set_tensor_after(const TensorRef& t, const void* p, size_t n, const Event& after) override {
    if (d_.blocking_copies_) {
      Stream::set_tensor_after(t, p, n, after);
    } else {
      inner_->set_tensor_after(t, p, n, after);
    }
  }
  void get_tensor(const TensorRef& t, void* p, size_t n) override { inner_->get_tensor(t, p, n); }
  void compute(std::shared_ptr<const Graph> g) override {
    if (++d_.computes_ >= d_.fail_from_) {
      // An out-of-range buffer handle: the device reports it as an error of the queue.
      auto bad = std::make_shared<Graph>(*g);
      bad->tensors[0].buffer = 999999;
      g = bad;
    }
    inner_->compute(std::move(g));
  }
  Event record() override { return inner_->record(); }
  void wait_event(const Event& e) override { inner_->wait_event(e); }
  Status synchronize() override { return inner_->synchronize(); }

 private:
  FlakyDevice& d_;
  std::unique_ptr<Stream> inner_;
};

std::unique_ptr<Stream> FlakyDevice::create_stream() {
  return std::make_unique<FlakyStream>(*this, inner_->create_stream());
}

// A CPU device whose copies between stages wait on the caller's thread.
std::unique_ptr<Device> blocking_cpu(const std::string& name) {
  return std::make_unique<FlakyDevice>(cpu_device(name), std::numeric_limits<int>::max(), true);
}

Result<std::unique_ptr<Engine>> split_engine(std::vector<std::unique_ptr<Device>> devices,
                                             std::vector<double> split, int64_t n_ctx = 0) {
  auto model = Model::open(split_model_path());
  if (!model.is_ok()) return model.status();
  EngineOptions eo;
  eo.split = std::move(split);
  eo.n_ctx = n_ctx;
  return Engine::create(std::move(model).value(), std::move(devices), eo);
}

// Greedy generation from a fixed prompt; returns every logit row of the run, bytewise.
TEST(EngineSplit, AsyncAndSyncCopiesGiveTheBytesOfOneDevice) {
  std::vector<std::unique_ptr<Device>> one;
  one.push_back(cpu_device("CPU"));
  auto alone = split_engine(std::move(one), {1});
  ASSERT_TRUE(alone.is_ok()) << alone.status().message();
  const std::vector<uint8_t> ref = greedy_logits(**alone, 0);
  ASSERT_FALSE(ref.empty());

  auto three = [] {
    std::vector<std::unique_ptr<Device>> d;
    for (int i = 0; i < 3; ++i) d.push_back(cpu_device("CPU" + std::to_string(i)));
    return d;
  };
  auto split = split_engine(three(), {1, 2, 1});
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  ASSERT_EQ((*split)->stages().size(), 3u);
  EXPECT_EQ((*split)->stages()[1].layer_begin, 1);
  EXPECT_EQ((*split)->stages()[1].layer_end, 3);
  EXPECT_EQ(greedy_logits(**split, 0), ref) << "asynchronous copies between three stages";
  std::vector<std::unique_ptr<Device>> blocking;
  for (int i = 0; i < 3; ++i) blocking.push_back(blocking_cpu("CPU" + std::to_string(i)));
  auto one_by_one = split_engine(std::move(blocking), {1, 2, 1});
  ASSERT_TRUE(one_by_one.is_ok()) << one_by_one.status().message();
  EXPECT_EQ(greedy_logits(**one_by_one, 0), ref)
      << "stages one by one, copies that wait on this thread";
  // A device with no layers in the middle gets no stage.
  auto skip = split_engine(three(), {1, 0, 1});
  ASSERT_TRUE(skip.is_ok()) << skip.status().message();
  EXPECT_EQ((*skip)->stages().size(), 2u);
  EXPECT_EQ(greedy_logits(**skip, 0), ref);
}

TEST(EngineSplit, RefusesAModelThatDoesNotFitBeforeLoading) {
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device("CPU0"));
  d.push_back(cpu_device("CPU1", 2, 1 << 20));
  auto e = split_engine(std::move(d), {1, 1}, 4096);
  ASSERT_FALSE(e.is_ok());
  const std::string& m = e.status().message();
  EXPECT_NE(m.find("does not fit on its devices with 4096 KV cells"), std::string::npos) << m;
  // One line per device: its layers, need and free in MiB, and the mark where it does not fit.
  auto line_of = [&m](const std::string& device) {
    const size_t at = m.find("\n  " + device + " ");
    return at == std::string::npos ? std::string() : m.substr(at + 1, m.find('\n', at + 1) - at);
  };
  const std::string cpu1 = line_of("CPU1");
  EXPECT_NE(cpu1.find("2-4, output"), std::string::npos) << m;
  EXPECT_NE(cpu1.find(" 1.0 "), std::string::npos) << "free MiB: " << m;
  EXPECT_NE(cpu1.find("<- does not fit"), std::string::npos) << m;
  const std::string cpu0 = line_of("CPU0");
  EXPECT_NE(cpu0.find("0-2, embedding"), std::string::npos) << m;
  EXPECT_EQ(cpu0.find("does not fit"), std::string::npos) << m;

  // The same devices take it with a small context.
  std::vector<std::unique_ptr<Device>> d2;
  d2.push_back(cpu_device("CPU0"));
  d2.push_back(cpu_device("CPU1", 2, 64 << 20));
  EXPECT_TRUE(split_engine(std::move(d2), {1, 1}, 128).is_ok());
}

TEST(EngineSplit, AFailingStageIsAnErrorAndTheNextDecodeRuns) {
  for (const bool blocking : {false, true}) {
    SCOPED_TRACE(blocking ? "copies that wait on this thread" : "asynchronous copies");
    std::vector<std::unique_ptr<Device>> d;
    d.push_back(std::make_unique<FlakyDevice>(cpu_device("CPU0"), 1000, blocking));
    auto owned = std::make_unique<FlakyDevice>(cpu_device("CPU1"), 2, blocking);
    FlakyDevice* flaky = owned.get();
    d.push_back(std::move(owned));
    d.push_back(std::make_unique<FlakyDevice>(cpu_device("CPU2"), 1000, blocking));
    auto e = split_engine(std::move(d), {1, 1, 1});
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    ContextParams cp;
    cp.n_ctx = 64;
    auto ctx = Context::create(**e, cp);
    ASSERT_TRUE(ctx.is_ok());
    Batch b;
    b.add(3, 0, 0, true);
    ASSERT_TRUE((*ctx)->decode(b).is_ok());
    b.clear();
    b.add(4, 1, 0, true);
    Status s = (*ctx)->decode(b);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("stage 1 on CPU1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("999999"), std::string::npos) << s.message();
    EXPECT_EQ((*ctx)->seq_len(0), 1);
    flaky->fail_from_ = 1000;
    EXPECT_TRUE((*ctx)->decode(b).is_ok()) << "the streams must not keep the old error";
  }
}

}  // namespace
}  // namespace strata
