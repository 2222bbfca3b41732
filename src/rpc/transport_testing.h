// The transports that tests and benchmarks run over, by name. Header-only, for tests and
// benchmarks (not part of the library).
//
//   tcp      "127.0.0.1:0"
//   unix     "unix:<temp dir>/strata-<pid>-<n>"  (SOCK_SEQPACKET)
//   ucx-tcp  "ucx:127.0.0.1:0" with UCX_TLS=tcp
//   ucx-sm   "ucx:127.0.0.1:0" with UCX_TLS=sm,tcp and UCX_MM_ERROR_HANDLING=y: the messages go
//            through shared memory (UCX's connection manager still needs TCP, and leaves
//            shared memory out of connections that detect peer failure unless told otherwise)
//
// A UCX kind is set up through the environment, which UCX reads when a transport is created:
// use_env() before creating one. Without UCX in the build, transport_listen on a ucx address
// fails with kUnsupported: tests skip then, with that message.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace strata::rpc {

struct TestTransport {
  const char* name;
  const char* ucx_tls;  // nullptr: not UCX

  bool ucx() const { return ucx_tls != nullptr; }

  // A fresh listening address (port 0: any free port).
  std::string listen_address() const {
    static std::atomic<int> n{0};
    if (std::string(name) == "unix") {
      return "unix:" + (std::filesystem::temp_directory_path() /
                        ("strata-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
                           .string();
    }
    return ucx() ? "ucx:127.0.0.1:0" : "127.0.0.1:0";
  }

  // Sets the UCX environment of this kind (and clears that of the others).
  void use_env() const {
    if (!ucx()) return;
    ::setenv("UCX_TLS", ucx_tls, 1);
    if (std::string(ucx_tls).find("sm") != std::string::npos) {
      ::setenv("UCX_MM_ERROR_HANDLING", "y", 1);
    } else {
      ::unsetenv("UCX_MM_ERROR_HANDLING");
    }
  }
};

inline void PrintTo(const TestTransport& t, std::ostream* os) { *os << t.name; }

inline const std::vector<TestTransport>& test_transports() {
  static const std::vector<TestTransport> kinds = {
      {"tcp", nullptr},
      {"unix", nullptr},
      {"ucx-tcp", "tcp"},
      {"ucx-sm", "sm,tcp"},
  };
  return kinds;
}

// For INSTANTIATE_TEST_SUITE_P names: "ucx-tcp" -> "ucx_tcp".
inline std::string test_transport_name(const TestTransport& t) {
  std::string s = t.name;
  for (char& c : s) c = c == '-' ? '_' : c;
  return s;
}
// The same as INSTANTIATE_TEST_SUITE_P's name generator: TestTransportName().
struct TestTransportName {
  template <typename ParamInfo>
  std::string operator()(const ParamInfo& p) const {
    return test_transport_name(p.param);
  }
};

}  // namespace strata::rpc
