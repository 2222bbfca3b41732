#include "net/proxy.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <span>
#include <thread>

#include "core/mutex_guarded.h"
#include "rpc/transport_socket.h"

namespace strata::net {
namespace {

Nanos now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

using rpc::Fd;
using rpc::HostPort;
using rpc::make_pipe;
using rpc::sockaddr_text;

std::string errno_text(const std::string& what) { return rpc::errno_text(what.c_str()); }
// `address` split into host and port; `what` ("target", "listen address") begins its errors.
Result<HostPort> split_host_port(const std::string& address, const char* what) {
  Result<HostPort> hp = rpc::split_host_port(address, address);
  if (!hp) return Status(hp.status().kind(), std::string(what) + " " + hp.status().message());
  return hp;
}

// Both ends of a relay send small messages that someone waits for: never hold them back.
void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// One direction of a relayed connection.
struct Direction {
  int src;
  int dst;
  LinkQueue queue;
  bool reading = true;   // the source has not ended
  bool blocked = false;  // the destination's send buffer is full: wait until it is writable
  bool shut = false;     // the end has been passed on, or the destination failed
  uint64_t bytes = 0;    // delivered
};

// What ended a relay, for the log.
struct RelayEnd {
  Status status;  // the first failure of a side; ok when both ended cleanly
  uint64_t up = 0, down = 0;
};

// Relays between a (the accepted client) and b (the target) until both directions have ended
// or `wake` becomes readable. Both sockets are non-blocking.
//
// A side that fails (a reset, an error) is taken as a cut wire: nothing more can be delivered
// to it, and what it sent before is still delivered to the other side, followed by the end.
RelayEnd relay(int a, int b, int wake, const ProxyOptions& o) {
  Direction dirs[2] = {{a, b, LinkQueue(o.link, o.max_held_bytes)},
                       {b, a, LinkQueue(o.link, o.max_held_bytes)}};
  const char* names[2] = {"client", "target"};
  Status first_error;
  // Socket i failed: direction i (from it) ends here; direction 1 - i (to it) is dropped.
  auto socket_failed = [&](int i, Nanos now, Status s) {
    if (dirs[i].reading) {
      dirs[i].queue.close(now);
      dirs[i].reading = false;
    }
    dirs[1 - i].reading = false;
    dirs[1 - i].shut = true;
    if (first_error.is_ok()) first_error = std::move(s);
  };
  for (;;) {
    // Deliver what is due, then the ends that are due.
    Nanos now = now_ns();
    for (int i = 0; i < 2; ++i) {
      Direction& d = dirs[i];
      d.blocked = false;
      while (!d.shut) {
        const std::span<const uint8_t> out = d.queue.due(now);
        if (out.empty()) break;
        const ssize_t r = ::send(d.dst, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            d.blocked = true;
            break;
          }
          socket_failed(1 - i, now,
                        unavailable(errno_text(std::string("send to ") + names[1 - i])));
          break;
        }
        d.queue.pop(static_cast<size_t>(r));
        d.bytes += static_cast<uint64_t>(r);
      }
      if (!d.shut && d.queue.finished(now)) {
        ::shutdown(d.dst, SHUT_WR);
        d.shut = true;
      }
    }
    if (dirs[0].shut && dirs[1].shut) return RelayEnd{first_error, dirs[0].bytes, dirs[1].bytes};

    // Socket i is the source of direction i and the destination of direction 1 - i. A socket
    // with nothing to wait for is left out of the poll: a hung-up socket would otherwise wake
    // it at once, again and again, while its direction is full.
    short events[2] = {0, 0};
    std::optional<Nanos> deadline;
    auto earliest = [&](std::optional<Nanos> t) {
      if (t && (!deadline || *t < *deadline)) deadline = t;
    };
    for (int i = 0; i < 2; ++i) {
      const Direction& d = dirs[i];
      if (d.reading && d.queue.room() > 0) events[i] |= POLLIN;
      if (d.shut) continue;
      if (d.blocked) {
        events[1 - i] |= POLLOUT;
      } else {
        earliest(d.queue.next_departure());
      }
      earliest(d.queue.end_departure());
    }
    pollfd p[3] = {{events[0] != 0 ? a : -1, events[0], 0},
                   {events[1] != 0 ? b : -1, events[1], 0},
                   {wake, POLLIN, 0}};
    timespec ts{};
    if (deadline) {
      const Nanos wait = std::max<Nanos>(0, *deadline - now_ns());
      ts.tv_sec = wait / 1000000000;
      ts.tv_nsec = wait % 1000000000;
    }
    const int r = ::ppoll(p, 3, deadline ? &ts : nullptr, nullptr);
    if (r < 0 && errno != EINTR) {
      return RelayEnd{io_error(errno_text("poll")), dirs[0].bytes, dirs[1].bytes};
    }
    if (r <= 0) continue;
    if (p[2].revents != 0) {
      return RelayEnd{unavailable("proxy stopping"), dirs[0].bytes, dirs[1].bytes};
    }

    // Read what arrived. A full direction is not read (see events), so the sender waits.
    now = now_ns();
    for (int i = 0; i < 2; ++i) {
      Direction& d = dirs[i];
      if ((events[i] & POLLIN) == 0 || p[i].revents == 0 || !d.reading) continue;
      const std::span<uint8_t> space = d.queue.write_space();
      const ssize_t n = ::recv(d.src, space.data(), space.size(), MSG_DONTWAIT);
      if (n > 0) {
        d.queue.commit(now, static_cast<size_t>(n));
      } else if (n == 0) {
        d.queue.close(now);
        d.reading = false;
      } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        socket_failed(i, now, unavailable(errno_text(std::string("recv from ") + names[i])));
      }
    }
  }
}

}  // namespace

struct Proxy::Impl {
  ProxyOptions options;
  Fd listener;
  std::string address;
  bool beyond_loopback = false;
  Fd wake_read, wake_write;  // readable once stop() wrote to it: wakes every thread
  std::thread acceptor;
  std::atomic<int> open{0};

  struct Session {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<Session> sessions;  // the acceptor's until it has exited, then stop()'s

  struct Stop {
    bool stopping = false;  // stop() has begun
    bool stopped = false;   // and ended: every thread joined
  };
  MutexGuarded<Stop> stop_state;  // its condition variable wakes wait() and a second stop()

  void log(const std::string& line) const {
    if (options.log) std::fprintf(stderr, "strata proxy: %s\n", line.c_str());
  }

  void serve(Fd client, const std::string& peer) {
    // Departures are timed to the microsecond: keep the kernel from rounding our sleeps up by
    // its default 50 us slack.
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    Result<rpc::ConnectedSocket> target = rpc::tcp_connect_socket(
        options.target, options.target, options.connect_timeout_ms, "", wake_read.get());
    if (!target) {
      log(peer + ": " + target.status().message() + "; closing the client's connection");
      return;
    }
    set_nodelay(target->fd.get());
    set_nodelay(client.get());
    log(peer + " -> " + options.target + ": open");
    const RelayEnd e = relay(client.get(), target->fd.get(), wake_read.get(), options);
    log(peer + " -> " + options.target + ": closed (" +
        (e.status.is_ok() ? std::string("both sides ended") : e.status.message()) + "); " +
        std::to_string(e.up) + " bytes to the target, " + std::to_string(e.down) + " bytes back");
  }

  void reap() {
    for (auto it = sessions.begin(); it != sessions.end();) {
      if (it->done.load()) {
        it->thread.join();
        it = sessions.erase(it);
      } else {
        ++it;
      }
    }
  }

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listener.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
      const int r = ::poll(p, 2, -1);
      if (r < 0 && errno != EINTR) {
        log(errno_text("poll"));
        return;
      }
      if (p[1].revents != 0) return;
      if (r <= 0 || p[0].revents == 0) continue;
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      Fd c(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                     SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (c.get() < 0) {
        // Out of descriptors: the pending connection stays readable, so wait a little (or for
        // stop) rather than spin on it.
        if (errno == EMFILE || errno == ENFILE) {
          log(errno_text("accept"));
          pollfd w{wake_read.get(), POLLIN, 0};
          ::poll(&w, 1, 100);
        }
        continue;  // else the client went away first
      }
      const std::string peer = sockaddr_text(reinterpret_cast<sockaddr*>(&ss));
      reap();
      if (sessions.size() >= static_cast<size_t>(kMaxProxyConnections)) {
        log(peer + ": refused, " + std::to_string(kMaxProxyConnections) +
            " connections open already");
        continue;
      }
      Session& s = sessions.emplace_back();
      open.fetch_add(1);
      s.thread = std::thread([this, &s, client = std::move(c), peer]() mutable {
        serve(std::move(client), peer);
        open.fetch_sub(1);
        s.done.store(true);
      });
    }
  }
};

Proxy::Proxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Proxy::~Proxy() { stop(); }

Result<std::unique_ptr<Proxy>> Proxy::start(const ProxyOptions& options) {
  STRATA_RETURN_IF_ERROR(split_host_port(options.target, "target").status());
  STRATA_RETURN_IF_ERROR(split_host_port(options.listen, "listen address").status());
  if (options.max_held_bytes == 0 || options.max_held_bytes > kMaxHeldBytesLimit) {
    return invalid_argument("max held bytes " + std::to_string(options.max_held_bytes) +
                            ": must be from 1 to " + std::to_string(kMaxHeldBytesLimit));
  }
  if (options.link.delay_ns < 0) {
    return invalid_argument("delay " + std::to_string(options.link.delay_ns) +
                            " ns: must not be negative");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  STRATA_ASSIGN_OR_RETURN(rpc::ListeningSocket l,
                          rpc::tcp_listen_socket(options.listen, options.listen));
  impl->listener = std::move(l.fd);
  impl->address = l.address;
  impl->beyond_loopback = l.beyond_loopback;
  STRATA_ASSIGN_OR_RETURN(auto wake, make_pipe());
  impl->wake_read = std::move(wake.first);
  impl->wake_write = std::move(wake.second);
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::make_unique<Proxy>(std::move(impl));
}

std::string Proxy::address() const { return impl_->address; }

bool Proxy::beyond_loopback() const { return impl_->beyond_loopback; }

int Proxy::open_connections() const { return impl_->open.load(); }

void Proxy::stop() {
  {
    auto st = impl_->stop_state.lock();
    if (st->stopping) {
      st.wait([](const Impl::Stop& s) { return s.stopped; });
      return;
    }
    st->stopping = true;
  }
  const uint8_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(impl_->wake_write.get(), &one, 1);
  impl_->acceptor.join();
  for (Impl::Session& s : impl_->sessions) s.thread.join();
  impl_->sessions.clear();
  impl_->stop_state.lock()->stopped = true;
  impl_->stop_state.notify_all();
}

void Proxy::wait() {
  impl_->stop_state.lock().wait([](const Impl::Stop& s) { return s.stopped; });
}

}  // namespace strata::net
