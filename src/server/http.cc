#include "server/http.h"

#include <httplib.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>

#include "server/http_connections.h"
#include "server/http_stream.h"
#include "server/reply.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

constexpr int kListenBacklog = 512;
// Files the server holds besides its connections: the model, workers' sockets, refused sockets
// lingering (256), logs.
constexpr rlim_t kSpareFiles = 512;

// Compares without an early exit so that the time taken does not reveal the key's prefix.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return diff == 0 && !b.empty();
}

// The key a request presents: `Authorization: Bearer KEY` (OpenAI clients) or `X-Api-Key: KEY`
// (Anthropic clients).
std::string presented_key(const Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.compare(0, prefix.size(), prefix) == 0) return auth.substr(prefix.size());
  return req.get_header_value("X-Api-Key");
}

}  // namespace

void send_error(Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(error_body(e), "application/json");
}

void send_json(Response& res, const Json& j) { res.set_content(dump(j), "application/json"); }

// cpp-httplib's request parser and router, with its connection handling replaced: the accept
// loop hands each socket to Connections (a thread each, up to the cap), and each connection is
// served here over a ConnectionStream, whose reads of a request end at its deadline.
class HttpServer::Listener : public httplib::Server {
 public:
  Listener(const HttpOptions& o, const TlsContext* tls) : options_(o), tls_(tls) {
    // The accept loop calls process_and_close_socket through this queue on its own thread;
    // that override only hands the socket over (Connections::admit never blocks).
    new_task_queue = [] { return new InlineQueue; };
    limits_.read_timeout = std::chrono::seconds(o.timeout_seconds);
    limits_.write_timeout = std::chrono::seconds(o.timeout_seconds);
    limits_.request_timeout = std::chrono::seconds(o.request_timeout_seconds);
    limits_.max_request_bytes = 2 * o.max_body_bytes + kMaxHeadBytes;
  }

  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients (16 connecting at once)
  // overflows it and connections fail. Listening again on the bound socket raises the backlog.
  void raise_backlog(int n) { ::listen(svr_sock_, n); }
  void set_connections(Connections* c) { connections_ = c; }

  // One connection, on its own thread: requests one after another (keep-alive) until the
  // client closes, stays idle too long, is too slow, or the server stops.
  void serve(int fd) {
    ConnectionStream strm(fd, tls_, limits_);
    const auto now = HttpClock::now;
    if (strm.handshake(now() + limits_.request_timeout)) {
      for (int n = options_.keep_alive_max_requests; n > 0 && running(); --n) {
        if (!strm.wait_request(std::chrono::seconds(options_.keep_alive_timeout_seconds))) break;
        strm.begin_request(now() + limits_.request_timeout);
        bool closed = false;
        const bool ok = process_request(strm, n == 1 || !running(), closed, nullptr);
        if (!ok || closed || strm.refused()) break;
      }
    }
    if (strm.refused()) linger(fd);
  }

 private:
  class InlineQueue : public httplib::TaskQueue {
   public:
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
  };

  bool process_and_close_socket(int sock) override {
    connections_->admit(sock);
    return true;
  }

  bool running() const { return svr_sock_ != INVALID_SOCKET && !connections_->stopping(); }

  // After an answer that closes the connection early (408, 413, 431): the client's unread
  // bytes are dropped for a moment, as a close with unread data would reset the connection
  // and could destroy the answer before the client reads it.
  static void linger(int fd) {
    ::shutdown(fd, SHUT_WR);
    const auto until = HttpClock::now() + std::chrono::seconds(1);
    char drop[4096];
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - HttpClock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
      const ssize_t n = recv(fd, drop, sizeof(drop), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
    }
  }

  const HttpOptions& options_;
  const TlsContext* tls_;
  StreamLimits limits_;
  Connections* connections_ = nullptr;
};

HttpServer::HttpServer(HttpOptions options, Dispatcher& dispatcher, Log* log)
    : options_(std::move(options)), log_(log) {
  const bool tls = !options_.ssl_key_file.empty() || !options_.ssl_cert_file.empty();
  if (tls) {
    if (options_.ssl_key_file.empty() || options_.ssl_cert_file.empty()) {
      setup_error_ = invalid_argument("HTTPS needs both --ssl-key-file and --ssl-cert-file");
    } else {
      Result<std::unique_ptr<TlsContext>> ctx =
          TlsContext::create(options_.ssl_cert_file, options_.ssl_key_file);
      if (ctx) {
        tls_ = std::move(*ctx);
      } else {
        setup_error_ = ctx.status();
      }
    }
  }
  http_ = std::make_unique<Listener>(options_, tls_.get());
  // Past the cap a TLS client would need a handshake before its 503: it is closed instead.
  const std::string refusal =
      tls_ ? ""
           : raw_error_response(503,
                                "the server has " + std::to_string(options_.max_connections) +
                                    " connections open, its limit (--max-connections): retry later",
                                1);
  connections_ = std::make_unique<Connections>(options_.max_connections, refusal,
                                               [this](int fd) { http_->serve(fd); });
  http_->set_connections(connections_.get());
  install(dispatcher.routes());
}

HttpServer::~HttpServer() {
  stop();
  connections_->shutdown();
}

Status HttpServer::bind() {
  if (!setup_error_.is_ok()) return setup_error_;
  // Each connection holds a socket: a soft limit of open files below the cap (often 1024) would
  // stop accept() before the cap answers 503. The soft limit goes up to the hard one.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    if (files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
    }
    const rlim_t wanted = static_cast<rlim_t>(options_.max_connections) + kSpareFiles;
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < wanted && log_ != nullptr) {
      log_->write(LogLevel::kWarning,
                  "open files are limited to " + std::to_string(files.rlim_cur) + ", below " +
                      std::to_string(options_.max_connections) +
                      " connections (--max-connections) and the server's own files; raise "
                      "`ulimit -n` or lower --max-connections");
    }
  }
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) return unavailable("cannot listen on " + options_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port));
    }
    port_ = options_.port;
  }
  http_->raise_backlog(kListenBacklog);
  return Status::ok();
}

bool HttpServer::listen() {
  const bool ok = http_->listen_after_bind();
  connections_->shutdown();
  return ok;
}

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::install(std::vector<Route> routes) {
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(options_.timeout_seconds, 0);
  http_->set_write_timeout(options_.timeout_seconds, 0);
  if (options_.reuse_port) {
    http_->set_socket_options([](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
    });
  }
  if (!options_.static_path.empty() &&
      !http_->set_mount_point(options_.api_prefix + "/", options_.static_path)) {
    setup_error_ = invalid_argument("--path: '" + options_.static_path + "' is not a folder");
  }
  if (log_ != nullptr && log_->enabled(LogLevel::kTrace)) {
    http_->set_logger([this](const Request& req, const Response& res) {
      log_->write(LogLevel::kTrace, req.method + " " + req.path + " " + std::to_string(res.status) +
                                        " " + req.remote_addr);
    });
  }
  http_->set_error_handler(
      httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
        if (!res.body.empty()) return HandlerResponse::Unhandled;
        std::string message = "HTTP error " + std::to_string(res.status);
        if (res.status == 404) message = "no endpoint " + req.method + " " + req.path;
        if (res.status == 413) {
          message = "the request body is larger than the limit of " +
                    std::to_string(options_.max_body_bytes) + " bytes";
        }
        send_error(res, ApiError{res.status, message});
        return HandlerResponse::Handled;
      }));
  http_->set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what += std::string(": ") + e.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, what});
  });

  for (Route& r : routes) {
    Handler handler = std::move(r.handler);
    if (r.access == Route::Access::kKeyed) {
      // Checked in the handler, after the body has been read, so that a refused request
      // leaves the connection usable.
      handler = [this, inner = std::move(handler)](const Request& req, Response& res) {
        if (!options_.api_keys.empty()) {
          const std::string key = presented_key(req);
          bool ok = false;
          for (const std::string& k : options_.api_keys) ok |= same_secret(key, k);
          if (!ok) {
            return send_error(
                res, ApiError{401, "invalid or missing API key (Authorization: Bearer KEY)"});
          }
        }
        inner(req, res);
      };
    }
    const std::string path = options_.api_prefix + r.path;
    switch (r.method) {
      case Route::Method::kGet:
        http_->Get(path, handler);
        break;
      case Route::Method::kPost:
        http_->Post(path, handler);
        break;
      case Route::Method::kDelete:
        http_->Delete(path, handler);
        break;
    }
  }
}

}  // namespace strata::server
