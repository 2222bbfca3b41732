#include "rpc/client.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "rpc/auth.h"

namespace strata::rpc {
namespace {

// The receiver wakes at least this often when nothing is in flight, to notice new deadlines.
constexpr int kIdlePollMs = 100;

Result<int64_t> env_int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 0);
  if (*end != '\0' || errno == ERANGE || x < min || x > max) {
    return invalid_argument(std::string(name) + "='" + v + "' is not an integer in [" +
                            std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int64_t>(x);
}

uint64_t pieces_bytes(std::span<const Piece> pieces) {
  uint64_t n = 0;
  for (const Piece& p : pieces) n += p.size();
  return n;
}

}  // namespace

Status client_options_from_env(ClientOptions* o) {
  STRATA_ASSIGN_OR_RETURN(int64_t timeout,
                          env_int("STRATA_RPC_TIMEOUT_MS", o->timeout_ms, 1, INT32_MAX));
  o->timeout_ms = static_cast<int>(timeout);
  STRATA_ASSIGN_OR_RETURN(int64_t hide, env_int("STRATA_RPC_HIDE_CAPS", 0, 0, INT64_MAX));
  o->hide_caps |= static_cast<uint64_t>(hide);
  STRATA_ASSIGN_OR_RETURN(int64_t stats, env_int("STRATA_RPC_STATS", 0, 0, 1));
  STRATA_ASSIGN_OR_RETURN(int64_t period, env_int("STRATA_RPC_STATS_MS", 5000, 1, INT32_MAX));
  o->stats_period_ms = stats ? static_cast<int>(period) : 0;
  STRATA_ASSIGN_OR_RETURN(int64_t major,
                          env_int("STRATA_RPC_VERSION_MAJOR", o->version_major, 0, 65535));
  o->version_major = static_cast<uint16_t>(major);
  STRATA_ASSIGN_OR_RETURN(int64_t no_batched_get, env_int("STRATA_RPC_NO_BATCHED_GET", 0, 0, 1));
  o->batched_get = no_batched_get == 0;
  STRATA_ASSIGN_OR_RETURN(int64_t no_async_copy, env_int("STRATA_RPC_NO_ASYNC_COPY", 0, 0, 1));
  o->async_copy = no_async_copy == 0;
  STRATA_ASSIGN_OR_RETURN(int64_t handoff, env_int("STRATA_RPC_HANDOFF", 1, 0, 1));
  o->handoff = handoff == 1;
  return Status::ok();
}

// --- Pending ----------------------------------------------------------------------------------

const Result<Message>& Pending::wait() {
  state_.lock().wait([](const State& s) { return s.done; });
  return result_;
}

void Pending::then(Callback fn) {
  {
    auto s = state_.lock();
    if (!s->done) {
      s->callbacks.push_back(std::move(fn));
      return;
    }
  }
  fn(result_);
}

// Callbacks run before wait() returns: a read's data is in place when its waiter wakes.
void Pending::complete(Result<Message> r) {
  std::vector<Callback> callbacks;
  {
    auto s = state_.lock();
    if (s->done || s->completing) return;
    s->completing = true;
    result_ = std::move(r);
    callbacks.swap(s->callbacks);
  }
  // result_ is immutable from here on: callbacks read it without the lock.
  for (Callback& fn : callbacks) fn(result_);
  {
    auto s = state_.lock();
    callbacks.clear();
    callbacks.swap(s->callbacks);  // added while the first ones ran
    s->done = true;
  }
  state_.notify_all();
  for (Callback& fn : callbacks) fn(result_);
}

// --- Connection -------------------------------------------------------------------------------

Connection::Connection(const ClientOptions& options) : options_(options) {
  label_ = options.name + "[" + options.endpoint + "]";
}

Result<std::shared_ptr<Connection>> Connection::open(const ClientOptions& options) {
  auto c = std::shared_ptr<Connection>(new Connection(options));
  auto t = transport_connect(options.endpoint, options.connect_timeout_ms);
  if (!t.is_ok()) return t.status().with_context("worker " + c->label_);
  c->transport_ = std::move(t).value();
  Status s = c->hello();
  if (!s.is_ok()) {
    c->transport_->shutdown();
    return s;
  }
  c->receiver_ = std::thread([raw = c.get()] { raw->receive_loop(); });
  if (options.stats_period_ms > 0) {
    c->reporter_ = std::thread([raw = c.get()] { raw->report_loop(); });
  }
  if (c->worker_idle_ms_ > 0) {
    c->last_send_ns_.store(Clock::now().time_since_epoch().count());
    c->keepalive_ = std::thread([raw = c.get()] { raw->keepalive_loop(); });
  }
  return c;
}

// The handshake runs before the receiver thread starts, so it reads its responses itself.
Status Connection::hello() {
  const int timeout = options_.connect_timeout_ms;
  auto exchange = [&](Command c, const std::vector<uint8_t>& payload) -> Result<Message> {
    Header h;
    h.command = c;
    h.request_id = next_id_++;
    const Piece piece(payload.data(), payload.size());
    stats_.on_send(c, kHeaderBytes + payload.size(), true, false);
    STRATA_RETURN_IF_ERROR(transport_->send(h, std::span<const Piece>(&piece, 1)));
    STRATA_ASSIGN_OR_RETURN(Message m, transport_->recv(timeout));
    stats_.on_receive(c, kHeaderBytes + m.payload.size(), false);
    if (!(m.header.flags & kFlagResponse) || m.header.command != c ||
        m.header.request_id != h.request_id) {
      return invalid_argument(std::string("expected the response to ") + command_name(c) +
                              " (request " + std::to_string(h.request_id) + "), got " +
                              command_name(m.header.command) + " request " +
                              std::to_string(m.header.request_id));
    }
    if (m.header.status != 0) {
      return status_from_wire(
          m.header.status,
          std::string_view(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    }
    return m;
  };
  const std::string who = "worker " + label_;
  const std::string mine =
      std::to_string(options_.version_major) + "." + std::to_string(kVersionMinor);

  STRATA_ASSIGN_OR_RETURN(Nonce client_nonce, auth_nonce());
  HelloRequest req;
  req.major = options_.version_major;
  req.minor = kVersionMinor;
  req.caps = kCapAll & ~options_.hide_caps;
  req.client_nonce = client_nonce;
  std::vector<uint8_t> payload;
  encode(req, &payload);
  auto m = exchange(Command::kHello, payload);
  if (!m.is_ok()) {
    return m.status().with_context(who + " refused the handshake (client protocol " + mine + ")");
  }
  STRATA_ASSIGN_OR_RETURN(HelloResponse resp, decode_hello_response(m->payload));
  if (resp.major != options_.version_major) {
    return unavailable(who + " speaks protocol " + std::to_string(resp.major) + "." +
                       std::to_string(resp.minor) + ", this client " + mine +
                       ": major versions must match (update one of them)");
  }
  if (resp.auth == kAuthChallenge) {
    if (options_.token.empty()) {
      return unavailable(who + " requires a token (--rpc-token-file or " + std::string(kTokenEnv) +
                         ")");
    }
    HelloRequest answer = req;
    answer.step = 1;
    answer.mac = auth_client_mac(options_.token, resp.server_nonce, client_nonce);
    payload.clear();
    encode(answer, &payload);
    auto accepted = exchange(Command::kHello, payload);
    if (!accepted.is_ok()) return accepted.status().with_context(who + ": authentication");
    STRATA_ASSIGN_OR_RETURN(HelloResponse a, decode_hello_response(accepted->payload));
    if (a.auth != kAuthAccepted ||
        !auth_mac_equal(a.server_mac,
                        auth_server_mac(options_.token, client_nonce, resp.server_nonce))) {
      return unavailable(who + " did not prove that it knows the token");
    }
    resp.caps = a.caps;
    resp.idle_timeout_ms = a.idle_timeout_ms;
    resp.device_caps = a.device_caps;
  } else if (resp.auth != kAuthNone) {
    return invalid_argument(who + ": HELLO auth state " + std::to_string(resp.auth) +
                            " is not none or challenge");
  }
  caps_ = resp.caps & req.caps;
  worker_idle_ms_ = resp.idle_timeout_ms;
  // A worker without the bit is older than op capabilities: it runs the baseline.
  device_caps_ = has(kCapOpCaps) ? resp.device_caps : device_caps_baseline();
  device_caps_.kv_planes = has(kCapKvPlanes);
  device_caps_.kv_q8_0 = has(kCapKvQ8_0);

  auto info = exchange(Command::kDeviceInfo, {});
  if (!info.is_ok()) return info.status().with_context(who + ": DEVICE_INFO");
  auto decoded = decode_device_info_response(info->payload);
  if (!decoded.is_ok()) return decoded.status().with_context(who + ": DEVICE_INFO");
  info_ = std::move(decoded).value();
  return Status::ok();
}

Connection::~Connection() {
  state_.lock()->stopping = true;
  state_.notify_all();
  if (transport_) transport_->shutdown();
  if (receiver_.joinable()) receiver_.join();
  if (reporter_.joinable()) reporter_.join();
  if (keepalive_.joinable()) keepalive_.join();
  fail_all(unavailable("connection to worker " + label_ + " closed"));
  if (options_.stats_period_ms > 0) {
    std::fprintf(stderr, "%s", rpc_stats_format(label_, "total", stats_.snapshot()).c_str());
  }
}

Status Connection::broken() const { return state_.lock()->broken; }

// Sends one message; a send that fails closes the connection (its stream state is unknown).
Status Connection::send_locked_free(const Header& h, std::span<const Piece> pieces) {
  uint64_t ticket = 0;
  {
    auto st = state_.lock();
    if (!st->broken.is_ok()) return st->broken;
    ticket = st->next_send++;
    st->sends[ticket] = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  }
  Status s = transport_->send(h, pieces);
  last_send_ns_.store(Clock::now().time_since_epoch().count());
  state_.lock()->sends.erase(ticket);
  if (!s.is_ok()) {
    Status e = unavailable("worker " + label_ + ": sending " + command_name(h.command) +
                           " failed: " + s.message());
    fail_all(e);
    return broken();
  }
  return Status::ok();
}

Status Connection::send_one_way(Command c, std::span<const Piece> pieces, bool step,
                                uint32_t stream) {
  Header h;
  h.command = c;
  h.flags = kFlagOneWay;
  h.request_id = next_id_++;
  h.stream = has(kCapStreams) ? stream : 0;
  stats_.on_send(c, kHeaderBytes + pieces_bytes(pieces), false, step);
  return send_locked_free(h, pieces);
}

std::shared_ptr<Pending> Connection::send_request(Command c, std::span<const Piece> pieces,
                                                  bool step, uint32_t stream) {
  auto p = std::make_shared<Pending>(c, step);
  Header h;
  h.command = c;
  h.request_id = next_id_++;
  h.stream = has(kCapStreams) ? stream : 0;
  {
    auto st = state_.lock();
    if (!st->broken.is_ok()) {
      Status e = st->broken;
      p->complete(e);
      return p;
    }
    st->in_flight[h.request_id] = {p,
                                   Clock::now() + std::chrono::milliseconds(options_.timeout_ms)};
  }
  stats_.on_send(c, kHeaderBytes + pieces_bytes(pieces), true, step);
  // On failure the connection is closed and fail_all has completed `p`.
  (void)send_locked_free(h, pieces);
  return p;
}

Result<Message> Connection::call(Command c, std::span<const Piece> pieces) {
  std::shared_ptr<Pending> p = send_request(c, pieces, false);
  return p->wait();
}

void Connection::fail_all(const Status& s) {
  std::map<uint32_t, InFlight> failed;
  Status reason;
  {
    auto st = state_.lock();
    if (st->broken.is_ok()) st->broken = s;
    reason = st->broken;
    failed.swap(st->in_flight);
  }
  if (transport_) transport_->shutdown();
  for (auto& [id, f] : failed) f.pending->complete(reason);
}

void Connection::receive_loop() {
  for (;;) {
    int wait_ms = kIdlePollMs;
    {
      auto st = state_.lock();
      if (st->stopping || !st->broken.is_ok()) return;
      Clock::time_point earliest = Clock::time_point::max();
      for (const auto& [id, f] : st->in_flight) earliest = std::min(earliest, f.deadline);
      for (const auto& [t, d] : st->sends) earliest = std::min(earliest, d);
      if (earliest != Clock::time_point::max()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(earliest - Clock::now()).count();
        wait_ms = static_cast<int>(std::clamp<int64_t>(left, 1, INT_MAX));
      }
    }
    // Waiting for a message to start is bounded by the next deadline (or the idle poll); a
    // message that has started may stall for up to the request timeout, whatever the poll.
    auto m = transport_->try_recv(wait_ms, options_.timeout_ms);
    if (!m.is_ok()) {
      if (state_.lock()->stopping) return;
      fail_all(unavailable("worker " + label_ + ": " + m.status().message()));
      return;
    }
    if (!m->has_value()) {
      std::string late;
      {
        auto st = state_.lock();
        if (st->stopping) return;
        const auto now = Clock::now();
        for (const auto& [id, f] : st->in_flight) {
          if (f.deadline <= now) {
            late = std::string("no response to ") + command_name(f.pending->command()) +
                   " (request " + std::to_string(id) + ")";
            break;
          }
        }
        for (const auto& [t, d] : st->sends) {
          if (late.empty() && d <= now) late = "a send did not complete";
        }
      }
      if (late.empty()) continue;  // idle: nothing was due
      fail_all(unavailable("worker " + label_ + ": " + late + " within " +
                           std::to_string(options_.timeout_ms) +
                           " ms (STRATA_RPC_TIMEOUT_MS); the worker is stalled or gone"));
      return;
    }
    Message msg = std::move(**m);
    InFlight f;
    {
      auto st = state_.lock();
      auto it = st->in_flight.find(msg.header.request_id);
      if (it != st->in_flight.end() && (msg.header.flags & kFlagResponse) &&
          msg.header.command == it->second.pending->command()) {
        f = std::move(it->second);
        st->in_flight.erase(it);
      }
    }
    if (!f.pending) {
      fail_all(invalid_argument("worker " + label_ + " sent " + command_name(msg.header.command) +
                                " for request " + std::to_string(msg.header.request_id) +
                                ", which is not a request in flight"));
      return;
    }
    stats_.on_receive(msg.header.command, kHeaderBytes + msg.payload.size(), f.pending->step());
    if (msg.header.status != 0) {
      const std::string_view text(reinterpret_cast<const char*>(msg.payload.data()),
                                  msg.payload.size());
      f.pending->complete(
          status_from_wire(msg.header.status, text)
              .with_context("worker " + label_ + ": " + command_name(msg.header.command)));
    } else {
      f.pending->complete(std::move(msg));
    }
  }
}

// Any message resets the worker's idle timer; only a connection silent for a quarter of the
// timeout sends one of its own. Its answer is not waited for: a lost worker fails it like any
// other request, through the receiver.
void Connection::keepalive_loop() {
  const auto period = std::chrono::milliseconds(std::max<uint64_t>(worker_idle_ms_ / 4, 1));
  for (;;) {
    {
      auto st = state_.lock();
      st.wait_for(period / 4, [](const State& s) { return s.stopping; });
      if (st->stopping || !st->broken.is_ok()) return;
    }
    const Clock::time_point last{Clock::duration(last_send_ns_.load())};
    if (Clock::now() - last < period) continue;
    (void)send_request(Command::kDeviceInfo, {}, false);
  }
}

void Connection::report_loop() {
  StatsSnapshot last = stats_.snapshot();
  for (;;) {
    if (state_.lock().wait_for(std::chrono::milliseconds(options_.stats_period_ms),
                               [](const State& s) { return s.stopping; })) {
      return;
    }
    const StatsSnapshot now = stats_.snapshot();
    const StatsSnapshot d = now - last;
    last = now;
    bool any = false;
    for (const CommandCounters& c : d.commands) any = any || c.count > 0;
    if (!any) continue;
    std::fprintf(
        stderr, "%s",
        rpc_stats_format(label_, "last " + std::to_string(options_.stats_period_ms) + " ms", d)
            .c_str());
  }
}

}  // namespace strata::rpc
