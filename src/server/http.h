// The HTTP layer of the server: the listening socket (plain or TLS), a thread per connection up
// to a cap (http_connections.h), time and size limits on reading a request (http_stream.h),
// the API-key check, the path prefix and error pages, over cpp-httplib's request parser and
// router. What is served comes from a Dispatcher's routes.
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
class Connections;
class TlsContext;
}  // namespace strata::server

namespace strata::server {

// A request body is a prompt: 8 MiB is far more text than any context we serve holds, and
// bounds what one connection can make us buffer.
inline constexpr size_t kMaxBodyBytes = 8u << 20;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port)
  // Accepted keys (Authorization: Bearer KEY, or X-Api-Key: KEY); empty: no key needed.
  std::vector<std::string> api_keys;
  size_t max_body_bytes = kMaxBodyBytes;
  // HTTPS when both are set (PEM files).
  std::string ssl_key_file;
  std::string ssl_cert_file;
  int timeout_seconds = 3600;  // each wait to read or write a connection's bytes
  // Connections open at once, each with its thread; past it: 503 with Retry-After. The limit
  // bounds threads, sockets and buffered request bodies (each below 2 x max_body_bytes).
  int max_connections = 1024;
  // A whole request (line, headers, body) must arrive within this time after its first byte,
  // or it is answered 408: a client sending a byte every few seconds holds its thread no longer.
  int request_timeout_seconds = 60;
  // An open connection may wait this long for its next request (its first too).
  int keep_alive_timeout_seconds = 5;
  int keep_alive_max_requests = 100;  // then the connection closes (the client reconnects)
  std::string api_prefix;             // served under this path ("/api"), without a trailing slash
  std::string static_path;            // files served from this folder at /
  bool reuse_port = false;
};

class HttpServer {
 public:
  // The dispatcher and the log outlive the server; log may be null.
  HttpServer(HttpOptions options, Dispatcher& dispatcher, Log* log);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Status bind();
  int port() const { return port_; }
  // Serves until stop(); returns false when listening failed. Returns once every connection
  // has ended (those answering a request finish their answer first).
  bool listen();
  void stop();

 private:
  class Listener;
  void install(std::vector<Route> routes);

  HttpOptions options_;
  Log* log_;
  std::unique_ptr<TlsContext> tls_;
  std::unique_ptr<Listener> http_;
  std::unique_ptr<Connections> connections_;
  Status setup_error_;
  int port_ = 0;
};

}  // namespace strata::server
