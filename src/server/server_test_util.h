// Helpers of the server's integration tests: child processes of the real binary (`strata
// serve`, `strata worker`) on 127.0.0.1, stopped by their owner's destructor on every path, and
// HTTP helpers over cpp-httplib's client.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace strata::server::itest {

using Json = nlohmann::json;
namespace fs = std::filesystem;

inline int run_command(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  return std::system((cmd + ">/dev/null 2>&1").c_str());
}

// A child running STRATA_BINARY with `args` (and `env` added to its environment) whose first
// line on stdout names its address: "... listening on [http://]127.0.0.1:PORT ...". The
// destructor stops it (SIGTERM, then SIGKILL); its stderr goes to `log` (or /dev/null).
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args,
               const std::vector<std::pair<std::string, std::string>>& env = {},
               const std::string& log = "") {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      const int err_fd = log.empty() ? open("/dev/null", O_WRONLY)
                                     : open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err_fd, STDERR_FILENO);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<std::string> all = {STRATA_BINARY};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    out_fd_ = out[0];
    const size_t at = line.find("127.0.0.1:");
    if (at != std::string::npos) port_ = std::atoi(line.c_str() + at + 10);
  }
  ~ChildProcess() { stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // True while the process has not exited (reaps it when it has).
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    reaped(status);
    return false;
  }
  // SIGKILL, and waits for the process to be gone.
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped(status);
  }
  // Exit status after a SIGTERM: 0 when the process shut down cleanly.
  int stop() {
    if (pid_ <= 0) return exit_;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped(status);
        return exit_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill_now();
    return -1;
  }

 private:
  void reaped(int status) {
    pid_ = -1;
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
    exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  int exit_ = -1;
};

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

// `strata serve --port 0 ARGS`.
class ServerProcess : public ChildProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args,
                         const std::vector<std::pair<std::string, std::string>>& env = {},
                         const std::string& log = "")
      : ChildProcess(with_prefix({"serve", "--port", "0", "--metrics"}, std::move(args)), env,
                     log) {}

  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port());
    c->set_read_timeout(120, 0);
    return c;
  }

  static std::vector<std::string> with_prefix(std::vector<std::string> prefix,
                                              std::vector<std::string> args) {
    prefix.insert(prefix.end(), args.begin(), args.end());
    return prefix;
  }
};

// `strata worker -t 1 --port 0` on 127.0.0.1.
class WorkerProcess : public ChildProcess {
 public:
  WorkerProcess() : ChildProcess({"worker", "-t", "1", "--port", "0"}) {}
};

struct Reply {
  int status = 0;
  Json body;
  std::string raw;
};

inline Reply post(const ServerProcess& s, const std::string& path, const std::string& body,
                  const httplib::Headers& headers = {}) {
  Reply r;
  auto res = s.client()->Post(path.c_str(), headers, body, "application/json");
  if (!res) return r;
  r.status = res->status;
  r.raw = res->body;
  r.body = Json::parse(res->body, nullptr, false);
  return r;
}

inline Reply get(const ServerProcess& s, const std::string& path,
                 const httplib::Headers& headers = {}) {
  Reply r;
  auto res = s.client()->Get(path.c_str(), headers);
  if (!res) return r;
  r.status = res->status;
  r.raw = res->body;
  r.body = Json::parse(res->body, nullptr, false);
  return r;
}

inline std::string completion_text(const ServerProcess& s, const std::string& prompt,
                                   int max_tokens, Json extra = Json::object()) {
  Json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  body.update(extra);
  Reply r = post(s, "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.raw;
  if (r.status != 200) return "";
  return r.body["choices"][0]["text"].get<std::string>();
}

// The JSON payloads of an SSE body, in order, and whether it ended with [DONE].
inline std::vector<Json> sse_events(const std::string& body, bool* done) {
  std::vector<Json> out;
  *done = false;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(Json::parse(data));  // throws (fails the test) on invalid JSON or UTF-8
  }
  return out;
}

inline void expect_error(const Reply& r, int status) {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  ASSERT_TRUE(r.body.contains("error")) << r.raw;
  EXPECT_TRUE(r.body["error"]["message"].is_string());
  EXPECT_FALSE(r.body["error"]["message"].get<std::string>().empty());
  EXPECT_TRUE(r.body["error"]["type"].is_string());
  EXPECT_EQ(r.body["error"]["code"], status);
}

inline bool all_slots_idle(const ServerProcess& s) {
  Reply r = get(s, "/slots");
  if (r.status != 200 || !r.body.is_array()) return false;
  for (const Json& slot : r.body) {
    if (slot["is_processing"].get<bool>()) return false;
  }
  return true;
}

// Slots are freed by the decode thread after the last event; wait for it (bounded).
inline bool wait_all_idle(const ServerProcess& s) {
  for (int i = 0; i < 400; ++i) {
    if (all_slots_idle(s)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// Parses the Prometheus text format: every sample line is `name{labels} value`, every sample's
// metric family has a # TYPE line before it. Returns samples by "name{labels}".
inline std::map<std::string, double> parse_prometheus(const std::string& text, std::string* error) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) {
      *error = "no value: " + line;
      return {};
    }
    const std::string key = line.substr(0, space);
    std::string name = key.substr(0, key.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (types.count(name) == 0 && name.size() > s.size() &&
          name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name = name.substr(0, name.size() - s.size());
      }
    }
    if (types.count(name) == 0) {
      *error = "no # TYPE for " + name;
      return {};
    }
    for (char c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') {
        *error = "bad metric name " + name;
        return {};
      }
    }
    char* end = nullptr;
    const std::string value = line.substr(space + 1);
    double v = value == "+Inf" ? INFINITY : std::strtod(value.c_str(), &end);
    if (value != "+Inf" && (end == value.c_str() || *end != '\0')) {
      *error = "bad value: " + line;
      return {};
    }
    samples[key] = v;
  }
  return samples;
}

// Greedy texts of `prompts` sent all at once, in order.
inline std::vector<std::string> concurrent_texts(const ServerProcess& s,
                                                 const std::vector<std::string>& prompts,
                                                 int max_tokens) {
  std::vector<std::string> texts(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { texts[i] = completion_text(s, prompts[i], max_tokens); });
  }
  for (std::thread& t : threads) t.join();
  return texts;
}

inline std::vector<std::string> sixteen_prompts() {
  std::vector<std::string> prompts;
  for (int i = 0; i < 16; ++i) {
    prompts.push_back("prompt number " + std::to_string(i) + (i % 3 ? " with more words" : ""));
  }
  return prompts;
}

}  // namespace strata::server::itest
