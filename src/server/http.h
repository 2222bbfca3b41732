// The HTTP layer of the server: the listening socket (plain or TLS), cpp-httplib's thread
// pool, body limits, the API-key check, the path prefix and error pages. What is served comes
// from a Dispatcher's routes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/dispatcher.h"

namespace strata::server {

// A request body is a prompt: 8 MiB is far more text than any context we serve holds, and
// bounds what one connection can make us buffer.
inline constexpr size_t kMaxBodyBytes = 8u << 20;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port)
  // Accepted keys (Authorization: Bearer KEY, or X-Api-Key: KEY); empty: no key needed.
  std::vector<std::string> api_keys;
  int n_threads = 8;
  size_t max_body_bytes = kMaxBodyBytes;
};

class HttpServer {
 public:
  // The dispatcher outlives the server.
  HttpServer(HttpOptions options, Dispatcher& dispatcher);
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
  class Listener;
  std::unique_ptr<Listener> http_;
  int port_ = 0;
};

}  // namespace strata::server
