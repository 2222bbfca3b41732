// A stream runs the graph it ran last again without checking and placing it anew: the CPU
// stream keeps it placed (CpuPreparedGraph), the remote stream sends GRAPH_RECOMPUTE without
// serialising it and the worker keeps it placed. Only while the device's buffers are the ones
// it was placed in: each run reads this step's data, and a buffer that went away is an error,
// never a stale address.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu_backend.h"
#include "graph/builder.h"
#include "rpc/protocol.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"

namespace strata {
namespace stream_rerun_test {

constexpr int64_t kN = 1000;

// out = a + b, each kN floats at the start of its own buffer.
std::shared_ptr<const Graph> add_graph(uint64_t a, uint64_t b, uint64_t out) {
  GraphBuilder g;
  const int32_t ta = g.external(make_tensor(a, 0, DType::kF32, kN));
  const int32_t tb = g.external(make_tensor(b, 0, DType::kF32, kN));
  const int32_t to = g.external(make_tensor(out, 0, DType::kF32, kN));
  g.node(Op::kAdd, to, {ta, tb});
  g.plan();
  return std::make_shared<const Graph>(g.finish(0));
}

class StreamRerun : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      worker_ = testing::start_local_worker({}, 2);
      ASSERT_TRUE(worker_);
      auto d = testing::remote_device_on(*worker_);
      ASSERT_TRUE(d.is_ok()) << d.status().message();
      device_ = std::move(d).value();
    } else {
      device_ = cpu_device_new({.n_threads = 2});
    }
    stream_ = device_->create_stream();
    a_ = buffer();
    b_ = buffer();
    out_ = buffer();
  }

  std::unique_ptr<Buffer> buffer() {
    auto b = device_->alloc_buffer(4 * kN);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    return b.is_ok() ? std::move(b).value() : nullptr;
  }

  // The graph run once with a = x, b = 1: returns out, and the stream's status in `status_`.
  std::vector<float> run(const std::shared_ptr<const Graph>& graph, float x) {
    const std::vector<float> av(kN, x), bv(kN, 1.0f);
    stream_->set_tensor(make_tensor(a_->handle(), 0, DType::kF32, kN), av.data(), 4 * kN);
    stream_->set_tensor(make_tensor(b_->handle(), 0, DType::kF32, kN), bv.data(), 4 * kN);
    stream_->compute(graph);
    std::vector<float> got(kN, -1.0f);
    stream_->get_tensor(make_tensor(out_->handle(), 0, DType::kF32, kN), got.data(), 4 * kN);
    status_ = stream_->synchronize();
    return got;
  }

  // GRAPH_RECOMPUTE messages sent so far (remote only).
  uint64_t recomputes() const {
    const auto conn = rpc::remote_device_connection(*device_);
    return conn ? conn->stats()
                      .snapshot()
                      .commands[static_cast<int>(rpc::Command::kGraphRecompute)]
                      .count
                : 0;
  }

  std::unique_ptr<rpc::Worker> worker_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Buffer> a_, b_, out_;
  Status status_;
};

TEST_P(StreamRerun, ARerunReadsThisStepsData) {
  const auto graph = add_graph(a_->handle(), b_->handle(), out_->handle());
  for (float x : {1.0f, 2.0f, 40.0f}) {
    const std::vector<float> got = run(graph, x);
    ASSERT_TRUE(status_.is_ok()) << status_.message();
    EXPECT_EQ(got.front(), x + 1.0f);
    EXPECT_EQ(got.back(), x + 1.0f);
  }
  if (GetParam()) {
    EXPECT_EQ(recomputes(), 2u) << "the second and third runs";
  }
}

TEST_P(StreamRerun, ARerunAfterItsBufferWentAwayIsAnError) {
  const uint64_t gone = b_->handle();
  const auto graph = add_graph(a_->handle(), gone, out_->handle());
  run(graph, 1.0f);
  ASSERT_TRUE(status_.is_ok()) << status_.message();
  // The buffer is freed and another takes its place (maybe its memory): the same graph now
  // names a buffer the device does not have.
  b_.reset();
  b_ = buffer();
  ASSERT_NE(b_->handle(), gone);
  stream_->compute(graph);
  const Status st = stream_->synchronize();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("buffer " + std::to_string(gone) + " is not a buffer of this"),
            std::string::npos)
      << st.message();
  if (GetParam()) {
    EXPECT_EQ(recomputes(), 1u) << "the rerun was a GRAPH_RECOMPUTE";
  }
  // The stream goes on: a graph over the buffers that are there runs.
  const auto again = add_graph(a_->handle(), b_->handle(), out_->handle());
  const std::vector<float> got = run(again, 5.0f);
  ASSERT_TRUE(status_.is_ok()) << status_.message();
  EXPECT_EQ(got.front(), 6.0f);
}

INSTANTIATE_TEST_SUITE_P(Devices, StreamRerun, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Remote" : "Cpu");
                         });

}  // namespace stream_rerun_test
}  // namespace strata
