#include "server/router_proxy.h"

#include <httplib.h>

#include <deque>
#include <thread>

#include "core/mutex_guarded.h"
#include "server/peer.h"
#include "server/reply.h"

namespace strata::server {
namespace {

// How often a waiting handler looks whether its client has gone: a cancelled request keeps the
// child's slot at most this much longer.
constexpr auto kRelayPoll = std::chrono::milliseconds(100);
constexpr int kConnectTimeoutS = 10;

// One request to a child, run on its own thread so that the HTTP thread can answer with the
// status and headers as soon as they come and then relay the body as it comes.
class Exchange {
 public:
  struct Pipe {
    bool head = false;
    int status = 0;
    httplib::Headers headers;  // those worth passing on (content type, retry-after, cache)
    std::deque<std::string> chunks;
    bool ended = false;
    bool failed = false;
    std::string error;
    bool cancelled = false;
  };

  Exchange(const httplib::Request& req, const Upstream& up, std::shared_ptr<void> hold)
      : client_("127.0.0.1", up.port), hold_(std::move(hold)) {
    client_.set_connection_timeout(kConnectTimeoutS, 0);
    // Headers and body go in separate writes: without it, Nagle holds the body for an ACK.
    client_.set_tcp_nodelay(true);
    client_.set_read_timeout(up.timeout_s, 0);
    client_.set_write_timeout(up.timeout_s, 0);
    request_.method = req.method;
    request_.path = up.target;
    request_.body = req.body;
    for (const char* h : {"Content-Type", "Accept"}) {
      if (req.has_header(h)) request_.headers.emplace(h, req.get_header_value(h));
    }
    // The client's key was checked by the router; the child knows only its private one.
    if (!up.key.empty()) request_.headers.emplace("Authorization", "Bearer " + up.key);
    request_.response_handler = [this](const httplib::Response& r) {
      {
        auto p = pipe_.lock();
        if (p->cancelled) return false;
        p->head = true;
        p->status = r.status;
        for (const char* h : {"Content-Type", "Retry-After", "Cache-Control"}) {
          if (r.has_header(h)) p->headers.emplace(h, r.get_header_value(h));
        }
      }
      pipe_.notify_all();
      return true;
    };
    request_.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
      {
        auto p = pipe_.lock();
        if (p->cancelled) return false;
        p->chunks.emplace_back(data, n);
      }
      pipe_.notify_all();
      return true;
    };
    thread_ = std::thread([this] { run(); });
  }

  ~Exchange() {
    cancel();
    thread_.join();
  }

  // Ends the upstream request unless it has ended: its connection to the child is closed.
  void cancel() {
    {
      auto p = pipe_.lock();
      if (p->ended) return;
      p->cancelled = true;
    }
    client_.stop();
  }

  MutexGuarded<Pipe>& pipe() { return pipe_; }

 private:
  void run() {
    httplib::Result result = client_.send(request_);
    {
      auto p = pipe_.lock();
      p->ended = true;
      if (!result) {
        p->failed = true;
        p->error = httplib::to_string(result.error());
      }
    }
    pipe_.notify_all();
  }

  httplib::Client client_;
  httplib::Request request_;
  std::shared_ptr<void> hold_;
  MutexGuarded<Pipe> pipe_;
  std::thread thread_;
};

std::string take_chunks(std::deque<std::string>& chunks) {
  std::string out;
  for (std::string& c : chunks) out += c;
  chunks.clear();
  return out;
}

ApiError lost(const Upstream& up, const std::string& why) {
  return ApiError{502, "model '" + up.model + "' did not answer (" + why +
                           "); it is restarted on the next request if it stopped"};
}

}  // namespace

void proxy_request(const httplib::Request& req, httplib::Response& res, const Upstream& up,
                   std::shared_ptr<void> hold) {
  auto ex = std::make_shared<Exchange>(req, up, std::move(hold));
  const int client_fd =
      connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  // Until the head comes (or, for a whole answer, the end), watch the client.
  bool stream = false;
  for (;;) {
    {
      auto p = ex->pipe().lock();
      p.wait_for(kRelayPoll, [](const Exchange::Pipe& s) { return s.ended || s.head; });
      if (p->head && !p->ended) {
        auto ct = p->headers.find("Content-Type");
        stream = ct != p->headers.end() && ct->second.rfind("text/event-stream", 0) == 0;
      }
      if (p->ended || stream) break;
    }
    if (client_fd >= 0 && peer_closed(client_fd)) {
      ex->cancel();
      return;
    }
  }
  if (!stream) {
    auto p = ex->pipe().lock();
    if (p->failed || !p->head) return send_error(res, lost(up, p->error));
    res.status = p->status;
    std::string type = "application/json";
    for (const auto& [k, v] : p->headers) {
      if (k == "Content-Type") {
        type = v;
      } else {
        res.set_header(k, v);
      }
    }
    res.set_content(take_chunks(p->chunks), type);
    return;
  }
  {
    auto p = ex->pipe().lock();
    res.status = p->status;
    for (const auto& [k, v] : p->headers) {
      if (k != "Content-Type") res.set_header(k, v);
    }
  }
  res.set_chunked_content_provider(
      "text/event-stream",
      [ex, up](size_t, httplib::DataSink& sink) {
        std::string data;
        bool ended = false, failed = false;
        std::string error;
        {
          auto p = ex->pipe().lock();
          p.wait_for(kRelayPoll,
                     [](const Exchange::Pipe& s) { return s.ended || !s.chunks.empty(); });
          data = take_chunks(p->chunks);
          ended = p->ended;
          failed = p->failed;
          error = p->error;
        }
        if (!data.empty() && !sink.write(data.data(), data.size())) {
          ex->cancel();  // the client went away
          return false;
        }
        if (ended) {
          if (failed) {
            const std::string e = "data: " + error_body(lost(up, error)) + "\n\n";
            sink.write(e.data(), e.size());
          }
          sink.done();
        }
        return true;
      },
      [ex](bool) { ex->cancel(); });
}

}  // namespace strata::server
