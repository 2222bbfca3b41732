// One HTTP connection's byte stream, plain TCP or TLS, as cpp-httplib's Stream: reads bounded by
// a deadline for the whole request, not only by a timeout per receive.
//
// Goal: a client cannot hold a connection (and its thread) by sending its request slowly. Every
// wait for the socket is bounded by the read or write timeout, and every read of a request by
// the request's deadline too: one byte every few seconds ends when the deadline passes. A
// request that fails this way (too slow, head or body too large) is answered by the stream
// itself with the status that says so (408, 431, 413) and a JSON error body, and the connection
// closes. Non-goal: bounding how long an answer takes to write (a long generation is not a slow
// client); a reader that stops reading is bounded by the write timeout of each wait.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace strata::server {

using HttpClock = std::chrono::steady_clock;

// The request head (request line and headers) may take this many bytes: a hundred headers of
// the usual sizes. cpp-httplib bounds one line (8 KiB) but not their number, so without this a
// client could grow a request's header map without end.
inline constexpr size_t kMaxHeadBytes = 64u << 10;

struct StreamLimits {
  std::chrono::milliseconds read_timeout{3600 * 1000};   // one wait for bytes
  std::chrono::milliseconds write_timeout{3600 * 1000};  // one wait for room to write
  // A request's bytes after its head: the body limit twice over, for chunked framing and for
  // skipping an oversized body so that it gets its 413.
  size_t max_request_bytes = 16u << 20;
  std::chrono::seconds request_timeout{60};  // for the 408's message
};

// A whole HTTP/1.1 error response that closes the connection, with a JSON error body (as every
// other error of the server) and a Retry-After header when retry_after_s > 0.
std::string raw_error_response(int status, const std::string& message, int retry_after_s);

// The server's TLS context (certificate and key, PEM files).
class TlsContext {
 public:
  static Result<std::unique_ptr<TlsContext>> create(const std::string& cert_file,
                                                    const std::string& key_file);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

class ConnectionStream : public httplib::Stream {
 public:
  // Borrows `fd` (the caller closes it); with `tls`, speaks TLS over it after handshake().
  ConnectionStream(int fd, const TlsContext* tls, const StreamLimits& limits);
  ~ConnectionStream() override;
  ConnectionStream(const ConnectionStream&) = delete;
  ConnectionStream& operator=(const ConnectionStream&) = delete;

  // TLS: the server's side of the handshake, done by `deadline`. Plain: true.
  bool handshake(HttpClock::time_point deadline);
  // Waits up to `idle` for the first byte of a request; false when none came or the peer left.
  bool wait_request(std::chrono::milliseconds idle);
  // Starts a request: its reads fail after `deadline`.
  void begin_request(HttpClock::time_point deadline);
  // The stream answered the request itself (408, 413, 431): the connection must close.
  bool refused() const { return refused_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

 private:
  enum class Wait { kReady, kTimeout, kFailed };
  // Waits for the socket (POLLIN or POLLOUT) until `until`.
  Wait wait(short events, HttpClock::time_point until) const;
  // Receives into buf_ (empty before); > 0 bytes, 0 at the peer's close, < 0 on error/timeout.
  ssize_t fill(HttpClock::time_point until);
  ssize_t send_some(const char* ptr, size_t size);
  // Answers the request with `status` and `message`, once; later writes are dropped.
  void refuse(int status, const std::string& message);
  // Counts bytes handed to the HTTP parser against the head and body limits.
  bool account(const char* ptr, size_t n);

  int fd_;
  SSL* ssl_ = nullptr;
  StreamLimits limits_;
  HttpClock::time_point deadline_ = HttpClock::time_point::max();
  std::string buf_;  // received, not yet read
  size_t buf_off_ = 0;
  // Where the request is: bytes of its head, "\r\n\r\n" matched so far, bytes of its body.
  size_t head_bytes_ = 0;
  int head_end_match_ = 0;
  bool in_body_ = false;
  size_t body_bytes_ = 0;
  bool refused_ = false;
};

}  // namespace strata::server
