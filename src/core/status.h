// Status and Result<T>: how untrusted input reports what is wrong.
//
// Goal: every error that comes from a file, a socket or an HTTP body says what field was bad,
// its value and the limit. Non-goal: error codes for programs to branch on beyond a coarse kind.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace strata {

enum class ErrorKind {
  kOk = 0,
  kInvalidArgument,  // bad input: a file, a message or a request that breaks a rule
  kOutOfRange,       // a size, count or offset past a limit
  kUnsupported,      // valid input that this build cannot handle (unknown arch, dtype...)
  kIo,               // the operating system said no
  kUnavailable,      // a peer died, timed out or refused
  kInternal,         // a bug surfaced as an error instead of a crash
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return kind_ == ErrorKind::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where it happened: "tensor 'x': offset past end".
  Status with_context(const std::string& where) const {
    if (is_ok()) return *this;
    return Status(kind_, where + ": " + message_);
  }

 private:
  ErrorKind kind_ = ErrorKind::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return Status(ErrorKind::kInvalidArgument, std::move(m));
}
inline Status out_of_range(std::string m) { return Status(ErrorKind::kOutOfRange, std::move(m)); }
inline Status unsupported(std::string m) { return Status(ErrorKind::kUnsupported, std::move(m)); }
inline Status io_error(std::string m) { return Status(ErrorKind::kIo, std::move(m)); }
inline Status unavailable(std::string m) { return Status(ErrorKind::kUnavailable, std::move(m)); }
inline Status internal_error(std::string m) { return Status(ErrorKind::kInternal, std::move(m)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    if (status_.is_ok()) status_ = internal_error("Result built from an ok Status without a value");
  }

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }

  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }
  T& operator*() { return checked(); }
  const T& operator*() const { return const_cast<Result*>(this)->checked(); }

 private:
  T& checked() {
    if (!value_) {
      std::fprintf(stderr, "strata: Result::value() on error: %s\n", status_.message().c_str());
      std::abort();
    }
    return *value_;
  }
  std::optional<T> value_;
  Status status_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define STRATA_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::strata::Status strata_status_ = (expr);           \
    if (!strata_status_.is_ok()) return strata_status_; \
  } while (0)

// `STRATA_ASSIGN_OR_RETURN(auto x, f());` unwraps a Result or returns its Status.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr)                   \
  auto STRATA_CONCAT(strata_result_, __LINE__) = (expr);     \
  if (!STRATA_CONCAT(strata_result_, __LINE__).is_ok())      \
    return STRATA_CONCAT(strata_result_, __LINE__).status(); \
  lhs = std::move(STRATA_CONCAT(strata_result_, __LINE__)).value()
