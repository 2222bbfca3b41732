// The HTTP server's open connections: each served on a thread of its own, up to a cap; past the
// cap a connection is answered 503 at once and closed.
//
// Why a thread per connection and not a fixed pool: a pool of N threads is held by N clients
// that send half a request, and then nothing else is served (not even /health). A thread per
// connection costs a stack (mostly untouched) and is freed when its client's time is up (see
// http_stream.h), so slow clients only take their own threads. The cap bounds threads, sockets
// and buffered request bodies; a connection past it costs one 503 written by one shared thread.
// A thread that has served its connection waits a while for the next one before it ends, so
// that clients that connect for each request do not cost a thread each.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex_guarded.h"

namespace strata::server {

class Connections {
 public:
  // `serve` handles one connection (its socket) and returns when it is done; the socket is
  // closed afterwards. Connections past `max_connections` get `refusal` (a whole HTTP
  // response; empty: nothing) and are closed.
  Connections(int max_connections, std::string refusal, std::function<void(int fd)> serve);
  ~Connections();  // shutdown()
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  // Takes ownership of an accepted socket. Never blocks on the client.
  void admit(int fd);
  // Ends the reading side of every open connection (a request being read or awaited fails;
  // answers being written go on) and waits for their threads.
  void shutdown();
  bool stopping() const;

 private:
  struct Open {
    std::deque<int> waiting;  // admitted sockets no thread has taken yet
    std::set<int> serving;    // sockets being served
    std::map<uint64_t, std::thread> threads;
    std::vector<std::thread> finished;  // to be joined
    uint64_t next_id = 0;
    int n_idle = 0;  // threads waiting for a socket
    bool stopping = false;
  };
  // A thread: serves sockets from `waiting` until none comes for a while.
  void work(uint64_t id);
  void join_finished();
  // Over the cap: hands the socket to the refusing thread.
  void refuse(int fd);
  void refuse_loop();

  const int max_connections_;
  const std::string refusal_;
  std::function<void(int)> serve_;
  MutexGuarded<Open> open_;

  struct Refusals {
    std::vector<int> incoming;
    bool stop = false;
  };
  MutexGuarded<Refusals> refusals_;
  int wake_[2] = {-1, -1};  // a pipe that wakes the refusing thread's poll
  std::thread refuser_;
};

}  // namespace strata::server
