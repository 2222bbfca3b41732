// What each RPC transport costs over loopback: a round trip of a small message, the throughput
// of large messages, and a large SET_TENSORS into a worker's buffers through the whole RPC
// path (client, transport, worker). Transports (kind 0-3): tcp, unix (seqpacket), ucx over
// TCP, ucx over shared memory (rpc/transport_testing.h); a UCX kind is skipped in a build
// without UCX. Nothing is asserted.
//
//   build/strata_bench_kernels --benchmark_filter=Transport
//
// rss_peak_MiB is the process's peak resident memory after the benchmark (client, worker and
// their buffers share the process): a receive that stages the payload before copying it into
// the buffer shows one more payload there than one that receives it in place.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "rpc/client.h"
#include "rpc/transport.h"
#include "rpc/transport_testing.h"
#include "rpc/worker.h"

namespace strata::rpc {
namespace {

double rss_peak_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// A connected pair and a thread on the far end that answers every message with a message of
// `reply_bytes`.
struct Echo {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Transport> near;
  std::unique_ptr<Transport> far;
  std::thread thread;
  std::string error;

  Echo(const TestTransport& k, uint64_t reply_bytes) {
    k.use_env();
    auto l = transport_listen(k.listen_address());
    if (!l) {
      error = l.status().message();
      return;
    }
    listener = std::move(*l);
    // A UCX connect completes while the far end progresses: the echo thread, once accepted.
    Result<std::unique_ptr<Transport>> c = Status(ErrorKind::kInternal, "not run");
    std::thread connector([&] { c = transport_connect(listener->address(), 10000); });
    auto a = listener->accept(10000);
    if (!a) {
      error = a.status().message();
      connector.join();
      return;
    }
    far = std::move(*a);
    thread = std::thread([this, reply_bytes] {
      std::vector<uint8_t> reply(reply_bytes);
      for (;;) {
        Result<Message> m = far->recv(-1);
        if (!m) return;
        Header h = m->header;
        h.flags = kFlagResponse;
        if (!send_message(*far, h, reply)) return;
      }
    });
    connector.join();
    if (!c) {
      error = c.status().message();
      return;
    }
    near = std::move(*c);
  }
  ~Echo() {
    if (near) near->shutdown();
    if (far) far->shutdown();
    if (thread.joinable()) thread.join();
  }
};

// Sends `bytes` and waits for a 16-byte answer, state.range(1) bytes per iteration.
void BM_Transport(benchmark::State& state) {
  const TestTransport& k = test_transports()[state.range(0)];
  const uint64_t bytes = static_cast<uint64_t>(state.range(1));
  state.SetLabel(k.name);
  Echo echo(k, 16);
  if (!echo.error.empty()) {
    state.SkipWithError(echo.error.c_str());
    return;
  }
  std::vector<uint8_t> payload(bytes, 0x5a);
  Header h;
  h.command = Command::kSetTensor;
  for (auto _ : state) {
    if (!send_message(*echo.near, h, payload)) {
      state.SkipWithError("send failed");
      return;
    }
    Result<Message> m = echo.near->recv(30000);
    if (!m) {
      state.SkipWithError(m.status().message().c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Transport)
    ->ArgsProduct({{0, 1, 2, 3}, {16, 64 << 10, 4 << 20, 64 << 20}})
    ->ArgNames({"kind", "bytes"})
    ->UseRealTime();

// A worker in this process, a client connection to it, and a SET_TENSORS of state.range(1)
// bytes over 4 regions of one buffer, then a SYNCHRONIZE, per iteration.
void BM_TransportWorkerSetTensors(benchmark::State& state) {
  const TestTransport& k = test_transports()[state.range(0)];
  const uint64_t bytes = static_cast<uint64_t>(state.range(1));
  state.SetLabel(k.name);
  k.use_env();
  WorkerOptions wo;
  wo.address = k.listen_address();
  wo.n_threads = 1;
  wo.log = false;
  auto worker = Worker::start(wo);
  if (!worker) {
    state.SkipWithError(worker.status().message().c_str());
    return;
  }
  ClientOptions co;
  co.endpoint = (*worker)->address();
  co.name = "RPC0";
  auto conn = Connection::open(co);
  if (!conn) {
    state.SkipWithError(conn.status().message().c_str());
    return;
  }
  std::vector<uint8_t> alloc_req;
  encode(AllocBufferRequest{bytes}, &alloc_req);
  const Piece alloc_piece(alloc_req);
  auto alloc = (*conn)->call(Command::kAllocBuffer, std::span<const Piece>(&alloc_piece, 1));
  if (!alloc) {
    state.SkipWithError(alloc.status().message().c_str());
    return;
  }
  const uint64_t handle = decode_alloc_buffer_response(alloc->payload)->handle;
  std::vector<uint8_t> data(bytes, 0x3c);
  SetTensorsRequest req;
  const uint64_t quarter = bytes / 4;
  for (uint64_t i = 0; i < 4; ++i) {
    req.regions.push_back({handle, i * quarter, i == 3 ? bytes - 3 * quarter : quarter});
  }
  std::vector<uint8_t> head;
  encode(req, &head);
  const Piece pieces[2] = {Piece(head), Piece(data)};
  for (auto _ : state) {
    Status s = (*conn)->send_one_way(Command::kSetTensors, pieces, false);
    auto sync = (*conn)->call(Command::kSynchronize, {});
    if (!s || !sync) {
      state.SkipWithError(!s ? s.message().c_str() : sync.status().message().c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["rss_peak_MiB"] = rss_peak_mib();
}
BENCHMARK(BM_TransportWorkerSetTensors)
    ->ArgsProduct({{0, 1, 2, 3}, {256 << 20}})
    ->ArgNames({"kind", "bytes"})
    ->UseRealTime()
    ->Iterations(8);

}  // namespace
}  // namespace strata::rpc
