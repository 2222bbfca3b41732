#include "server/http_stream.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "server/api.h"

namespace strata::server {
namespace {

// Bytes asked of the socket at a time: cpp-httplib reads the head a byte at a time, so reads
// are served from this buffer.
constexpr size_t kReceiveBytes = 16u << 10;

// A refusal is a few hundred bytes into an empty send buffer: it goes at once or not at all.
constexpr std::chrono::milliseconds kRefusalWrite{1000};

const char* reason_phrase(int status) {
  switch (status) {
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

}  // namespace

std::string raw_error_response(int status, const std::string& message, int retry_after_s) {
  const std::string body = error_body(ApiError{status, message});
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  out += "Content-Type: application/json\r\nConnection: close\r\n";
  if (retry_after_s > 0) out += "Retry-After: " + std::to_string(retry_after_s) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return out;
}

Result<std::unique_ptr<TlsContext>> TlsContext::create(const std::string& cert_file,
                                                       const std::string& key_file) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return internal_error("cannot create a TLS context");
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Writes may return after part of the buffer, and be retried from where they stopped.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return invalid_argument("cannot use the certificate '" + cert_file + "' with the key '" +
                            key_file + "' (both must be PEM files, the key the certificate's)");
  }
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

ConnectionStream::ConnectionStream(int fd, const TlsContext* tls, const StreamLimits& limits)
    : fd_(fd), limits_(limits) {
  // Every wait is a poll with its own bound; the socket itself never blocks.
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  if (tls != nullptr) {
    ssl_ = SSL_new(tls->get());
    if (ssl_ != nullptr) SSL_set_fd(ssl_, fd_);
  }
}

ConnectionStream::~ConnectionStream() {
  if (ssl_ != nullptr) {
    if (!refused_) SSL_shutdown(ssl_);  // one try: the close_notify, never a wait for the peer's
    SSL_free(ssl_);
  }
}

ConnectionStream::Wait ConnectionStream::wait(short events, HttpClock::time_point until) const {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - HttpClock::now());
    if (left.count() < 0) return Wait::kTimeout;
    pollfd p{};
    p.fd = fd_;
    p.events = events;
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Wait::kFailed;
    if (rc == 0) continue;  // the loop's check of the time decides
    if (p.revents & (events | POLLHUP | POLLERR)) return Wait::kReady;
    return Wait::kFailed;
  }
}

bool ConnectionStream::handshake(HttpClock::time_point deadline) {
  if (ssl_ == nullptr) return true;
  for (;;) {
    const int rc = SSL_accept(ssl_);
    if (rc == 1) return true;
    const int err = SSL_get_error(ssl_, rc);
    const short events = err == SSL_ERROR_WANT_READ    ? POLLIN
                         : err == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                       : 0;
    ERR_clear_error();
    if (events == 0 || wait(events, deadline) != Wait::kReady) return false;
  }
}

bool ConnectionStream::wait_request(std::chrono::milliseconds idle) {
  if (buf_off_ < buf_.size()) return true;
  if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return true;
  return wait(POLLIN, HttpClock::now() + idle) == Wait::kReady;
}

void ConnectionStream::begin_request(HttpClock::time_point deadline) {
  deadline_ = deadline;
  head_bytes_ = 0;
  head_end_match_ = 0;
  in_body_ = false;
  body_bytes_ = 0;
}

bool ConnectionStream::is_readable() const {
  if (refused_) return false;
  if (buf_off_ < buf_.size()) return true;
  if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return true;
  return wait(POLLIN, std::min(deadline_, HttpClock::now() + limits_.read_timeout)) == Wait::kReady;
}

bool ConnectionStream::is_writable() const {
  if (refused_) return false;
  if (wait(POLLOUT, HttpClock::now() + limits_.write_timeout) != Wait::kReady) return false;
  // A peer that has closed its end reads as end of file: a stream waiting for its next event
  // stops now rather than at its next write (as cpp-httplib's own stream does).
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return true;
  char c;
  return recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

ssize_t ConnectionStream::fill(HttpClock::time_point until) {
  buf_.resize(kReceiveBytes);
  buf_off_ = 0;
  for (;;) {
    ssize_t n;
    short events = POLLIN;
    if (ssl_ != nullptr) {
      const int rc = SSL_read(ssl_, buf_.data(), static_cast<int>(buf_.size()));
      n = rc;
      if (rc <= 0) {
        const int err = SSL_get_error(ssl_, rc);
        ERR_clear_error();
        if (err == SSL_ERROR_ZERO_RETURN) {
          n = 0;
        } else if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
          events = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
          n = -2;
        } else {
          n = -1;
        }
      }
    } else {
      n = recv(fd_, buf_.data(), buf_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) n = -2;
    }
    if (n >= 0 || n == -1) {
      buf_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      return n;
    }
    if (wait(events, until) != Wait::kReady) {
      buf_.clear();
      return -2;
    }
  }
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (refused_) return -1;
  if (buf_off_ >= buf_.size()) {
    const auto now = HttpClock::now();
    const bool by_deadline = deadline_ <= now + limits_.read_timeout;
    const ssize_t n = fill(std::min(deadline_, now + limits_.read_timeout));
    if (n == -2) {
      refuse(408, by_deadline
                      ? "the request did not arrive within " +
                            std::to_string(limits_.request_timeout.count()) +
                            " s (--request-timeout)"
                      : "no bytes of the request came for " +
                            std::to_string(limits_.read_timeout.count() / 1000) + " s (--timeout)");
      return -1;
    }
    if (n <= 0) return n;
  }
  const size_t n = std::min(size, buf_.size() - buf_off_);
  if (!account(buf_.data() + buf_off_, n)) return -1;
  std::copy_n(buf_.data() + buf_off_, n, ptr);
  buf_off_ += n;
  return static_cast<ssize_t>(n);
}

bool ConnectionStream::account(const char* ptr, size_t n) {
  static constexpr char kEnd[] = "\r\n\r\n";
  size_t i = 0;
  for (; !in_body_ && i < n; ++i) {
    head_end_match_ = ptr[i] == kEnd[head_end_match_] ? head_end_match_ + 1 : ptr[i] == '\r';
    if (head_end_match_ == 4) in_body_ = true;
    if (++head_bytes_ > kMaxHeadBytes) {
      refuse(431, "the request line and headers are larger than the limit of " +
                      std::to_string(kMaxHeadBytes) + " bytes");
      return false;
    }
  }
  body_bytes_ += n - i;
  if (body_bytes_ > limits_.max_request_bytes) {
    refuse(413, "the request body (with its framing) is larger than the limit of " +
                    std::to_string(limits_.max_request_bytes) + " bytes");
    return false;
  }
  return true;
}

ssize_t ConnectionStream::send_some(const char* ptr, size_t size) {
  if (ssl_ != nullptr) {
    const int rc = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (rc > 0) return rc;
    const int err = SSL_get_error(ssl_, rc);
    ERR_clear_error();
    return err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ ? 0 : -1;
  }
  const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  return n;
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (refused_) return -1;
  if (!is_writable()) return -1;
  return send_some(ptr, size);
}

void ConnectionStream::refuse(int status, const std::string& message) {
  if (refused_) return;
  refused_ = true;
  const std::string reply = raw_error_response(status, message, 0);
  const auto until = HttpClock::now() + kRefusalWrite;
  for (size_t off = 0; off < reply.size();) {
    if (wait(POLLOUT, until) != Wait::kReady) return;
    const ssize_t n = send_some(reply.data() + off, reply.size() - off);
    if (n < 0) return;
    off += static_cast<size_t>(n);
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  address_of(fd_, true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  address_of(fd_, false, ip, port);
}

}  // namespace strata::server
