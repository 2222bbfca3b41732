#include "server/peer.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <memory>

namespace strata::server {
namespace {

bool same_end(const sockaddr_storage& a, socklen_t len, const std::string& addr, int port) {
  int p = -1;
  if (a.ss_family == AF_INET) {
    p = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  } else if (a.ss_family == AF_INET6) {
    p = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  } else {
    return false;
  }
  if (p != port) return false;
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  return addr == host;
}

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};

}  // namespace

int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                      int remote_port) {
  std::unique_ptr<DIR, DirCloser> dir(opendir("/proc/self/fd"));
  if (!dir) return -1;
  while (const dirent* e = readdir(dir.get())) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        !same_end(local, local_len, local_addr, local_port)) {
      continue;
    }
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0 ||
        !same_end(remote, remote_len, remote_addr, remote_port)) {
      continue;
    }
    return static_cast<int>(fd);
  }
  return -1;
}

bool peer_closed(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  if (poll(&p, 1, 0) < 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    // 0: an orderly close. Data: the client's next request, pipelined; it is still there.
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace strata::server
