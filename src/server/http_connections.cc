#include "server/http_connections.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace strata::server {
namespace {

using Clock = std::chrono::steady_clock;

// A refused socket is read and its bytes dropped for this long after the 503, so that the
// client's request, arriving after the close, does not turn our close into a reset that
// destroys the 503 before the client reads it.
constexpr std::chrono::milliseconds kLinger{1000};
// Refused sockets lingering at once; past it they close at once. Bounds the refusing thread's
// sockets while a flood lasts.
constexpr size_t kMaxLingering = 256;
// A thread without a connection ends after this long: long enough to serve the next request of
// clients that connect for each one, short enough to give back what a burst took.
constexpr std::chrono::seconds kIdleThread{30};

}  // namespace

Connections::Connections(int max_connections, std::string refusal,
                         std::function<void(int fd)> serve)
    : max_connections_(max_connections), refusal_(std::move(refusal)), serve_(std::move(serve)) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) == 0) {
    refuser_ = std::thread([this] { refuse_loop(); });
  }
}

Connections::~Connections() {
  shutdown();
  refusals_.lock()->stop = true;
  if (wake_[1] >= 0 && ::write(wake_[1], "x", 1) < 0) {
  }
  if (refuser_.joinable()) refuser_.join();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void Connections::admit(int fd) {
  join_finished();
  {
    auto open = open_.lock();
    const size_t n_open = open->waiting.size() + open->serving.size();
    if (!open->stopping && n_open < static_cast<size_t>(max_connections_)) {
      open->waiting.push_back(fd);
      if (static_cast<size_t>(open->n_idle) >= open->waiting.size()) {
        open_.notify_all();
        return;
      }
      const uint64_t id = open->next_id++;
      try {
        // Started under the lock: the thread's last step takes the lock and moves its own
        // handle out of the map, so the handle must be in place first.
        open->threads[id] = std::thread([this, id] { work(id); });
        return;
      } catch (const std::system_error&) {
        open->threads.erase(id);  // no thread to be had: refused as over the cap
        open->waiting.pop_back();
      }
    }
  }
  refuse(fd);
}

void Connections::work(uint64_t id) {
  for (;;) {
    int fd = -1;
    {
      auto open = open_.lock();
      ++open->n_idle;
      open.wait_for(kIdleThread, [](const Open& o) { return !o.waiting.empty() || o.stopping; });
      --open->n_idle;
      if (open->waiting.empty() || open->stopping) {
        auto it = open->threads.find(id);
        open->finished.push_back(std::move(it->second));
        open->threads.erase(it);
        open_.notify_all();
        return;
      }
      fd = open->waiting.front();
      open->waiting.pop_front();
      open->serving.insert(fd);
    }
    serve_(fd);
    open_.lock()->serving.erase(fd);
    // Out of the set first: shutdown() never touches a descriptor number after its close.
    close(fd);
  }
}

void Connections::join_finished() {
  std::vector<std::thread> done;
  done.swap(open_.lock()->finished);
  for (std::thread& t : done) t.join();
}

void Connections::shutdown() {
  {
    auto open = open_.lock();
    open->stopping = true;
    for (int fd : open->serving) ::shutdown(fd, SHUT_RD);
    for (int fd : open->waiting) close(fd);
    open->waiting.clear();
    open_.notify_all();
    open.wait([](const Open& o) { return o.threads.empty(); });
  }
  join_finished();
}

bool Connections::stopping() const { return open_.lock()->stopping; }

void Connections::refuse(int fd) {
  if (wake_[1] < 0) {
    close(fd);
    return;
  }
  refusals_.lock()->incoming.push_back(fd);
  if (::write(wake_[1], "x", 1) < 0) {
    // The pipe is full: the refusing thread has wake-ups pending and will see the socket.
  }
}

void Connections::refuse_loop() {
  struct Lingering {
    int fd;
    Clock::time_point until;
  };
  std::vector<Lingering> lingering;
  std::vector<pollfd> polls;
  char drop[4096];
  for (;;) {
    polls.assign(1, pollfd{wake_[0], POLLIN, 0});
    Clock::time_point next = Clock::now() + std::chrono::hours(1);
    for (const Lingering& l : lingering) {
      polls.push_back(pollfd{l.fd, POLLIN, 0});
      next = std::min(next, l.until);
    }
    const auto wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    if (poll(polls.data(), polls.size(), static_cast<int>(std::max<int64_t>(wait_ms, 0) + 1)) < 0 &&
        errno != EINTR) {
      break;
    }
    const Clock::time_point now = Clock::now();
    // Drop what the lingering sockets sent; close those at their end or past their time.
    std::vector<Lingering> kept;
    for (size_t i = 0; i < lingering.size(); ++i) {
      bool done = now >= lingering[i].until;
      if (!done && (polls[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t n = recv(lingering[i].fd, drop, sizeof(drop), MSG_DONTWAIT);
        done = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      }
      if (done) {
        close(lingering[i].fd);
      } else {
        kept.push_back(lingering[i]);
      }
    }
    lingering.swap(kept);
    if (polls[0].revents & POLLIN) {
      while (::read(wake_[0], drop, sizeof(drop)) > 0) {
      }
    }
    std::vector<int> incoming;
    bool stop = false;
    {
      auto r = refusals_.lock();
      incoming.swap(r->incoming);
      stop = r->stop;
    }
    for (int fd : incoming) {
      // A few hundred bytes into a new socket's empty send buffer: never blocks.
      if (refusal_.empty() || stop || lingering.size() >= kMaxLingering ||
          send(fd, refusal_.data(), refusal_.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        close(fd);
        continue;
      }
      ::shutdown(fd, SHUT_WR);
      lingering.push_back(Lingering{fd, now + kLinger});
    }
    if (stop) break;
  }
  for (const Lingering& l : lingering) close(l.fd);
  auto refusals = refusals_.lock();
  for (int fd : refusals->incoming) close(fd);
}

}  // namespace strata::server
