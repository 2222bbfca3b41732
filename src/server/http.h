// The HTTP layer of the server: the listening socket (plain or TLS), cpp-httplib's thread
// pool, body limits, the API-key check, the path prefix and error pages. What is served comes
// from a Dispatcher's routes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/dispatcher.h"
#include "server/log.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace strata::server {

// A request body is a prompt: 8 MiB is far more text than any context we serve holds, and
// bounds what one connection can make us buffer.
inline constexpr size_t kMaxBodyBytes = 8u << 20;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port)
  // Accepted keys (Authorization: Bearer KEY, or X-Api-Key: KEY); empty: no key needed.
  std::vector<std::string> api_keys;
  int n_threads = 0;  // 0: the caller chooses (the server: max(8, 2 x slots + 2))
  size_t max_body_bytes = kMaxBodyBytes;
  // HTTPS when both are set (PEM files).
  std::string ssl_key_file;
  std::string ssl_cert_file;
  int timeout_seconds = 3600;  // read and write timeout of a connection
  std::string api_prefix;      // served under this path ("/api"), without a trailing slash
  std::string static_path;     // files served from this folder at /
  bool reuse_port = false;
};

class HttpServer {
 public:
  // The dispatcher outlives the server.
  // The dispatcher and the log outlive the server; log may be null.
  HttpServer(HttpOptions options, Dispatcher& dispatcher, Log* log);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Status bind();
  int port() const { return port_; }
  // Serves until stop(); returns false when listening failed.
  bool listen();
  void stop();

 private:
  void install(std::vector<Route> routes);

  HttpOptions options_;
  Log* log_;
  std::unique_ptr<httplib::Server> http_;
  std::function<void(int)> raise_backlog_;
  Status setup_error_;
  int port_ = 0;
};

}  // namespace strata::server
