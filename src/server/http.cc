#include "server/http.h"

#include <httplib.h>
#include <sys/socket.h>

#include "server/reply.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

constexpr int kListenBacklog = 512;

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

namespace {

// cpp-httplib 0.11 listens with a backlog of 5: a burst of clients (16 connecting at once)
// overflows it and connections fail. Listening again on the bound socket raises the backlog.
template <typename Base>
class Listener : public Base {
 public:
  using Base::Base;
  void raise_backlog(int n) { ::listen(this->svr_sock_, n); }
};

template <typename Base, typename... A>
std::unique_ptr<httplib::Server> make_listener(std::function<void(int)>& raise, A&&... a) {
  auto l = std::make_unique<Listener<Base>>(std::forward<A>(a)...);
  raise = [p = l.get()](int n) { p->raise_backlog(n); };
  return l;
}

}  // namespace

HttpServer::HttpServer(HttpOptions options, Dispatcher& dispatcher, Log* log)
    : options_(std::move(options)), log_(log) {
  const bool tls = !options_.ssl_key_file.empty() || !options_.ssl_cert_file.empty();
  if (tls) {
    if (options_.ssl_key_file.empty() || options_.ssl_cert_file.empty()) {
      setup_error_ = invalid_argument("HTTPS needs both --ssl-key-file and --ssl-cert-file");
    }
    http_ = make_listener<httplib::SSLServer>(raise_backlog_, options_.ssl_cert_file.c_str(),
                                              options_.ssl_key_file.c_str());
    if (setup_error_.is_ok() && !http_->is_valid()) {
      setup_error_ = invalid_argument("cannot use the certificate '" + options_.ssl_cert_file +
                                      "' with the key '" + options_.ssl_key_file +
                                      "' (both must be PEM files, the key the certificate's)");
    }
  } else {
    http_ = make_listener<httplib::Server>(raise_backlog_);
  }
  install(dispatcher.routes());
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  if (!setup_error_.is_ok()) return setup_error_;
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) return unavailable("cannot listen on " + options_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port));
    }
    port_ = options_.port;
  }
  raise_backlog_(kListenBacklog);
  return Status::ok();
}

bool HttpServer::listen() { return http_->listen_after_bind(); }

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::install(std::vector<Route> routes) {
  const int n_threads = options_.n_threads > 0 ? options_.n_threads : 8;
  // cpp-httplib takes ownership of the queue it is handed as a raw pointer.
  http_->new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
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
