// ConnectionStream over a socket pair: bytes pass through as sent, and a request that breaks a
// limit (time, head size, body size) is answered by the stream with its status and closed.
#include "server/http_stream.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace strata::server {
namespace {

class StreamPair {
 public:
  StreamPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  ~StreamPair() {
    close(fds_[0]);
    close(fds_[1]);
  }
  int server() const { return fds_[0]; }
  void send_text(const std::string& s) {
    ASSERT_EQ(send(fds_[1], s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // What the stream wrote back, without waiting.
  std::string answer() {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = recv(fds_[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0;) out.append(buf, n);
    return out;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Reads everything available through the stream until it fails or would wait past the limits.
std::string drain(ConnectionStream& s, size_t chunk) {
  std::string out;
  std::string buf(chunk, '\0');
  for (ssize_t n; (n = s.read(buf.data(), buf.size())) > 0;) out.append(buf.data(), n);
  return out;
}

void expect_answer(const std::string& answer, int status, const std::string& says) {
  ASSERT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(status) + " ", 0), 0u) << answer;
  EXPECT_NE(answer.find("\r\nConnection: close\r\n"), std::string::npos) << answer;
  const auto body = nlohmann::json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
  EXPECT_EQ(body["error"]["code"], status);
  EXPECT_NE(body["error"]["message"].get<std::string>().find(says), std::string::npos) << answer;
}

StreamLimits short_limits() {
  StreamLimits l;
  l.read_timeout = std::chrono::milliseconds(5000);
  l.write_timeout = std::chrono::milliseconds(1000);
  l.max_request_bytes = 1000;
  l.request_timeout = std::chrono::seconds(0);
  return l;
}

TEST(ConnectionStream, AnswersA408WhenTheRequestDeadlinePasses) {
  StreamPair p;
  ConnectionStream s(p.server(), nullptr, short_limits());
  s.begin_request(HttpClock::now() + std::chrono::milliseconds(200));
  p.send_text("GET /health HTTP/1.1\r\nHost:");
  // The bytes sent come through; then the read waits, and fails at the deadline, well before
  // the 5 s read timeout.
  EXPECT_EQ(drain(s, 7), "GET /health HTTP/1.1\r\nHost:");
  EXPECT_TRUE(s.refused());
  expect_answer(p.answer(), 408, "--request-timeout");
  char c;
  EXPECT_EQ(s.read(&c, 1), -1);
  EXPECT_EQ(s.write("x", 1), -1);  // the answer has been given
}

TEST(ConnectionStream, AnswersA431PastTheHeadLimit) {
  StreamPair p;
  ConnectionStream s(p.server(), nullptr, short_limits());
  s.begin_request(HttpClock::now() + std::chrono::seconds(10));
  std::string head = "GET / HTTP/1.1\r\n";
  while (head.size() <= kMaxHeadBytes) head += "X-Filler: " + std::string(100, 'x') + "\r\n";
  std::thread writer([&] { p.send_text(head); });
  const std::string got = drain(s, 1);
  writer.join();
  EXPECT_EQ(got.size(), kMaxHeadBytes);
  expect_answer(p.answer(), 431, std::to_string(kMaxHeadBytes));
}

TEST(ConnectionStream, AnswersA413PastTheBodyLimitAndCountsEachRequestAlone) {
  StreamPair p;
  ConnectionStream s(p.server(), nullptr, short_limits());
  const std::string head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  // Two requests of 600 body bytes each: each within the limit of 1000 on its own.
  for (int i = 0; i < 2; ++i) {
    s.begin_request(HttpClock::now() + std::chrono::seconds(10));
    p.send_text(head + std::string(600, 'b'));
    std::string got(head.size() + 600, '\0');
    size_t off = 0;
    while (off < got.size()) {
      const ssize_t n = s.read(got.data() + off, got.size() - off);
      ASSERT_GT(n, 0);
      off += static_cast<size_t>(n);
    }
    EXPECT_FALSE(s.refused());
  }
  // A third sends more than the limit after its head.
  s.begin_request(HttpClock::now() + std::chrono::seconds(10));
  p.send_text(head + std::string(1500, 'b'));
  const std::string got = drain(s, 100);
  EXPECT_LE(got.size(), head.size() + 1000);
  expect_answer(p.answer(), 413, "1000");
}

TEST(ConnectionStream, WaitsForARequestOnlyAsLongAsTold) {
  StreamPair p;
  ConnectionStream s(p.server(), nullptr, short_limits());
  EXPECT_FALSE(s.wait_request(std::chrono::milliseconds(50)));
  p.send_text("G");
  EXPECT_TRUE(s.wait_request(std::chrono::milliseconds(50)));
  EXPECT_FALSE(s.refused());
  EXPECT_EQ(p.answer(), "");
}

}  // namespace
}  // namespace strata::server
