// The HTTP layer against slow and many clients, on the real `strata serve`: clients that send
// half a request hold their own connections only, get their error when their time is up, and
// connections past the cap get a 503.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server/server_test_util.h"

namespace strata::server::itest {
namespace {

using Clock = std::chrono::steady_clock;

// A TCP connection to the server, closed by the destructor.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool send_text(const std::string& s) {
    return fd_ >= 0 &&
           send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // True when bytes (or the close) have arrived, without waiting.
  bool answered() const {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  // Everything the server sends until it closes (or `limit` passes).
  std::string read_to_close(std::chrono::seconds limit) {
    std::string out;
    const auto until = Clock::now() + limit;
    char buf[4096];
    while (Clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

Json body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  if (at == std::string::npos) return Json();
  return Json::parse(response.substr(at + 4), nullptr, false);
}

void expect_json_error(const std::string& response, int status) {
  EXPECT_EQ(status_of(response), status) << response;
  const Json body = body_of(response);
  ASSERT_TRUE(body.is_object()) << response;
  EXPECT_EQ(body["error"]["code"], status) << response;
  EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
}

constexpr char kHalfHead[] = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty";
constexpr char kHalfBody[] =
    "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    "Content-Length: 100\r\n\r\n{\"prompt\": \"a";

class ServerHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata_server_http_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    model_ = (*dir_ / "synth.gguf").string();
    ASSERT_EQ(run_command({STRATA_BINARY, "gguf", "gen", "-o", model_}), 0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::vector<std::string> args(std::vector<std::string> more) {
    std::vector<std::string> a = {"-m", model_, "-t", "1", "-c", "2048", "-np", "2"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }

  static fs::path* dir_;
  static std::string model_;
};

fs::path* ServerHttpTest::dir_ = nullptr;
std::string ServerHttpTest::model_;

// 256 clients hold connections with half a head or half a body: /health and a completion still
// answer within 1 s while they are held, and each slow client gets a 408 when its request's
// time is up, as does one that trickles a byte at a time faster than any per-read timeout.
TEST_F(ServerHttpTest, SlowClientsHoldOnlyTheirOwnConnections) {
  ServerProcess s(args({"--request-timeout", "6"}));
  ASSERT_GT(s.port(), 0);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 256; ++i) {
    slow.push_back(std::make_unique<RawClient>(s.port()));
    ASSERT_TRUE(slow.back()->connected()) << i;
    ASSERT_TRUE(slow.back()->send_text(i % 2 ? kHalfHead : kHalfBody)) << i;
  }
  std::atomic<bool> trickling{true};
  RawClient trickle(s.port());
  std::thread trickler([&] {
    const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ";
    for (size_t i = 0; trickling.load(); ++i) {
      if (!trickle.send_text(std::string(1, i < head.size() ? head[i] : 'x'))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  struct StopTrickling {  // on every way out, a failed assertion's too
    std::atomic<bool>& flag;
    std::thread& thread;
    ~StopTrickling() {
      flag = false;
      if (thread.joinable()) thread.join();
    }
  } stop_trickling{trickling, trickler};

  // 1 s; a sanitizer build runs several times slower, and gets its scale (CMakeLists.txt).
  const int limit_s = STRATA_TEST_TIME_SCALE;
  auto c = std::make_unique<httplib::Client>("127.0.0.1", s.port());
  c->set_connection_timeout(limit_s, 0);
  c->set_read_timeout(limit_s, 0);
  c->set_write_timeout(limit_s, 0);
  const auto t0 = Clock::now();
  auto health = c->Get("/health");
  const auto t1 = Clock::now();
  ASSERT_TRUE(health) << "no answer to /health within " << limit_s
                      << " s: " << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200) << health->body;
  auto completion =
      c->Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", "application/json");
  const auto t2 = Clock::now();
  ASSERT_TRUE(completion) << "no completion within " << limit_s
                          << " s: " << httplib::to_string(completion.error());
  EXPECT_EQ(completion->status, 200) << completion->body;
  // Both answered while every slow client was still held (nothing sent to any of them yet).
  int answered_early = 0;
  for (const auto& r : slow) answered_early += r->answered();
  EXPECT_EQ(answered_early, 0);
  const auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  RecordProperty("health_ms", std::to_string(ms(t1 - t0)));
  RecordProperty("completion_ms", std::to_string(ms(t2 - t1)));

  for (size_t i = 0; i < slow.size(); ++i) {
    SCOPED_TRACE("slow client " + std::to_string(i));
    expect_json_error(slow[i]->read_to_close(std::chrono::seconds(60)), 408);
  }
  const std::string trickled = trickle.read_to_close(std::chrono::seconds(60));
  trickling = false;
  expect_json_error(trickled, 408);
  EXPECT_NE(body_of(trickled)["error"]["message"].get<std::string>().find("--request-timeout"),
            std::string::npos)
      << trickled;
  EXPECT_EQ(get(s, "/health").status, 200);
}

// Past --max-connections a connection gets a 503 with a JSON body and Retry-After, at once;
// when the held ones go, new connections are served again.
TEST_F(ServerHttpTest, ConnectionsPastTheCapGet503) {
  ServerProcess s(args({"--max-connections", "8"}));
  ASSERT_GT(s.port(), 0);
  {
    std::vector<std::unique_ptr<RawClient>> held;
    for (int i = 0; i < 8; ++i) {
      held.push_back(std::make_unique<RawClient>(s.port()));
      ASSERT_TRUE(held.back()->send_text(kHalfHead));
    }
    // The 8 are admitted one by one by the accept loop; the 9th finds them all open.
    RawClient ninth(s.port());
    ASSERT_TRUE(ninth.send_text("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    const std::string reply = ninth.read_to_close(std::chrono::seconds(30));
    expect_json_error(reply, 503);
    EXPECT_NE(reply.find("\r\nRetry-After: 1\r\n"), std::string::npos) << reply;
    EXPECT_NE(body_of(reply)["error"]["message"].get<std::string>().find("--max-connections"),
              std::string::npos);
  }
  // Closed by the clients: their threads end and the server takes new connections again.
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = get(s, "/health").status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);
}

// The deadline covers reading a request, not writing its answer nor waiting between requests:
// with --request-timeout 1, generations that take longer arrive whole, streamed and not, and a
// keep-alive connection idle for longer serves its next request.
TEST_F(ServerHttpTest, LongAnswersOutliveTheRequestDeadline) {
  ServerProcess s(args({"--request-timeout", "1", "-c", "16384", "-np", "1"}));
  ASSERT_GT(s.port(), 0);
  auto c = s.client();
  c->set_keep_alive(true);
  // The answer's length comes from this build's own speed: a short answer is timed, and the
  // long ones are sized to take 1.5 deadlines at that speed. Tokens later in the context cost
  // more, so they take longer still (about 3 s here), in Release and under a sanitizer alike.
  const int n_short = 200;
  const auto s0 = Clock::now();
  auto warm = c->Post("/completion",
                      Json{{"prompt", "a"}, {"n_predict", n_short}, {"ignore_eos", true}}.dump(),
                      "application/json");
  ASSERT_TRUE(warm) << httplib::to_string(warm.error());
  ASSERT_EQ(warm->status, 200);
  const double per_token = std::chrono::duration<double>(Clock::now() - s0).count() / n_short;
  const int n_first = std::clamp(static_cast<int>(1.5 / per_token), n_short, 15000);
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "plain");
    // Under CI's parallel sanitizer runs the speed moves by 2x between the timed answer and
    // these: an answer that came in under the deadline tested nothing, so it is asked again,
    // twice as long (up to what the context holds).
    int n_predict = n_first;
    for (int attempt = 0;; ++attempt) {
      const auto t0 = Clock::now();
      auto res = c->Post(
          "/completion",
          Json{{"prompt", "a"}, {"n_predict", n_predict}, {"ignore_eos", true}, {"stream", stream}}
              .dump(),
          "application/json");
      ASSERT_TRUE(res) << httplib::to_string(res.error());
      ASSERT_EQ(res->status, 200);
      Json last;
      if (stream) {
        bool done = false;
        const std::vector<Json> events = sse_events(res->body, &done);
        ASSERT_FALSE(events.empty());
        last = events.back();
      } else {
        last = Json::parse(res->body);
      }
      EXPECT_EQ(last["tokens_predicted"], n_predict);
      // What the test is about: an answer that took longer than the request deadline.
      if (Clock::now() - t0 >= std::chrono::seconds(1)) break;
      ASSERT_LT(attempt, 3) << "generation of " << n_predict << " tokens faster than the deadline";
      n_predict = std::min(2 * n_predict, 15000);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // idle past the deadline
  }
  EXPECT_EQ(get(s, "/health").status, 200);
}

// A connection that sends nothing is closed after --keep-alive-timeout, without an answer; a
// head past the limit is a 431.
TEST_F(ServerHttpTest, IdleConnectionsCloseAndHugeHeadsAreRefused) {
  ServerProcess s(args({"--keep-alive-timeout", "1"}));
  ASSERT_GT(s.port(), 0);
  RawClient idle(s.port());
  ASSERT_TRUE(idle.connected());
  EXPECT_EQ(idle.read_to_close(std::chrono::seconds(30)), "");
  EXPECT_FALSE(idle.send_text("GET /health HTTP/1.1\r\n\r\n") &&
               status_of(idle.read_to_close(std::chrono::seconds(5))) == 200);

  RawClient huge(s.port());
  std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 200; ++i)
    head += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'x') + "\r\n";
  huge.send_text(head + "\r\n");
  expect_json_error(huge.read_to_close(std::chrono::seconds(30)), 431);
  EXPECT_EQ(get(s, "/health").status, 200);
}

// Over TLS the same limits hold: a client stuck in the handshake and one that sends half a
// request after it hold their own connections only; the second gets its 408 inside TLS, and
// /health answers meanwhile.
TEST_F(ServerHttpTest, TlsSlowClientsGetTheirErrors) {
  const std::string key = (*dir_ / "key.pem").string(), cert = (*dir_ / "cert.pem").string();
  if (run_command({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                   "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1"}) != 0) {
    GTEST_SKIP() << "no openssl command to make a certificate";
  }
  ServerProcess s(args({"--request-timeout", "3", "--ssl-key-file", key, "--ssl-cert-file", cert}));
  ASSERT_GT(s.port(), 0);
  RawClient no_handshake(s.port());
  ASSERT_TRUE(no_handshake.send_text(std::string("\x16\x03\x01\x02\x00", 5)));  // half a hello

  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  RawClient half(s.port());
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  SSL_set_fd(ssl.get(), half.fd());
  ASSERT_EQ(SSL_connect(ssl.get()), 1);
  const std::string head = kHalfHead;
  ASSERT_EQ(SSL_write(ssl.get(), head.data(), static_cast<int>(head.size())),
            static_cast<int>(head.size()));

  httplib::SSLClient c("127.0.0.1", s.port());
  c.enable_server_certificate_verification(false);
  c.set_read_timeout(1, 0);
  auto health = c.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);

  std::string reply;
  char buf[4096];
  for (int n; (n = SSL_read(ssl.get(), buf, sizeof(buf))) > 0;) reply.append(buf, n);
  expect_json_error(reply, 408);
  EXPECT_EQ(no_handshake.read_to_close(std::chrono::seconds(30)), "");
}

}  // namespace
}  // namespace strata::server::itest
